"""The ``huddle`` command's arguments: the argparse tree, its help and its checks of values."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import __version__
from ..config import BUILTIN_TYPES, DEFAULT_API, DEFAULT_BEACON_PORT
from ..features import default_features
from ..ports import Feature
from ..wire import TagError, parse_filter

__all__ = ["build_parser", "parse_args"]

NODE_EPILOG = """\
examples, one per way of finding peers (they mix: one group may use all of them):
  # UDP beacons (the default): nodes on this machine, on loopback
  huddle node --name alice --group derby --data-dir /tmp/alice --interface lo --api 127.0.0.1:0
  # seeds: dial a known peer's ROUTER endpoint; no beacons
  huddle node --name bob --group derby --data-dir ~/bob --no-beacon --seed 192.168.1.20:50123
  # mDNS / DNS-SD, for a Wi-Fi that passes multicast but not broadcast
  huddle node --name carol --group derby --data-dir ~/carol --no-beacon --mdns
  # the source document's service type
  huddle node --name dave --group derby --data-dir ~/dave --mdns --mdns-type _nsode_derbyos_com._tcp
  # a naming broker at a well-known address (run one with: huddle broker --pub tcp://*:5680 --sub tcp://*:5681)
  huddle node --name erin --group derby --data-dir ~/erin --no-beacon --naming tcp://10.0.0.5:5680
  # everything from a TOML file; flags win
  huddle node --config node.toml --name carol

Every flag is a TOML key of the same name: top-level ones (--name: name = "carol") at the top, the
others in their section's table without its prefix (--beacon-port: [discovery] beacon-port,
--posts-policy: [posts] policy, --guest-port: [guests] port, --guests: [guests] enabled, --api:
[api] address); a flag's name at the top level works too.  docs/configuration.md lists them all.

The first line the node prints on standard output is "api http://HOST:PORT";
logs go to standard error.  SIGINT or SIGTERM make it say goodbye (GBYE) and stop.
"""

CLIENT_EPILOG = f"""\
The API address comes from --api, else $HUDDLE_API, else http://{DEFAULT_API}.
A node whose API listens beyond loopback wants its token: --token, else $HUDDLE_TOKEN.
"""

GROUP_EPILOG = """\
examples:
  huddle group new derby                 # writes derby.key (mode 0600) and prints the join code
  huddle group show derby.key            # name, key id and join code again

