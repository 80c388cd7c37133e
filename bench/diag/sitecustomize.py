"""A node's counters for ``bench/formation_window.py`` (diagnosis only, never imported by huddle).

Python imports a ``sitecustomize`` module at start-up from ``sys.path``; formation_window.py
puts this directory first on the nodes' ``PYTHONPATH`` and sets ``HUDDLE_DIAG_DIR``.  In a
``huddle node`` process so started, this module wraps a few methods of the driver, the
transport, the mesh and the picture service to count the messages received and sent by
type and to time, with ``time.thread_time`` (CPU of the main thread, not wall time: with
dozens of processes on two CPUs a wall-clock profile charges a function the time it was
preempted), each received type's ``Mesh.receive``, the driver's ``execute``, the
transport's ``_readable`` and the mesh's ``tick``.  SIGUSR1 takes a snapshot ("a"), SIGUSR2
another ("b") and writes both to ``$HUDDLE_DIAG_DIR/<pid>.json``.  The wrappers cost a few
microseconds a message: the windows measured with them are longer than without.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("HUDDLE_DIAG_DIR") and "node" in sys.argv:
    import collections
    import json
    import signal
    import time
    from typing import Any

    import huddle.driver as _driver
    import huddle.protocol.mesh as _mesh
    import huddle.protocol.picture as _picture
    import huddle.transport.zmq_transport as _transport

    _cpu = time.thread_time
    _received: collections.Counter[str] = collections.Counter()
    _sent: collections.Counter[str] = collections.Counter()
    _spent: collections.Counter[str] = collections.Counter()
    _wakeups = [0]  # batches of messages handed to the driver
    _objects: dict[str, Any] = {}
    _snaps: dict[str, Any] = {}
    _reports: list[list[Any]] = []  # report ticks between the snapshots: links, links that got our last, due by refresh

    def _timed(name: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = _cpu()
            try:
                return method(*args, **kwargs)
            finally:
                _spent[name] += _cpu() - t0
        return wrapper

    _on_frames = _driver.MeshDriver.on_frames

    def on_frames(self: Any, batch: list[list[bytes]], sources: list[str]) -> None:
        for frames in batch:
            _received[frames[1].decode("ascii", "replace") if len(frames) > 1 else "?"] += 1
        _wakeups[0] += 1
        _on_frames(self, batch, sources)

    _receive = _mesh.Mesh.receive

    def receive(self: Any, frames: list[bytes], now: float, source: str = "") -> bool:
        t0 = _cpu()
        try:
            return bool(_receive(self, frames, now, source))
        finally:
            _spent["receive " + frames[1].decode("ascii", "replace")] += _cpu() - t0

    _tick = _mesh.Mesh.tick

    def tick(self: Any, now: float) -> None:
        _objects.setdefault("mesh", self)
        t0 = _cpu()
        try:
            _tick(self, now)
        finally:
            _spent["tick"] += _cpu() - t0

    _report_tick = _picture.Reports.tick

    def report_tick(self: Any, now: float) -> None:
        _objects.setdefault("reports", self)
        if now >= self.pictures.next_report and "a" in _snaps and "b" not in _snaps:
            links = set(self._links)
            _reports.append([len(links), len(self._sent_to & links), now >= self._refresh_at])
        _report_tick(self, now)

    _send = _transport.ZmqTransport.send

    def send(self: Any, conn: int, frames: list[bytes]) -> bool:
        _sent[frames[0].decode("ascii", "replace")] += 1
        return bool(_send(self, conn, frames))

    _driver.MeshDriver.on_frames = on_frames  # type: ignore[method-assign]
    _driver.MeshDriver.execute = _timed("execute", _driver.MeshDriver.execute)  # type: ignore[method-assign]
    _transport.ZmqTransport._readable = _timed("readable", _transport.ZmqTransport._readable)  # type: ignore[method-assign]
    _transport.ZmqTransport.send = send  # type: ignore[method-assign]
    _mesh.Mesh.receive = receive  # type: ignore[method-assign]
    _mesh.Mesh.tick = tick  # type: ignore[method-assign]
    _picture.Reports.tick = report_tick  # type: ignore[method-assign]

    def _snapshot() -> dict[str, Any]:
        mesh, reports = _objects.get("mesh"), _objects.get("reports")
        return {"process_cpu": time.process_time(), "main_cpu": _cpu(), "received": dict(_received),
                "sent": dict(_sent), "spent": dict(_spent), "batches": _wakeups[0], "reports": list(_reports),
                "mesh": mesh.stats.as_dict() if mesh is not None else {},
                "picture": reports.stats.as_dict() if reports is not None else {}}

    def _first(signum: int, frame: object) -> None:
        _snaps["a"] = _snapshot()

    def _second(signum: int, frame: object) -> None:
        _snaps["b"] = _snapshot()
        path = os.path.join(os.environ["HUDDLE_DIAG_DIR"], f"{os.getpid()}.json")
        with open(path + ".part", "w") as out:
            json.dump(_snaps, out)
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR1, _first)
    signal.signal(signal.SIGUSR2, _second)
