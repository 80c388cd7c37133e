// huddle guest for browsers: the Noam protocol over WebSocket.
//
//   <script src="http://NODE-API/guest.js"></script>
//   <script>
//     const g = new HuddleGuest({ url: "ws://192.168.1.20:8089/", name: "scoreboard",
//                                 hears: ["score"], heartbeat: 2 });
//     g.on("score", (value, speaker) => console.log(speaker, "scored", value));
//     g.onstatus = (status) => console.log(status);   // "connecting", "registered", "closed"
//     g.speak("hello", { from: "the scoreboard" });    // queued until registered
//   </script>
//
// The URL is the node's guest WebSocket port (GET /api/v1/guests on the node
// says it; 8089 by default).  Messages are written as the Noam document writes
// them: a 6-digit length in octets of UTF-8, then a JSON array.  With a
// heartbeat period P the guest sends a heartbeat P seconds after its last
// message; a host that hears nothing for 2 P fires it.  When the connection
// closes the guest connects and registers again after `retry` seconds.
// A secured group's room is keyed: pass its room key as `roomKey` (docs/guests.md,
// "The room key"); a host that refuses the guest sends an error, kept in `errors`.
"use strict";

class HuddleGuest {
  constructor({ url, name, hears = [], speaks = [], heartbeat = 2, heartbeatAck = false,
                dialect = "javascript", version = "1", retry = 1, roomKey = "" }) {
    if (!url || !name) throw new Error("HuddleGuest needs a url (ws://HOST:PORT/) and a name");
    Object.assign(this, { url, name, hears, speaks, heartbeat, heartbeatAck, dialect, version, retry, roomKey });
    this.handlers = {};
    this.anyHandlers = [];
    this.queue = [];
    this.acks = 0;
    this.errors = [];
    this.status = "connecting";
    this.onstatus = null;
    this.closed = false;
    this.lastSent = 0;
    this._connect();
  }

  static encode(array) {
    const text = JSON.stringify(array);
    const length = new TextEncoder().encode(text).length;
    if (length > 999999) throw new Error(`a Noam message holds at most 999999 octets, this one is ${length}`);
    return String(length).padStart(6, "0") + text;
  }

  static decode(text) {
    // With the length prefix (as huddle sends) or without it.
    const body = /^\d{6}/.test(text) ? text.slice(6) : text;
    return JSON.parse(body);
  }

  on(topic, fn) { (this.handlers[topic] = this.handlers[topic] || []).push(fn); return this; }
  onAny(fn) { this.anyHandlers.push(fn); return this; }

  speak(topic, value) {
    const msg = HuddleGuest.encode(["event", this.name, topic, value]);
    if (this.status === "registered") this._send(msg); else this.queue.push(msg);
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
    if (this.ws) this.ws.close();
    this._status("closed");
  }

  _status(s) { this.status = s; if (this.onstatus) this.onstatus(s); }

  _send(text) { this.ws.send(text); this.lastSent = Date.now(); }

  _connect() {
    this._status("connecting");
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = () => {
      const options = this.heartbeat ? { heartbeat: String(this.heartbeat), heartbeat_ack: String(this.heartbeatAck) } : {};
      if (this.roomKey) options.room_key = this.roomKey;
      this._send(HuddleGuest.encode(["register", this.name, 0, this.hears, this.speaks, this.dialect, this.version, options]));
      this._status("registered");
      for (const msg of this.queue.splice(0)) this._send(msg);
      clearInterval(this.timer);
      if (this.heartbeat) {
        this.timer = setInterval(() => {
          if (ws.readyState === WebSocket.OPEN && Date.now() - this.lastSent >= this.heartbeat * 1000) {
            this._send(HuddleGuest.encode(["heartbeat", this.name]));
          }
        }, Math.max(50, this.heartbeat * 250));
      }
    };
    ws.onmessage = (m) => {
      let msg;
      try { msg = HuddleGuest.decode(m.data); } catch (e) { this.errors.push(`bad message from the host: ${e}`); return; }
      if (msg[0] === "event") {
        const [, speaker, topic, value] = msg;
        for (const fn of this.handlers[topic] || []) fn(value, speaker, topic);
        for (const fn of this.anyHandlers) fn(value, speaker, topic);
      } else if (msg[0] === "heartbeat_ack") {
        this.acks += 1;
      } else if (msg[0] === "error") {
        this.errors.push(msg[1]);
      }
    };
    ws.onclose = () => {
      clearInterval(this.timer);
      if (this.closed) return;
      this._status("connecting");
      setTimeout(() => { if (!this.closed) this._connect(); }, this.retry * 1000);
    };
  }
}

if (typeof module !== "undefined") module.exports = { HuddleGuest };
