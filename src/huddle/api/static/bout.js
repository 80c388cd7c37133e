// What the bout's pages share (docs/document.md "The pages"): the node's API, the role a device
// writes as (?role=ROLE on every write), the clocks ticking between refreshes, how many peers this
// node reaches (alone: entries sync when the network returns), and the event WebSocket.
"use strict";

const Bout = (() => {
  const $ = (id) => document.getElementById(id);

  const api = (path, options) => fetch(path, options).then(async (r) => {
    const body = await r.text();
    let data = null;
    try { data = body ? JSON.parse(body) : null; } catch { data = { error: body }; }
    if (!r.ok) { const err = new Error((data && data.error) || r.statusText); err.status = r.status; throw err; }
    return data;
  });

  // The roles an official's device may take, as the node knows them (docs/document.md "Roles").
  const ROLES = {
    "jam-timer": "Jam timer", "scorekeeper-home": "Scorekeeper · home", "scorekeeper-away": "Scorekeeper · away",
    "lineup-tracker-home": "Lineup tracker · home", "lineup-tracker-away": "Lineup tracker · away",
    "penalty-tracker": "Penalty tracker", "penalty-box-timer": "Penalty box timer", "head-nso": "Head NSO",
  };

  // Writes: explicit operations (add, set, remove), never a toggle, each naming this device's role.
  function write(ops, role) {
    const q = role ? `?role=${encodeURIComponent(role)}` : "";
    return api(`/api/v1/doc/ops${q}`, { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify(ops) });
  }
  function jamAction(which, role) {
    const q = role ? `?role=${encodeURIComponent(role)}` : "";
    return api(`/api/v1/bout/${which}${q}`, { method: "POST" });
  }

  // The clocks as the node last said them, and when (this page's clock): they tick on between refreshes.
  let clockState = null, clockAt = 0;
  async function fetchClocks() {
    const t0 = performance.now();
    const c = await api("/api/v1/bout/clocks");
    clockAt = (t0 + performance.now()) / 2;
    clockState = c;
    return c;
  }
  // The clocks now: each running one moved on by the time since the node answered.
  function clocksNow() {
    const c = clockState;
    if (!c) return null;
    const d = Math.max(0, (performance.now() - clockAt) / 1000);
    const run = (clock, key, sign, cap) => {
      if (!clock.running) return clock[key];
      const v = clock[key] + sign * d;
      return sign < 0 ? Math.max(0, v) : (cap === undefined ? v : Math.min(cap, v));
    };
    return {
      now: c.now + d,
      period: { ...c.period, remaining: run(c.period, "remaining", -1) },
      jam: { ...c.jam, elapsed: run(c.jam, "elapsed", 1, 120), remaining: run(c.jam, "remaining", -1) },
      lineup: { ...c.lineup, elapsed: run(c.lineup, "elapsed", 1) },
      timeout: { ...c.timeout, elapsed: run(c.timeout, "elapsed", 1) },
      intermission: { ...c.intermission, remaining: run(c.intermission, "remaining", -1) },
    };
  }
  // The group's time now as this page reckons it (for a timeout's or a box entry's time).
  function meshNow() { const c = clocksNow(); return c ? c.now : Date.now() / 1000; }

  function clock(seconds) {
    const s = Math.max(0, Math.floor(seconds + 1e-6));
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  }

  // How many peers this node reaches now: none is "alone", and entries still go to this node's log.
  async function showPeers() {
    const el = $("net");
    if (!el) return;
    try {
      const peers = await api("/api/v1/peers");
      const n = peers.filter((p) => p.state === "alive").length;
      el.dataset.peers = String(n);
      el.className = n ? "ok" : "alone";
      el.textContent = n ? `${n} peer${n === 1 ? "" : "s"} reached`
        : "alone — entries sync when the network returns";
    } catch {
      el.className = "alone"; el.dataset.peers = "0";
      el.textContent = "this node does not answer";
    }
  }

  // The event WebSocket: ``onDoc`` for each document event, the peers shown again as they come and go.
  function connect(onDoc, onOpen) {
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/events`);
    ws.onopen = () => { const c = $("conn"); if (c) { c.className = "ok"; c.textContent = "live"; } if (onOpen) onOpen(); };
    ws.onclose = () => {
      const c = $("conn");
      if (c) { c.className = "down"; c.textContent = "reconnecting"; }
      setTimeout(() => connect(onDoc, onOpen), 1000);
    };
    ws.onmessage = (m) => {
      const e = JSON.parse(m.data);
      if (e.type === "event" && e.kind === "doc") onDoc(e);
      else if (e.type && e.type.startsWith("peer_")) showPeers();
    };
  }

  // One refresh at a time; what arrives meanwhile asks for one more pass, not a parallel one.
  function serial(fn, onError) {
    let running = null, again = false;
    return function run() {
      if (running) { again = true; return running; }
      running = (async () => {
        try { do { again = false; await fn(); } while (again); }
        catch (err) { if (onError) onError(err); }
        finally { running = null; }
      })();
      return running;
    };
  }

  function start(refresh, { tick, every = 5000 } = {}) {
    showPeers();
    setInterval(showPeers, 2000);
    setInterval(refresh, every);  // clocks move on without events too (a jam ends itself at 2:00)
    if (tick) setInterval(tick, 100);
    connect(refresh, refresh);
    refresh();
  }

  return { $, api, ROLES, write, jamAction, fetchClocks, clocksNow, meshNow, clock, showPeers, connect, serial, start };
})();