A member joins with the file (huddle node --group-key derby.key) or with the code read
aloud (huddle node --group derby --join XXXX-XXXX-XXXX-XXXX-XXXX-XXXX): the code and the
group's name give the secret.  docs/security.md says what the secret protects.
"""


def _port_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    if not sep or not lo.isdigit() or not hi.isdigit():
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH, e.g. 49152-65535, got {text!r}")
    return int(lo), int(hi)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of events, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


# The mesh's other timers ([timing] in the config file): flag, type, help.
_TIMERS: tuple[tuple[str, Callable[[str], object], str], ...] = (
    ("--handshake-timeout", _positive, "a session whose handshake has not completed in this time is dropped (default: 5)"),
    ("--seed-retry", _positive, "how often an unanswered seed is dialled again (default: 1)"),
    ("--rtt-probe-interval", _positive, "round-trip probes to each peer, at most this often (default: 5)"),
    ("--gone-retention", _positive, "how long a gone peer is still listed (default: 60)"),
    ("--membership-interval", _positive, "mean time between two member lists (MEMB) sent to a random peer (default: 3)"),
    ("--seed-reopen-after", _positive,
     "an unanswered seed's connection is closed and opened afresh after this long (default: 30)"),
    ("--exclude-after-errors", int,
     "undecodable messages from an admitted peer before it is excluded; 0: never (default: 100)"),
    ("--exclude-slow-after", _non_negative,
     "how long a peer's send buffer may stay full before it is excluded; 0: never (default: 60)"),
)


def _join_timeout(text: str) -> float:
    """``huddle join --timeout``: 0.1..60 seconds, as the API takes it."""
    value = _positive(text)
    if not 0.1 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be 0.1..60 seconds, got {text!r}")
    return value


def _tag_filter(text: str) -> str:
    """A ``--tag`` filter of ``huddle peers``, checked here: a malformed one is a usage error."""
    try:
        parse_filter([text])
    except TagError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_client_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api", metavar="URL", help=f"the node's API (default: $HUDDLE_API or http://{DEFAULT_API})")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--token", metavar="TOKEN",
                   help="the node's API token, when its API listens beyond loopback (default: $HUDDLE_TOKEN)")


def build_parser(features: Sequence[Feature] | None = None) -> argparse.ArgumentParser:
    """The whole tree: the core's commands and each feature's (None: the default features).
    A feature's command carries its handler as ``args.api_handler`` (cli/commands.py runs it)."""
    parser = argparse.ArgumentParser(
        prog="huddle",
        description="huddle: a brokerless peer-to-peer event mesh for small groups of machines on one network.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'huddle COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"huddle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    node = sub.add_parser(
        "node", help="run a node in the foreground",
        description="Run a huddle node: join GROUP on this network, serve the local API.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=NODE_EPILOG,
    )
    node.add_argument("--config", type=Path, metavar="FILE.toml", help="read settings from a TOML file first")
    node.add_argument("--name", help="a name for humans (default: the host name)")
    node.add_argument("--group", help="the group (bout) to join; nodes of other groups are refused (default: '')")
    secret = node.add_mutually_exclusive_group()
    secret.add_argument("--group-key", type=Path, metavar="FILE",
                        help="the group's secret, from 'huddle group new' (sets --group to the file's group)")
    secret.add_argument("--join", metavar="CODE", help="the group's join code, read aloud or copied; needs --group")
    node.add_argument("--open", action="store_true", default=None,
                      help="run an OPEN group, without a secret: anyone on this network who knows the group's name "
                      "joins, reads every event, message and post, and writes in any member's name; for a lab or a "
                      "closed network only. Without it a node needs the group's secret (TOML: open = true)")
    node.add_argument("--allow-list", action="store_true", default=None,
                      help="admit only the node keys of DATA_DIR/trusted-keys (huddle trust add|remove); needs "
                      "--group-key or --join, and every member of the group runs with it (TOML: allow-list = true)")
    node.add_argument("--data-dir", type=Path, metavar="DIR", help="keeps this node's UUID; one node per directory")
    node.add_argument("--port", type=int, help="ROUTER port; 0 picks a free one in --port-range (default: 0)")
    node.add_argument("--port-range", type=_port_range, metavar="LOW-HIGH", help="default: 49152-65535")
    node.add_argument("--api", metavar="HOST:PORT", help=f"serve the HTTP API here; port 0 picks one (default: {DEFAULT_API})")
    node.add_argument("--seed", action="append", metavar="HOST:PORT",
                      help="a peer's ROUTER endpoint to dial, retried until it answers (repeatable)")
    beacon = node.add_mutually_exclusive_group()
    beacon.add_argument("--beacon", dest="beacon", action="store_true", default=None,
                        help="discover peers with UDP beacons (the default)")
    beacon.add_argument("--no-beacon", dest="beacon", action="store_false", help="no UDP beacons: seeds only")
    node.add_argument("--beacon-address", metavar="A", help="where beacons go (default: the interface's broadcast address)")
    node.add_argument("--beacon-port", type=int, metavar="PORT", help=f"UDP port of beacons (default: {DEFAULT_BEACON_PORT})")
    node.add_argument("--beacon-interval", type=_positive, metavar="SECONDS", help="default: 1")
    mdns = node.add_mutually_exclusive_group()
    mdns.add_argument("--mdns", dest="mdns", action="store_true", default=None,
                      help="discover peers with mDNS / DNS-SD (python-zeroconf)")
    mdns.add_argument("--no-mdns", dest="mdns", action="store_false", help="no mDNS (the default)")
    node.add_argument("--mdns-type", metavar="TYPE",
                      help="DNS-SD service type (default: _huddle._tcp; the source's: _nsode_derbyos_com._tcp)")
    node.add_argument("--naming", action="append", metavar="tcp://HOST:PORT",
                      help="a naming broker's --pub endpoint (repeatable, for redundancy)")
    node.add_argument("--naming-interval", type=_non_negative, metavar="SECONDS",
                      help="re-announce through the brokers this often; 0: only until heard (default: 1)")
    node.add_argument("--naming-timeout", type=_positive, metavar="SECONDS",
                      help="give up starting if no broker forwards our announcement in this time (default: 5)")
    node.add_argument("--interface", metavar="IF",
                      help="interface (name or IPv4) to advertise and beacon on; 'lo' keeps everything on 127.0.0.1")
    node.add_argument("--mtu", type=int, metavar="OCTETS",
                      help="addressed messages are cut into frames this big (default: 60000)")
    node.add_argument("--max-message", type=int, metavar="OCTETS",
                      help="largest addressed message accepted for sending (default: 134217728)")
    node.add_argument("--send-buffer", type=int, metavar="OCTETS",
                      help="queued + unacknowledged octets per peer before sends wait (default: 16777216)")
    node.add_argument("--type", metavar="TYPE",
                      help="node type: " + ", ".join(BUILTIN_TYPES) + " or a [types.NAME] of --config; it sets the "
                      "heartbeat, the beats that may be lost, the send rate and what is kept when cut off "
                      "(see 'huddle node-types'; default: standard)")
    node.add_argument("--heartbeat-interval", type=_positive, metavar="SECONDS",
                      help="BEAT period (default: the node type's; standard: 1)")
    node.add_argument("--suspect-after", type=_positive, metavar="SECONDS",
                      help="silence before 'suspect' (default: half of --gone-after)")
    node.add_argument("--gone-after", type=_positive, metavar="SECONDS",
                      help="silence before 'gone' (default: heartbeat x (the type's lost heartbeats + 1); standard: 5)")
    timing = node.add_argument_group("the mesh's other timers ([timing]; docs/configuration.md gives their ranges)")
    for flag, kind, help_text in _TIMERS:
        timing.add_argument(flag, type=kind, metavar="N" if kind is int else "SECONDS", help=help_text)
    guests = node.add_argument_group("guests (the Noam protocol: browsers, scripts, small devices)")
    guests.add_argument("--guests", action="store_true", default=None,
                        help="host guests in this node's room (the group): answer marcos, accept registrations")
    guests.add_argument("--guest-marco-port", type=int, metavar="PORT", help="UDP port of marco / polo (default: 1030)")
    guests.add_argument("--guest-port", type=int, metavar="PORT", help="TCP port guests connect to; 0 picks one (default: 0)")
    guests.add_argument("--guest-ws-port", type=int, metavar="PORT",
                        help="WebSocket port for guests such as browsers; 0 picks one (default: 8089)")
    guests.add_argument("--guest-max-message", type=int, metavar="OCTETS",
                        help="longest message a guest may send; more gets it an error and a disconnect (default: 999999)")
    guests.add_argument("--guest-keyless", action="store_true", default=None,
                        help="a secured group's room takes guests that give no room key too (Noam lemmas as written "
                        "send none), each marked keyless in the room and in the log: anyone on the network can "
                        "then speak in the group's log (docs/guests.md, \"Keyless guests\")")
    zre = node.add_argument_group("ZRE (Zyre and pyre peers; docs/zre.md)")
    zre.add_argument("--zre", action="store_true", default=None,
                     help="speak ZRE: beacon, greet Zyre and pyre peers, bridge SHOUTs to the group into its log")
    zre.add_argument("--zre-port", type=int, metavar="PORT", help="UDP port of the ZRE beacons (default: 5670)")
    zre.add_argument("--zre-interface", metavar="NAME|IP",
                     help="interface whose broadcast address the ZRE beacons use (default: the node's --interface)")
    zre.add_argument("--zre-plain", action="store_true", default=None,
                     help="in a secured group, speak ZRE without CURVE, in clear, with v2 beacons (for pyre and Zyre "
                     "nodes without keys); by default a secured group's node speaks CURVE with v3 beacons as Zyre "
                     "does with a key (docs/zre.md, \"CURVE\")")
    posts_g = node.add_argument_group("sharing posts (Hydra)")
    posts_g.add_argument("--posts-policy", metavar="POLICY",
                         help="what to fetch from peers: all, newest:N (each peer's N newest) "
                         "or budget:OCTETS[k|m|g] (default: all)")
    posts_g.add_argument("--posts-chunk", type=int, metavar="OCTETS",
                         help="octets per FETCH request, 1024..1048576 (default: 1048576)")
    posts_g.add_argument("--posts-interval", type=_positive, metavar="SECONDS",
                         help="seconds before a sync session that failed or left posts behind is tried again (default: 2)")
    pairing = node.add_argument_group("pairing (a device without the group secret asks a member: docs/security.md)")
    pairing.add_argument("--pair-with", action="append", metavar="HOST:PORT",
                         help="a member's pairing door to ask (its 'huddle info' shows it; repeatable), where no "
                         "beacon finds one")
    pairing.add_argument("--pair-port", type=int, metavar="PORT", help="this member's door; 0 picks one (default: 0)")
    pairing.add_argument("--pair-request-ttl", type=_positive, metavar="SECONDS",
                         help="how long a request to join waits for an answer (default: 600)")
    pairing.add_argument("--pair-listen", type=_non_negative, metavar="SECONDS",
                         help="how long a device without the secret listens for members before it founds the group "
                         "(default: 3)")
    control = node.add_argument_group("node orders (huddle control shutdown|reboot: docs/control.md)")
    control.add_argument("--control-shutdown-command", action="append", metavar="ARG",
                         help="the command a shutdown order runs once the node stopped, one argument per flag")
    control.add_argument("--control-reboot-command", action="append", metavar="ARG",
                         help="the command a reboot order runs once the node stopped, one argument per flag")
    node.add_argument("--crg-ws-writable", action="store_true", default=None,
                      help="let CRG ScoreBoard's WebSocket (/WS) take Set: team names, a jam's flags, a trip's "
                      "points, each checked by the bout's rules (docs/crg.md; default: read-only)")
    node.add_argument("--limit", action="append", default=[], metavar="AREA.KEY=VALUE",
                      help="change one of the bounds on what peers, guests and web pages can make this node hold, "
                           "e.g. api.max-connections=512 (repeatable; 'huddle limits' lists them all)")
    node.add_argument("--tag", action="append", metavar="KEY=VALUE",
                      help="a tag this node advertises to its peers, e.g. role=scoreboard (repeatable; over the "
                           "config's [tags]; 'huddle peers --tag' filters on them)")
    node.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default: info")
    node.add_argument("--api-require-token", action="store_true", default=None,
                      help="require the API token on loopback too, e.g. on a machine shared with other users "
                      "(beyond loopback it is always required)")

    peers = sub.add_parser("peers", help="list a node's peers", epilog=CLIENT_EPILOG)
    peers.add_argument("--tag", action="append", type=_tag_filter, metavar="KEY[=VALUE]",
                       help="only peers with this tag (KEY=VALUE) or this key (KEY); repeatable: all must match")
    _add_client_options(peers)

    chat = sub.add_parser("chat", help="send a chat line to the group, or to one peer", epilog=CLIENT_EPILOG)
    chat.add_argument("text", help="the text to send")
    chat.add_argument("--to", metavar="NODE", help="send to this peer only: its name, UUID or a unique UUID prefix")
    _add_client_options(chat)

    tail = sub.add_parser("tail", help="print the node's events as they happen", epilog=CLIENT_EPILOG)
    tail.add_argument("--count", type=_count, metavar="N", help="stop after N events (N > 0)")
    _add_client_options(tail)

    monitor = sub.add_parser("monitor", help="print the node's own log lines as it writes them (the recent "
                             "ones first)", epilog=CLIENT_EPILOG)
    monitor.add_argument("--level", choices=("info", "warning", "error"), default="info",
                         help="the least severe lines shown (default: info)")
    _add_client_options(monitor)

    emit = sub.add_parser(
        "emit", help="record an event in the group's replicated log", epilog=CLIENT_EPILOG,
        description="Record an event: persisted on this node, then replicated to every node of the group.",
    )
    emit.add_argument("kind", help="what kind of event, e.g. 'penalty' or 'jam.start'")
    emit.add_argument("body", help="the event's body as JSON, e.g. '{\"skater\": 12}' or '\"text\"'")
    _add_client_options(emit)

    send = sub.add_parser(
        "send", help="send addressed messages to a peer or to all: in order, exactly once",
        description="Addressed messages are delivered in order and exactly once, across lost frames and "
        "reconnections; large ones are cut to the MTU and joined again. The receiver's event stream "
        "(huddle tail) shows them as 'message' events.", epilog=CLIENT_EPILOG,
    )
    send.add_argument("--to", required=True, metavar="NODE|all",
                      help="a peer's name, UUID or unique UUID prefix (see 'huddle peers'), or all")
    send.add_argument("texts", nargs="+", metavar="TEXT", help="one message per argument, sent in this order")
    send.add_argument("--wait", type=float, default=10.0, metavar="SECONDS",
                      help="wait this long for room when a send buffer is full (default: 10)")
    _add_client_options(send)
    exclude = sub.add_parser(
        "exclude", help="exclude a node for good: its session ends and it is never admitted again",
        description="Exclude a node (by UUID) from this node's view of the system: the session ends with a "
        "GBYE saying why, and that UUID is never admitted again, even after a restart of either node "
        "(the list is kept in the data directory, excluded.json).", epilog=CLIENT_EPILOG,
    )
    exclude.add_argument("uuid", metavar="NODE", help="the node to exclude: its name, UUID or a unique UUID prefix")
    exclude.add_argument("--reason", default="excluded by hand", help="said in the GBYE and kept (default: 'excluded by hand')")
    _add_client_options(exclude)
    join = sub.add_parser(
        "join", help="have a running node dial a peer (a seed added at runtime)", epilog=CLIENT_EPILOG,
        description="Have the running node dial HOST:PORT (a peer's ROUTER endpoint, as --seed takes) and wait "
        "until the peer there is admitted. With no answer in --timeout seconds the join has failed and the node "
        "stops dialling it (ask again); a peer that answered is dialled again if it goes, as a --seed is. See "
        "docs/protocol.md 5.1.",
    )
    join.add_argument("address", metavar="HOST:PORT", help="the peer's ROUTER endpoint (a host name is resolved)")
    join.add_argument("--timeout", type=_join_timeout, default=5.0, metavar="SECONDS",
                      help="wait this long for the peer's admission, at most 60 (default: 5)")
    _add_client_options(join)
    forget = sub.add_parser(
        "forget", help="forget a failed or left node: the system picture stops listing it everywhere",
        description="Forget a node the system picture shows failed or left: a 'forget' event goes into the "
        "group's log and every node stops listing it, until it returns (then it is a member again). "
        "An alive or suspect node cannot be forgotten (409).", epilog=CLIENT_EPILOG,
    )
    forget.add_argument("node", metavar="NODE", help="the node to forget: its name, UUID or a unique UUID prefix")
    _add_client_options(forget)
    log_p = sub.add_parser("log", help="list events of the replicated log", epilog=CLIENT_EPILOG)
    log_p.add_argument("--source", metavar="NODE", help="only this source's events (a name, UUID or UUID prefix)")
    log_p.add_argument("--after", type=int, metavar="SEQ", help="with --source: events after this sequence")
    log_p.add_argument("--limit", type=int, default=100, metavar="N", help="at most N events (default 100, max 10000)")
    log_p.add_argument("--summary", action="store_true", help="print the version vector, counts and gaps instead")
    _add_client_options(log_p)

    export = sub.add_parser(
        "export", help="write a node's log to Parquet or JSON Lines (the pipeline's input)",
        description="Read a data directory (the node may be running) and write one row per held event "
        "with its receipt metadata. See docs/export.md for the schema.",
    )
    export.add_argument("--data-dir", type=Path, required=True, metavar="DIR", help="the node's data directory")
    export.add_argument("--out", type=Path, required=True, metavar="PATH", help="output file (or directory for parquet)")
    export.add_argument("--format", choices=["parquet", "jsonl"], default="parquet", help="default: parquet")
    export.add_argument("--follow", action="store_true",
                        help="keep the export growing as the log grows: the rows it lacks every --interval, each "
                        "batch a new part (OUT/events/NNNNNN/events.parquet) renamed into place whole, until Ctrl-C "
                        "or SIGTERM; a restart continues after the parts there (docs/export.md, Following a node)")
    export.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                        help="with --follow: how often to look for new rows (default: 1 s)")
    export.add_argument("--json", action="store_true", help="print JSON instead of text")

    repair = sub.add_parser(
        "repair", help="check a stopped node's log; if damaged, keep what verifies and take a new identity",
        description="Run the start-up check of the log in a data directory (the node must be stopped). If the log "
        "is damaged, copy every record that reads and verifies to a new log.sqlite, move the damaged file aside "
        "(log.sqlite.damaged-*) and give the node a new key and the UUID it gives (the old UUID is kept in "
        "previous-ids, the old key as node.key.previous-*; the group "
        "replays its records). See docs/protocol.md section 12.",
    )
    repair.add_argument("--data-dir", type=Path, required=True, metavar="DIR", help="the node's data directory")
    repair.add_argument("--new-identity", action="store_true",
                        help="take a new identity even if the log verifies: a new node key and the id it gives (a "
                        "data directory made before ids came from keys needs it to join a group with a secret)")
    repair.add_argument("--json", action="store_true", help="print JSON instead of text")

    sim = sub.add_parser(
        "simulate", help="run the deterministic simulator and check that every node converges",
        description="Simulate a group on an in-memory network with a simulated clock: nodes join, record "
        "events, suffer loss, partitions and crashes; then the network heals and every live node must hold "
        "exactly the same events. The same --seed always replays the same run. Up to 2000 events are "
        "recorded one by one; more are recorded in 2000 bursts of random sizes (--appends), each moved as "
        "one run, so 200 nodes and 10 million events take minutes, not hours.",
        epilog="examples:\n  huddle simulate --nodes 8 --events 500 --seed 3 --loss 0.1 --partitions 2 --crashes 1\n"
        "  huddle simulate --nodes 8 --runs 200            # seeds 0..199\n"
        "  huddle simulate --nodes 200 --events 10000000   # the scale check\n"
        "  huddle simulate --nodes 4 --events 1000000 --export /tmp/sim   # input for the Spark pipeline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("--nodes", type=int, default=8, metavar="N", help="default: 8")
    sim.add_argument("--events", type=int, default=200, metavar="M", help="default: 200")
    sim.add_argument("--appends", type=int, metavar="K",
                     help="record the events in K bursts (default: one by one up to 2000, else 2000)")
    sim.add_argument("--seed", type=int, default=0, metavar="S", help="default: 0")
    sim.add_argument("--runs", type=int, default=1, metavar="K", help="run seeds S..S+K-1 (default: 1)")
    sim.add_argument("--loss", type=float, default=0.0, metavar="P", help="probability a log message is lost")
    sim.add_argument("--duplicate", type=float, default=0.0, metavar="P",
                     help="probability a log message is delivered twice")
    sim.add_argument("--jitter", type=float, default=0.0, metavar="SECONDS",
                     help="extra random delay of log messages, which reorders them")
    sim.add_argument("--partitions", type=int, default=0, metavar="K", help="random link cuts, each healed later")
    sim.add_argument("--crashes", type=int, default=0, metavar="K", help="random crashes (half lose their data)")
    sim.add_argument("--export", metavar="DIR", help="write each node's log as 'huddle export' would")
    sim.add_argument("--format", choices=["parquet", "jsonl"], default="parquet", help="export format")
    sim.add_argument("--codec", action="store_true",
                     help="send every message through the wire codec, as the tests do (about 2x slower)")
    sim.add_argument("--hostile", action="store_true",
                     help="add one hostile node that sends forged, oversized and out-of-range messages among "
                          "the honest ones; checks the honest nodes converge, stay bounded and exclude none of "
                          "their own (always through the codec; --loss, --partitions and --crashes do not apply)")
    sim.add_argument("--attacks", type=int, default=40, metavar="K",
                     help="with --hostile: how many bursts the hostile node sends (default: 40)")
    sim.add_argument("--json", action="store_true", help="print every run's result as JSON instead of text")

    pipe = sub.add_parser(
        "pipeline", help="the audit pipeline on Apache Spark: did every node get everything, how fast, same document?",
        description="Audit exported node logs (huddle export, huddle simulate --export) on Apache Spark through "
        "PySpark: local[*] on this machine by default, or any Spark cluster. Needs Java 17 or newer. "
        "docs/pipeline.md lists the tables and their columns.",
    )
    pipe_sub = pipe.add_subparsers(dest="pipeline_command", metavar="ACTION", required=True)
    p_run = pipe_sub.add_parser(
        "run", help="run the jobs over exported logs; writes Parquet tables and report.html",
        description="Read every node's exported log, run the jobs, write one Parquet table per result and "
        "report.html (findings first, then plots) under --output.\n\njobs:\n"
        "  consolidate  one row per event (group, source, seq): first receipt, copies, content conflicts\n"
        "  convergence  per node and source, the ranges it lacks that another node holds; gaps no node holds\n"
        "  propagation  delay origin -> receiver (p50/p90/p99 by source, receiver, hops, link); throughput\n"
        "  replay       each node's document from its doc events, by huddle's own engine, vs the group's\n"
        "  bout         the roller-derby bout per node vs the group's: score, jams, penalties per skater, who\n"
        "               recorded what (source, role), corrections and by whom; bout-GROUP.xml / .json written\n"
        "  system       membership changes, heartbeat loss, exclusions, counters from the statistics rows",
        epilog="examples:\n"
        "  huddle simulate --nodes 3 --events 10000 --loss 0.05 --export /tmp/sim\n"
        "  huddle pipeline run --input /tmp/sim --output /tmp/audit      # then open /tmp/audit/report.html\n"
        "  huddle pipeline run --input a/ b/ c/ --output out --jobs convergence,propagation\n"
        "  huddle pipeline run --input a/ b/ c/ --output out --jobs bout   # score, who recorded what, corrections\n"
        "  huddle pipeline run --input a/ b/ c/ --output out --jobs bout --statsbook bout.xlsx\n"
        "  huddle pipeline run --input hdfs:///logs/day1 --output hdfs:///audit/day1 --master yarn\n"
        "  huddle pipeline run --input /tmp/sim --output /tmp/audit --remote sc://127.0.0.1:15002   # a warm Spark\n\n"
        "An input is a file (events.parquet, events.jsonl) or a directory searched at any depth for them; "
        "stats.parquet / stats.jsonl beside them feed the system job.\n\n"
        "A line per job goes to stderr as it starts and ends (--quiet: none); an error is one line naming the "
        "file or setting (--debug: with the Python and Java stacks).\n\n"
        "exit status: 0 done, 3 done and the nodes did NOT converge, 2 bad usage (a flag or setting), 4 bad input, "
        "5 bad output, 6 Spark cannot start or be reached (no pipeline extra, no Java, bad --master or --remote), "
        "1 any other failure",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_run.add_argument("--input", nargs="+", required=True, metavar="PATH",
                       help="exported logs: files or directories, local paths or Hadoop URIs (hdfs://, s3a://)")
    p_run.add_argument("--output", required=True, metavar="PATH",
                       help="directory (or URI) for the tables and report.html; tables there are replaced")
    p_run.add_argument("--master", default=None,
                       help="Spark master: local[*] (the default: this machine's cores), local[2], yarn, "
                       "spark://HOST:7077; under spark-submit, the one it was given")
    p_run.add_argument("--remote", metavar="sc://HOST:PORT",
                       help="send the jobs to a running Spark Connect server (huddle pipeline serve): no Spark "
                       "start here; the inputs and output are paths the server reads and writes")
    p_run.add_argument("--config", type=Path, metavar="FILE.toml",
                       help="read [pipeline] remote (and master) from a TOML file; flags win")
    p_run.add_argument("--jobs", metavar="LIST",
                       help="comma-separated subset of the jobs above, e.g. convergence,propagation (default: all)")
    p_run.add_argument("--window", type=float, default=1.0, metavar="SECONDS",
                       help="throughput window (default: 1 s)")
    p_run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark setting, repeatable (e.g. --conf spark.driver.memory=8g)")
    p_run.add_argument("--json", action="store_true",
                       help="print the findings as one JSON document (headline numbers, the lines, the rows behind them)")
    p_run.add_argument("--statsbook", type=Path, metavar="FILE.xlsx",
                       help="with the bout job: each group's final bout as the WFTDA statsbook (docs/statsbook.md); "
                       "several groups: FILE-GROUP.xlsx each")
    p_run.add_argument("--quiet", action="store_true", help="no progress lines on stderr (errors still)")
    p_run.add_argument("--debug", action="store_true",
                       help="on an error, the Python and Java stacks too; the JVM's warnings kept")
    p_live = pipe_sub.add_parser(
        "live", help="the audit live, on Spark Structured Streaming over exports that grow (huddle export --follow)",
        description="Watch the directories 'huddle export --follow' writes into and keep the audit up to date while "
        "the nodes run: whether every node holds every source's events, the ranges each node lacks, and the lag per "
        "link and per source (delay percentiles over the last --recent seconds, and how far each node is behind "
        "each source). A micro-batch of the new part files every --trigger seconds; a line per update on stdout "
        "(--json: one JSON document per line), and with --serve a page that updates itself. Runs until Ctrl-C "
        "or SIGTERM. docs/pipeline.md, Live audit.",
        epilog="examples:\n"
        "  huddle export --data-dir a/ --out /tmp/live/a --follow &      # one per node\n"
        "  huddle pipeline live --input /tmp/live --serve 8090            # then open http://127.0.0.1:8090/\n"
        "  huddle pipeline live --input /tmp/live/a /tmp/live/b --json --trigger 1\n\n"
        "exit status: 0 stopped (Ctrl-C, SIGTERM, --updates), 2 bad usage, 4 bad input, 6 Spark cannot start, "
        "1 the stream failed",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_live.add_argument("--input", nargs="+", required=True, metavar="DIR",
                        help="directories huddle export --follow writes into, or directories holding several")
    p_live.add_argument("--trigger", type=float, default=2.0, metavar="SECONDS",
                        help="how often a micro-batch reads the new part files (default: 2 s)")
    p_live.add_argument("--recent", type=float, default=60.0, metavar="SECONDS",
                        help="the lag is measured over the receipts read in the last SECONDS (default: 60)")
    p_live.add_argument("--serve", type=int, metavar="PORT",
                        help="serve a page showing the latest update at http://127.0.0.1:PORT/ (0: a free port)")
    p_live.add_argument("--bind", default="127.0.0.1", metavar="HOST",
                        help="with --serve: the address to listen on (default 127.0.0.1, this machine only)")
    p_live.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    p_live.add_argument("--updates", type=int, default=0, metavar="N", help="stop after N updates (default: never)")
    p_live.add_argument("--json", action="store_true", help="one JSON document per update instead of a line")
    p_live.add_argument("--quiet", action="store_true", help="no progress lines on stderr (errors still)")
    p_live.add_argument("--debug", action="store_true", help="on an error, the Python and Java stacks too")
    p_serve = pipe_sub.add_parser(
        "serve", help="run a warm Spark: a Spark Connect server that 'pipeline run --remote' sends its jobs to",
        description="Run a long-lived Spark Connect server (Spark's own, through the spark-submit PySpark ships) "
        "with the settings a local run has; 'huddle pipeline run --remote sc://HOST:PORT' then costs the work on the "
        "data, not Spark's start. Prints 'serving sc://HOST:PORT' once it accepts connections; stops on SIGTERM or "
        "Ctrl-C. As a Control app of a server node: docs/pipeline.md, \"A warm Spark\".",
        epilog="examples:\n"
        "  huddle pipeline serve                          # sc://127.0.0.1:15002, local[*]\n"
        "  huddle pipeline serve --port 15003 --master local[2] --conf spark.driver.memory=4g\n\n"
        "exit status: 0 stopped by SIGTERM or Ctrl-C, 2 bad usage, 6 the server cannot start (port taken, no "
        "pipeline extra, no Java, bad --master) or died",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_serve.add_argument("--port", type=int, default=None, metavar="PORT",
                         help="TCP port of the server (default: 15002, or [pipeline] port of --config)")
    p_serve.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default: 127.0.0.1, this machine only; the server runs any "
                         "job it is sent, so open it only on a network you trust)")
    p_serve.add_argument("--master", default=None,
                         help="Spark master the server runs its jobs on: local[*] (the default), local[2], "
                         "spark://HOST:7077")
    p_serve.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                         help="extra Spark setting of the server, repeatable (e.g. --conf spark.driver.memory=8g)")
    p_serve.add_argument("--config", type=Path, metavar="FILE.toml",
                         help="read [pipeline] port and master from a TOML file; flags win")
    p_serve.add_argument("--debug", action="store_true",
                         help="the JVM's Java stacks and warnings kept; on an error, the Python stack too")

    broker = sub.add_parser(
        "broker", help="run a naming broker: nodes find each other through it, data goes peer to peer",
        description="A naming broker forwards the nodes' announcements (UUID, group, endpoint) between them; "
        "nodes connect to its --pub endpoint with 'huddle node --naming tcp://HOST:PUBPORT'. Data never passes "
        "through it. Run two for redundancy and give nodes both.",
        epilog="example:\n  huddle broker --pub tcp://*:5680 --sub tcp://*:5681\n"
        "  huddle node --name a --group derby --naming tcp://10.0.0.5:5680\n\n"
        "The first line printed is 'broker pub=ENDPOINT sub=ENDPOINT' (port 0 picks a free port).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    broker.add_argument("--pub", required=True, metavar="tcp://HOST:PORT", help="where nodes' naming SUB sockets connect")
    broker.add_argument("--sub", required=True, metavar="tcp://HOST:PORT", help="where nodes' naming PUB sockets connect")

    system = sub.add_parser(
        "system", help="the system picture: members, health, links (who hears whom), rates",
        description="Every node shares raw statistics of its peers every 2 s and computes the same picture "
        "from them: members and their health (ok, slow, lossy, lagging, degraded, isolated, cut-off), each "
        "link's state (two-way, slow, one-way A -> B, down) and a digest that is equal on every node once the "
        "system is stable. Round trips and rates are shown beside it.", epilog=CLIENT_EPILOG,
    )
    _add_client_options(system)

    limits_p = sub.add_parser(
        "limits", help="list the bounds on what peers, guests and web pages can make a node hold",
        description="Every limit a node applies to its mesh socket, log replication, HTTP API, guest ports, "
        "posts and naming broker, with its value (the default, or as --config sets it).  docs/limits.md says "
        "what a peer, guest or page that goes past one gets.",
        epilog="change them in the config file:\n  [limits.api]\n  max-connections = 512\n\n"
        "or on the command line:\n  huddle node --limit api.max-connections=512",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    limits_p.add_argument("--config", type=Path, metavar="FILE.toml", help="show the limits as this config sets them")
    limits_p.add_argument("--json", action="store_true", help="print JSON instead of text")

    types = sub.add_parser(
        "node-types", help="list the node types (built-in and from --config) and what each sets",
        description="A node type sets the heartbeat interval, how many heartbeats may be lost before peers "
        "count the node gone, the rate at which it accepts addressed messages, and what it keeps when cut "
        "off from every peer: continue (everything, still writable), read-only (everything, writes refused "
        "with 409 until a peer is back), empty (drops the others' events, receives them again on reconnect).",
        epilog="define your own in the config file:\n  [types.kiosk]\n  base = \"display\"\n"
        "  heartbeat-interval = 0.5\n  lost-heartbeats = 3\n  send-rate = 65536\n  on-cut-off = \"empty\"\n\n"
        "then: huddle node --config node.toml --type kiosk",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    types.add_argument("--config", type=Path, metavar="FILE", help="also list the [types.NAME] tables of this file")
    types.add_argument("--json", action="store_true", help="print JSON")

    for feature in default_features() if features is None else features:
        for name, handler in feature.commands(sub, _add_client_options, CLIENT_EPILOG).items():
            sub.choices[name].set_defaults(api_handler=handler)

    group = sub.add_parser(
        "group", help="create or show a group secret and its join code",
        description="A group secret keeps strangers out of a group: 'huddle group new NAME' writes it to a file "
        "(mode 0600) and prints a join code short enough to read aloud. A node given it (--group-key FILE, or "
        "--group NAME --join CODE) encrypts and authenticates every mesh connection (CurveZMQ).",
        epilog=GROUP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group_sub = group.add_subparsers(dest="group_command", metavar="ACTION", required=True)
    g_new = group_sub.add_parser("new", help="create a group secret: a file and a join code")
    g_new.add_argument("name", metavar="NAME", help="the group's name (what nodes give as --group)")
    g_new.add_argument("--out", type=Path, metavar="FILE", help="where to write it (default: NAME.key here); "
                       "never overwritten")
    g_new.add_argument("--json", action="store_true", help="print JSON instead of text")
    g_show = group_sub.add_parser("show", help="print a group file's name, key id and join code")
    g_show.add_argument("file", type=Path, metavar="FILE", help="a group file")
    g_show.add_argument("--json", action="store_true", help="print JSON instead of text")
    # Rotating the secret of a running group (docs/security.md): each step on every member.
    g_keys = group_sub.add_parser("keys", help="the keys a running node holds: in use, installed, retired")
    g_install = group_sub.add_parser("install", help="rotation, step 1: install a new secret of the group beside "
                                     "the one in use (huddle group new NAME --out FILE made it)")
    g_install.add_argument("file", type=Path, metavar="FILE", help="the new group file")
    g_switch = group_sub.add_parser("switch", help="rotation, step 2: use the installed key from now on")
    g_switch.add_argument("key_id", metavar="KEY_ID", help="the new secret's key id")
    g_retire = group_sub.add_parser("retire", help="rotation, step 3: drop the old key; its holders are cut off")
    g_retire.add_argument("key_id", metavar="KEY_ID", help="the old secret's key id")
    for p in (g_keys, g_install, g_switch, g_retire):
        _add_client_options(p)
        p.add_argument("--node", action="append", metavar="URL", help="a member's API; give it once per member "
                       "to take the step on each in turn (default: --api)")

    info = sub.add_parser("info", help="show the node's identity, clock and counters", epilog=CLIENT_EPILOG)
    _add_client_options(info)

    demo = sub.add_parser("demo", help="start 3 nodes on loopback, chat, show the mesh, stop them, audit their logs",
                          description="Start nodes on 127.0.0.1 and drive them through their API: chat, the bout "
                          "document, a simulated bout (five officials' devices on all nodes but the last, which shows "
                          "the final score), a shared file, two guests, the system picture. Then stop them, export their "
                          "logs and run the audit pipeline over them on Apache Spark (local[*]; needs Java 17+, "
                          "skipped with a note when there is none).")
    demo.add_argument("--nodes", type=int, default=3, help="how many nodes (default: 3)")
    demo.add_argument("--bout-jams", type=int, default=3, metavar="N",
                      help="the simulated bout's jams a period (default: 3; docs/demo.md)")
    demo.add_argument("--bout-speed", type=_positive, default=300.0, metavar="X",
                      help="how many times faster than life the bout is played (default: 300)")
    demo.add_argument("--report-dir", type=Path, metavar="DIR",
                      help="where the audit writes its tables and report.html (default: a new directory "
                      "huddle-demo-audit-* in the system's temporary directory, kept)")
    return parser


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)command parser ``args`` went through: ``huddle group new`` gives ``new``'s."""
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], args)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``argv`` as ``parser`` reads it, but a flag the command does not know, or flags that do not
    go together, get the command's own usage (argparse gives the top level's for an unknown flag)."""
    args, extra = parser.parse_known_args(argv)
    chosen = _chosen(parser, args)
    if extra:
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "log":
        if args.after is not None and args.source is None:
            chosen.error("--after needs --source: a sequence number counts one source's events")
        if args.after is not None and args.after < 0:
            chosen.error(f"--after must be 0 or more, got {args.after}")
        if not 1 <= args.limit <= 10000:
            chosen.error(f"--limit must be between 1 and 10000, got {args.limit}")
        args.after = args.after or 0
    return args
