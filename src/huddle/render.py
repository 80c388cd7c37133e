"""Text for a person from the API's answers (JSON values in, strings out).

Pure functions, no I/O: the ``huddle`` command prints them, and so does the
demo.  ``--json`` prints the answers themselves instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "conflicts_text",
    "doc_apply_text", "doc_history_text", "event_text", "feature_tables", "fields_text", "guests_text", "info_text",
    "jams_text", "limits_text", "local_time", "log_summary_text", "log_text", "named", "peers_text", "posts_text",
    "simulate_text", "size_text", "system_text", "table", "tags_text", "tail_text", "types_text", "with_names",
]

Names = Mapping[str, str]  # a node's id (32 hex) or key fingerprint -> its name (ApiClient.names)
_NONE: Names = {}


def named(ident: str, names: Names, digits: int = 8) -> str:
    """A node id (or key fingerprint) for a person: ``bob (35c9e1d4)``, or the short id alone
    when no name is known for it."""
    name = names.get(ident)
    return f"{name} ({ident[:digits]})" if name else ident[:digits]


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the first row is the heading."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def peers_text(peers: list[dict[str, Any]], me: dict[str, Any] | None = None) -> str:
    """The peers as a table; ``me`` (``GET /api/v1/node``) adds a line for this node and its key."""
    head = "" if me is None else f"this node: {me['name']} {me['uuid'][:8]} key {me.get('key', '-')}"
    if me is not None and me.get("tags"):
        head += f" tags {tags_text(me['tags'])}"
    head += "" if me is None else "\n"
    if not peers:
        return head + "no peers"
    rows = [("NAME", "STATE", "LAST HEARD", "ENDPOINT", "RTT ms", "KEY", "TAGS")]
    for p in peers:
        rtt = "-" if p.get("rtt_ms") is None else f"{p['rtt_ms']:.2f}"
        # "unverified": a legacy uuid, not the one its key gives (open mode only; docs/security.md)
        key = (p.get("key") or "-") + ("" if p.get("verified") else " unverified")
        state = p["state"] if p.get("since") is None else f"{p['state']} since {clock_time(p['since'])}"
        rows.append((named(p["uuid"], {p["uuid"]: p["name"]}), state, _heard(p, me), p["endpoint"] or "-", rtt, key,
                     tags_text(p.get("tags"))))
    return head + table(rows)


def _heard(peer: dict[str, Any], me: dict[str, Any] | None) -> str:
    """How long ago the peer was last heard: an age by the node's own mesh time (both are mesh
    time: the two machines' clocks never meet here), else that time itself, local."""
    seen = peer.get("last_seen")
    if not isinstance(seen, int | float):
        return "-"
    if me is not None and isinstance(me.get("time"), int | float):
        return f"{max(0.0, me['time'] - seen):.1f} s ago"
    return local_time(seen)


def tags_text(tags: Mapping[str, str] | None) -> str:
    """A node's tags as ``k=v,k=v`` by key ("-": none)."""
    return ",".join(f"{k}={v}" for k, v in sorted((tags or {}).items())) or "-"


def system_text(s: dict[str, Any]) -> str:
    names = {m["uuid"]: m["name"] for m in s["members"]}
    rows: list[tuple[str, ...]] = [("NAME", "UUID", "KEY", "TYPE", "STATE", "SINCE", "HEALTH", "PROBLEMS", "RTT ms",
                                    "MSG/S IN", "MSG/S OUT", "AGE s", "TAGS")]
    for m in s["members"]:
        r = m.get("rates") or {}
        since = m.get("since")
        rows.append((m["name"], m["uuid"][:8], m.get("key") or "-", m["type"], m.get("state", "alive"),
                     "-" if since is None else clock_time(since), m["health"], ",".join(m["problems"]) or "-",
                     "-" if m.get("rtt_ms") is None else f"{m['rtt_ms']:.2f}",
                     f"{r.get('msgs_in', 0):.0f}", f"{r.get('msgs_out', 0):.0f}",
                     "-" if m.get("age") is None else f"{m['age']:.1f}", tags_text(m.get("tags"))))
    links: list[tuple[str, ...]] = [("LINK", "STATE", "RTT ms")]
    for x in s["links"]:
        a, b = names.get(x["a"], x["a"][:8]), names.get(x["b"], x["b"][:8])
        state = x["state"]
        if state == "one-way":
            state = f"one-way {names.get(x['from'], '?')} -> {names.get(x['to'], '?')}"
        links.append((f"{a} - {b}", state, "-" if x.get("rtt_ms") is None else f"{x['rtt_ms']:.2f}"))
    out = [table(rows)]
    if len(links) > 1:
        out += ["", table(links)]
    for feature, facts in feature_tables(s["members"]).items():
        out += ["", feature, table(facts)]
    out += ["", f"digest {s['digest']}"]
    return "\n".join(out)


