"""The page of ``huddle pipeline live --serve PORT``: the latest update, live.

A small HTTP server of the standard library in a thread of its own (the main
thread runs Spark's streaming query): ``GET /`` is one self-contained page
that asks ``GET /live.json`` for the latest update every two seconds and
draws it; nothing else is served.  It listens on 127.0.0.1 unless told
another address.  Whatever is not one of those two GETs (another path or
method, a request line or header too long, bytes that are not HTTP) is
refused with its status and counted (``refused`` in ``/live.json``); a
request that takes over :data:`REQUEST_SECONDS` to arrive is dropped.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["PAGE", "LivePage"]

REQUEST_SECONDS = 5.0  # a client slower than this to send its request is dropped (a slow-loris holds no thread long)


class LivePage:
    """The server and the document it serves; :meth:`publish` replaces the document."""

    def __init__(self, host: str, port: int) -> None:
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {"update": 0, "waiting": True}
        self.refused = 0
        page = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_SECONDS
            server_version = "huddle-live"
            sys_version = ""

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._send(200, "text/html; charset=utf-8", PAGE.encode())
                elif path == "/live.json":
                    self._send(200, "application/json", page.document())
                else:
                    self.send_error(404, "only / and /live.json are here")

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                                 "style-src 'unsafe-inline'; connect-src 'self'")
                self.end_headers()
                self.wfile.write(body)

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                with page._lock:
                    page.refused += 1
                super().send_error(code, message, explain)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the update lines are the command's output; requests are not

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="live-page", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def publish(self, doc: dict[str, Any]) -> None:
        with self._lock:
            self._doc = doc

    def document(self) -> bytes:
        with self._lock:
            return json.dumps(self._doc | {"refused": self.refused}, default=str).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


PAGE = """<!doctype html>
<html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width, initial-scale=1">
<title>huddle live audit</title>
<style>
body{font:15px/1.4 system-ui,sans-serif;margin:0;padding:12px;color:#222;background:#fafafa}
h1{font-size:1.2em;margin:0 0 6px} h2{font-size:1.05em;margin:18px 0 6px}
#verdict{font-size:1.1em;font-weight:600;padding:8px;border-radius:6px;background:#eee}
#verdict.ok{background:#dff3e0;color:#17521c} #verdict.bad{background:#fde2e1;color:#7a1410}
.box{overflow-x:auto;max-width:100%;background:#fff;border:1px solid #ddd;border-radius:6px}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:4px 8px;text-align:left;white-space:nowrap;border-bottom:1px solid #eee}
td.n{text-align:right} .muted{color:#666;font-size:.9em}
</style></head><body>
<h1>huddle live audit</h1>
<div id=verdict>waiting for the first update…</div>
<p class=muted id=meta></p>
<h2>Missing ranges</h2><div class=box><table id=missing></table></div>
<h2>Nodes</h2><div class=box><table id=nodes></table></div>
<h2>Lag by link (last <span id=recent>60</span> s)</h2><div class=box><table id=links></table></div>
<h2>Lag by source (last <span id=recent2>60</span> s)</h2><div class=box><table id=sources></table></div>
<h2>Held per node and source</h2><div class=box><table id=held></table></div>
<script>
"use strict";
let names = {};
const short = id => Object.hasOwn(names, id) ? `${names[id]} (${String(id).slice(0, 8)})` : String(id).slice(0, 8);
const num = v => typeof v === "number" ? v.toLocaleString("en-US") : String(v);
const sec = v => typeof v === "number" && isFinite(v) ? v.toPrecision(3) + " s" : "-";
function table(id, heads, rows) {
  const t = document.getElementById(id);
  t.replaceChildren();
  const hr = t.insertRow();
  for (const h of heads) { const th = document.createElement("th"); th.textContent = h; hr.appendChild(th); }
  if (!rows.length) { const c = t.insertRow().insertCell(); c.colSpan = heads.length; c.textContent = "none"; }
  for (const r of rows) {
    const tr = t.insertRow();
    for (const v of r) { const c = tr.insertCell(); c.textContent = v[0]; if (v[1]) c.className = "n"; }
  }
}
function draw(d) {
  const v = document.getElementById("verdict");
  if (d.waiting) { v.textContent = "waiting for the first update…"; return; }
  names = d.names || {};
  const lacking = d.missing.reduce((a, m) => a + m.events, 0);
  v.className = d.converged ? "ok" : "bad";
  v.textContent = d.converged ? `converged: ${d.nodes.length} nodes hold every event of ${d.sources} sources`
    : `NOT converged: ${num(lacking)} events missing in ${d.missing.length} ranges`;
  document.getElementById("meta").textContent = `update ${d.update} at ${new Date(d.at * 1000).toISOString()}` +
    `, ${num(d.rows_total)} rows read; refused requests ${d.refused}`;
  for (const id of ["recent", "recent2"]) document.getElementById(id).textContent = d.recent_seconds;
  table("missing", ["node", "source", "first", "last", "events"],
    d.missing.map(m => [[short(m.node)], [short(m.source)], [num(m.first_seq), 1], [num(m.last_seq), 1], [num(m.events), 1]]));
  table("nodes", ["node", "events", "lacking", "newest receipt (UTC)"],
    d.nodes.map(n => [[short(n.node)], [num(n.events), 1], [num(n.lacking), 1],
      [new Date(n.newest_received_at * 1000).toISOString().slice(11, 23)]]));
  const lag = rows => rows.map(r => [[r.key.split(">").map(short).join(" > ")], [num(r.receipts), 1],
    [sec(r.p50), 1], [sec(r.p90), 1], [sec(r.p99), 1], [sec(r.max), 1]]);
  const heads = ["", "receipts", "p50", "p90", "p99", "max"];
  table("links", ["link", ...heads.slice(1)], lag(d.recent_lag.link));
  table("sources", ["source", ...heads.slice(1)], lag(d.recent_lag.source));
  table("held", ["node", "source", "events", "top", "lacking", "behind"],
    d.held.map(h => [[short(h.node)], [short(h.source)], [num(h.events), 1], [num(h.top), 1], [num(h.lacking), 1],
      [sec(h.behind_seconds), 1]]));
}
async function tick() {
  try { const r = await fetch("live.json", {cache: "no-store"}); if (r.ok) draw(await r.json()); }
  catch (e) { document.getElementById("meta").textContent = "the live command is not answering"; }
  setTimeout(tick, 2000);
}
tick();
</script></body></html>
"""