def feature_tables(members: list[dict[str, Any]]) -> dict[str, list[tuple[str, ...]]]:
    """The features' facts of the system picture (each member's ``ext``, protocol.md 14.1),
    a table per feature by name: a row per member that reports it, a column per fact (in
    the order they first appear; "-" where a member does not give one).  Nothing of any one
    feature is known here: what a feature reports is what is shown."""
    by_feature: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for m in members:
        for feature, facts in (m.get("ext") or {}).items():
            by_feature.setdefault(feature, []).append((m["name"], facts))
    tables = {}
    for feature in sorted(by_feature):
        rows = by_feature[feature]
        keys = list(dict.fromkeys(k for _, facts in rows for k in facts))
        tables[feature] = [("NAME", *(k.upper() for k in keys))] + [
            (name, *("-" if k not in facts else _fact(facts[k]) for k in keys)) for name, facts in rows]
    return tables


def _fact(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def guests_text(g: dict[str, Any]) -> str:
    head = f"room {g['room']!r}: marco UDP {g['marco_port']}, TCP {g['tcp_port']}, WebSocket {g['ws_port']}"
    out = [head, ""]
    if g["guests"]:
        rows: list[tuple[str, ...]] = [("GUEST", "VIA", "ADDRESS", "HEARS", "SPEAKS", "HEARTBEAT", "IN", "OUT")]
        for x in g["guests"]:
            rows.append((x["name"], x["transport"], x["address"], ",".join(x["hears"]) or "-",
                         ",".join(x["speaks"]) or "-", f"{x['heartbeat']:g} s" if x["heartbeat"] else "-",
                         str(x["events_in"]), str(x["events_out"])))
        out.append(table(rows))
    else:
        out.append("no guests")
    for title, key in (("free guests (grab with --grab NAME)", "free"), ("guests of other rooms", "others")):
        if g[key]:
            out += ["", title + ":"] + [f"  {x['name']} ({x['dialect']} {x['version']}) at {x['address']}"
                                        + (f", room {x['room']!r}" if x["room"] else "") for x in g[key]]
    return "\n".join(out)


def types_text(types: list[dict[str, Any]]) -> str:
    rows: list[tuple[str, ...]] = [("TYPE", "BEAT s", "LOST", "GONE AFTER s", "SEND RATE", "CUT OFF", "ABOUT")]
    for t in types:
        rate = "no limit" if not t["send_rate"] else f"{t['send_rate']} B/s"
        rows.append((t["name"], f"{t['heartbeat_interval']:g}", str(t["lost_heartbeats"]),
                     f"{t['gone_after']:g}", rate, t["on_cut_off"], t["about"]))
    return table(rows)


def limits_text(rows: Sequence[tuple[str, object, str]]) -> str:
    width = max((len(k) for k, _, _ in rows), default=0)
    return "\n".join(f"{key:<{width}}  {value!s:>12}  {about}" for key, value, about in rows)


def clock_time(t: float) -> str:
    """Seconds since the epoch as this machine's local time of day (HH:MM:SS): a table's cell."""
    return datetime.fromtimestamp(t).astimezone().strftime("%H:%M:%S")


def local_time(t: float) -> str:
    """Seconds since the epoch as this machine's local time, ISO 8601 with its offset (to the ms)."""
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


def _value(key: str, v: object) -> str:
    if v is None or v == {}:  # nothing, or an empty object (a node without tags)
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and (key == "time" or key.endswith("_at")):
        return local_time(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list) and all(not isinstance(x, dict | list) for x in v):
        return ", ".join(_value("", x) for x in v) or "-"
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def fields_text(fields: Mapping[str, Any], indent: str = "") -> str:
    """A JSON object as aligned ``key  value`` lines, an object within it as its own block
    indented below its key; times (a ``time`` or ``*_at`` key) local and ISO, None as "-"."""
    width = max((len(k) for k in fields), default=0)
    lines = []
    for k, v in fields.items():
        if isinstance(v, dict) and v:
            lines += [f"{indent}{k}", fields_text(v, indent + "  ")]
        else:
            lines.append(f"{indent}{k.replace('_', ' '):<{width}}  {_value(k, v)}")
    return "\n".join(lines)


def info_text(info: dict[str, Any]) -> str:
    """``huddle info``: the node's fields aligned (its counters are ``--json``'s)."""
    return fields_text({k: v for k, v in info.items() if k != "stats"})


def simulate_text(result: Mapping[str, Any], wall_seconds: float, *, counters: bool) -> str:
    """One run of ``huddle simulate`` (:class:`huddle.sim.ScenarioResult` as a dict): its line,
    then, with ``counters``, the counters that moved, aligned."""
    status = "converged" if result["converged"] else "DIVERGED"
    line = (f"seed {result['seed']}: {status}: {result['nodes']} nodes, {result['events']} events, "
            f"{result['sim_seconds']:.1f} simulated s in {wall_seconds:.1f} s")
    moved = {k: v for k, v in result["stats"].items() if v}
    if not counters or not moved:
        return line
    rest = len(result["stats"]) - len(moved)
    return "\n".join([line, fields_text(moved, "  ")] + ([f"  ({rest} other counters 0)"] if rest else []))


def event_text(e: dict[str, Any], names: Names = _NONE) -> str:
    """One line of ``huddle tail``; ``names`` gives the nodes' names beside their ids."""
    kind = e.get("type")
    who = e.get("name") or (e.get("peer") or e.get("from") or "")[:8]
    if kind == "chat":
        return f"<{who}> {e.get('text')}"
    ident = e.get("peer") or e.get("from") or ""
    if e.get("name") and ident:  # the peer's events carry its name: shown beside its id
        who = named(ident, {ident: e["name"]})
    if kind == "peer_joined":
        return f"* {who} joined from {e.get('endpoint')}"
    if kind == "peer_left":
        return f"* {who} left ({e.get('reason')})"
    if kind == "peer_state":
        return f"* {who} is {e.get('state')}"
    if kind == "peer_refused":
        return f"! refused {e.get('endpoint')}: {e.get('reason')}"
    if kind == "seed_silent":
        return f"! seed {e.get('endpoint')} does not answer ({e.get('tries')} tries in {e.get('silent_s', 0):.0f} s)"
    if kind == "event":
        body = json.dumps(e.get("body"), ensure_ascii=False)
        return f"+ {named(e.get('source', ''), names)}#{e.get('seq')} {e.get('kind')} {body}"
    if kind == "message":
        shown = e.get("text") if "text" in e else f"<{e.get('size')} octets>"
        return f"> {named(e.get('peer') or '', names)}#{e.get('seq')} {shown}"
    if kind == "post_new":
        where = f"from {named(e.get('from') or '', names)}" if e.get("from") else "added here"
        return f"+ post {e.get('id', '')[:12]} {e.get('subject')!r} ({e.get('size')} octets, {where})"
    if kind == "cut_off":
        return "! cut off from every peer"
    if kind == "reconnected":
        return "* reconnected to the group"
    if kind == "clock_synced":
        return f"* clock synced to {who}: offset {e.get('offset', 0):+.6f} s, rtt {e.get('rtt_ms', 0):.2f} ms"
    return json.dumps(e, ensure_ascii=False)



def tail_text(e: dict[str, Any], names: Names = _NONE, arrived: float | None = None) -> str:
    """One line of ``huddle tail``, its time first as ``huddle log`` has it (local ISO 8601): a
    log event's own timestamp, anything else's arrival (``arrived``, seconds since the epoch)."""
    at = e.get("timestamp") if e.get("type") == "event" else arrived
    return f"{local_time(at) if isinstance(at, int | float) else '-'}  {event_text(e, names)}"


def with_names(e: dict[str, Any], names: Names) -> dict[str, Any]:
    """An API answer's object with the name beside each node id it gives (``source`` ->
    ``source_name``, ``author_key`` -> ``author_name``, ...) where ``names`` knows it;
    additive: no field of the answer is changed."""
    out = dict(e)
    for key in ("source", "peer", "from", "received_from", "author_key", "uuid"):
        ident = e.get(key)
        label = f"{key.removesuffix('_key')}_name" if key != "uuid" else "name"
        if isinstance(ident, str) and ident in names and label not in e:
            out[label] = names[ident]
    return out


def log_text(events: list[dict[str, Any]], names: Names = _NONE) -> str:
    """``huddle log``: a line per event, its time (the source's clock, local ISO) first."""
    return "\n".join(
        f"{local_time(e['timestamp'])}  {named(e['source'], names)}#{e['seq']:<6} {e['kind']:<16} "
        f"{json.dumps(e['body'], ensure_ascii=False)}" for e in events
    ) or "no events"


def log_summary_text(summary: dict[str, Any], names: Names = _NONE) -> str:
    return "\n".join(
        [f"events: {summary['events']}"]
        + [f"{named(s, names)}  up to {q}" for s, q in sorted(summary["version_vector"].items())]
        + [f"{named(s, names)}  missing {r}" for s, r in sorted(summary["gaps"].items())]
    )


def doc_apply_text(result: dict[str, Any]) -> str:
    return "\n".join(f"recorded {o['source'][:8]}#{o['seq']}" + (f", new eids {', '.join(o['eids'])}" if o["eids"] else "")
                     + (f", held as a conflict: {o['conflict']['field']} is {o['conflict']['owner']}'s"
                        if "conflict" in o else "") for o in result["ops"])


def doc_history_text(h: dict[str, Any]) -> str:
    lines = [f"<{h['tag'] or '?'}> {h['eid']}" + ("" if h["present"] else " (removed)")]
    for e in h["history"]:
        detail = {k: v for k, v in e.items() if k not in ("source", "seq", "timestamp", "op")}
        lines.append(f"  {e['timestamp']:.3f}  {e['source'][:8]}#{e['seq']:<5} {e['op']:<6} "
                     f"{json.dumps(detail, ensure_ascii=False)}")
    return "\n".join(lines)


def _jam(j: dict[str, Any] | None) -> str:
    return "none" if j is None else f"period {j['period']} jam {j['jam']}"


def conflicts_text(c: dict[str, Any]) -> str:
    """The bout's conflicts: writes by a role that does not own the field (docs/document.md "Roles")."""
    lines = [f"{len(c['conflicts'])} conflict(s), {len(c['resolved'])} resolved by the head NSO"]
    for x in c["conflicts"]:
        lines.append(f"  {x['time']:.3f}  {x['source'][:8]}#{x['seq']:<5} {x['by']} wrote {x['field']}"
                     f"{' (' + x['team'] + ')' if 'team' in x else ''} = {x['value']!r} of {x['eid']}: {x['owner']}'s")
    return "\n".join(lines)


def jams_text(j: dict[str, Any]) -> str:
    return (f"active:         {_jam(j['active'])}\n"
            f"just completed: {_jam(j['just_completed'])}\n"
            f"upcoming:       {_jam(j['upcoming'])}" + ("\nthe bout is over" if j["bout_over"] else ""))


def size_text(n: int) -> str:
    """Octets for a person: 512 B, 1.5 KiB, 4.0 MiB."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _author(key: str, names: Names) -> str:
    """A post's author: its name and the start of its key's fingerprint, else the whole fingerprint."""
    return named(key, names, 9) if key in names else key  # XXXX-XXXX of XXXX-XXXX-XXXX-XXXX


def _post_time(stamp: str) -> str:
    """A post's timestamp (UTC, ``yyyy-mm-ddThh:mm:ssZ``: part of its id) as local ISO 8601, as
    every time the command shows; as it came if it is not that form."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).astimezone().isoformat()
    except (TypeError, ValueError):
        return str(stamp)


def posts_text(posts: list[dict[str, Any]], names: Names = _NONE) -> str:
    """The posts, a line each; ``names`` (by key fingerprint) names their authors."""
    return "\n".join(f"{p['id'][:12]}  {_post_time(p['timestamp'])}  {size_text(p['size']):>10}  "
                     f"{p['mime_type']:<24} {p['subject']}"
                     + (f"  (re {p['parent_id'][:12]})" if p.get("parent_id") else "")
                     + (f"  by {_author(p['author_key'], names)}" if p.get("author_key") else "") for p in posts) \
        or "no posts"
