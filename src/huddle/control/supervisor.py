"""The apps' driver: processes, their output, pid files and the watchdog, around the machines.

One :class:`~huddle.control.machine.AppMachine` per app decides; this module carries out its
actions and tells it what happened (docs/control.md, "How an app runs"):

* an app is spawned (``subprocess.Popen``, no shell) in a session, so a process group, of its
  own, with a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``) and a pid file
  ``apps/NAME.pid`` naming its group; the node learns of its exit through a pidfd on the
  event loop, then kills what is left of the group;
* its standard output and error go, through one pipe, to ``apps/NAME.log``, rotated at
  ``log-size`` (``NAME.log.1`` .. ``NAME.log.N``), the last 64 KiB kept in memory for the API;
* the :mod:`watchdog <huddle.control.watchdog>` is told each group, so a node killed with
  ``kill -9`` leaves none behind; a node started on the data directory kills a group its pid
  file names that still runs (same boot), so one copy runs;
* :meth:`Supervisor.run` ticks the machines at their deadlines and starts a waiting app once
  the apps it depends on run (another node's, ``NAME@TYPE``, and a ``one-of-type`` app's
  holder are read from the system picture, :mod:`~huddle.control.placement`, each heartbeat);
  :meth:`Supervisor.close` stops them in reverse dependency order.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..deathguard import death_guard
from ..errors import LocalProtocolError
from .machine import KILL, SPAWN, UP, Action, AppMachine, AppState, Signal
from .placement import holder, may_start, remote_ready, split_dependency
from .section import AppSpec

__all__ = ["RING", "Picture", "Supervisor", "UnknownApp"]

log = logging.getLogger("huddle.control")

RING: Final = 1 << 16  # octets of each app's latest output kept for the API (logs --follow)
_TAIL: Final = 1 << 14  # octets of the log file a first read of the logs gives
_WATCHDOG: Final = Path(__file__).with_name("watchdog.py")


class UnknownApp(LocalProtocolError):
    """No app of that name on this node."""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _members(pgid: int, marker: bytes) -> list[int]:
    """The processes of group ``pgid`` whose environment holds ``marker`` (``HUDDLE_APP=NAME``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:  # after the name: state, ppid, pgrp
                continue
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
    return found


class _Output:
    """An app's output: the rotated files and the latest octets in memory."""

    def __init__(self, path: Path, size: int, keep: int) -> None:
        self.path, self._size, self._keep = path, size, keep
        self.ring = bytearray()
        self.total = 0  # octets written since the node started: the offsets the API gives

    def write(self, data: bytes) -> None:
        """Append to the log file; a file that would pass ``log-size`` is rotated first, and
        what does not fit goes to the next file (cut after a line where one ends in it)."""
        self.total += len(data)
        self.ring += data
        del self.ring[:-RING]
        try:
            size = self.path.stat().st_size if self.path.exists() else 0
            while data:
                room = self._size - size
                if room <= 0:
                    self._rotate()
                    size, room = 0, self._size
                # all that fits, else up to the last whole line that fits (a line longer than a file: its size)
                cut = len(data) if len(data) <= room else data.rfind(b"\n", 0, room) + 1 or (room if size == 0 else 0)
                if cut:
                    with self.path.open("ab") as fh:
                        fh.write(data[:cut])
                size, data = size + cut, data[cut:]
                if data:
                    size = self._size  # full: the rest starts the next file
        except OSError as exc:
            log.warning("app log %s: %s", self.path, exc.strerror)

    def _rotate(self) -> None:
        for i in range(self._keep, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            newer = self.path.with_name(f"{self.path.name}.{i - 1}") if i > 1 else self.path
            if i == self._keep:
                older.unlink(missing_ok=True)
            if newer.exists():
                newer.replace(older)
        self.path.unlink(missing_ok=True)

    def read(self, after: int | None, limit: int | None = None) -> dict[str, Any]:
        """After offset ``after`` (from memory; ``lost`` if some fell out), or, with none, the
        log file's tail; ``next`` is the offset to ask for next.  ``limit``: at most that many
        octets (a character it would cut waits for the next read), and ``more`` says whether
        some was left for the next read."""
        more = {} if limit is None else {"more": False}
        if after is None:
            try:
                with self.path.open("rb") as fh:
                    fh.seek(max(0, fh.seek(0, os.SEEK_END) - min(_TAIL, limit or _TAIL)))
                    data = fh.read()
            except OSError:
                data = b""
            return {"text": data.decode(errors="replace"), "next": self.total, "lost": False} | more
        start = self.total - len(self.ring)
        lost = after < start
        data = bytes(self.ring[max(0, after - start):]) if after < self.total else b""
        if limit is None or len(data) <= limit:
            return {"text": data.decode(errors="replace"), "next": self.total, "lost": lost} | more
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(data[:limit], final=False)  # a character cut at the end waits for the next read
        return {"text": text, "next": max(after, start) + limit - len(decoder.getstate()[0]), "lost": lost,
                "more": True}


class _App:
    def __init__(self, spec: AppSpec, folder: Path, jitter: Callable[[], float]) -> None:
        self.spec = spec
        self.machine = AppMachine(spec, jitter)
        self.output = _Output(folder / f"{spec.name}.log", spec.log_size, spec.log_keep)
        self.pid_file = folder / f"{spec.name}.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        self.waiter: asyncio.Future[int] | None = None  # without a pidfd: the thread waiting for its exit
        self.gone = asyncio.Event()
        self.gone.set()


class Picture:
    """What the supervisor reads of the system picture: its members (``GET /api/v1/system``'s),
    this node's id and type, how often to read them again, and how long after the supervisor
    starts it first starts a ``one-of-type`` app (``settle``: time to meet the group and hold its
    reports, so a node that joins one where another node runs the app does not start a second)."""

    def __init__(self, members: Callable[[], Sequence[Mapping[str, Any]]], me: str, node_type: str,
                 every: float, settle: float) -> None:
        self.members, self.me, self.node_type, self.every, self.settle = members, me, node_type, every, settle


_HOLDING: Final = frozenset({AppState.STARTING, AppState.RUNNING, AppState.BACKOFF})


class Supervisor:
    """Every app of one node (the module docstring)."""

    def __init__(self, specs: Sequence[AppSpec], folder: Path, env: Callable[[AppSpec], Mapping[str, str]],
                 clock: Callable[[], float], *, jitter: Callable[[], float] = random.random,
                 picture: Picture | None = None) -> None:
        """``specs`` in start order (each after those it depends on); ``folder`` the data
        directory's ``apps``; ``env(spec)`` the HUDDLE_* variables of an app; ``clock`` seconds;
        ``picture`` the system picture, read when an app depends on another node's or is
        ``one-of-type`` (None: such an app waits for ever)."""
        self.folder, self._env, self._clock = folder, env, clock
        self.apps: dict[str, _App] = {s.name: _App(s, folder, jitter) for s in specs}
        self._picture = picture if any(s.placement == "one-of-type" or s.local_deps != s.depends_on
                                       for s in specs) else None
        self._settled_at = 0.0  # no one-of-type app starts before (set as run() starts)
        # Told (name, state, label) of each app whose label changed (the handlers on app:NAME:STATE).
        self.watch: Callable[[str, str, str], None] | None = None
        self._noted = {name: app.machine.label() for name, app in self.apps.items()}
        self._poke = asyncio.Event()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._guard = death_guard()
        self._boot = _boot_id()
        self.stale_killed = 0  # groups of an earlier run found alive and killed

    # ------------------------------------------------------------------ life

    def open(self) -> None:
        """The folder, the stale groups of an earlier run killed, the watchdog started."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for pid_file in sorted(self.folder.glob("*.pid")):  # an app since removed from the config too
            self._kill_stale(pid_file)
        self._watchdog = subprocess.Popen([sys.executable, "-I", str(_WATCHDOG)], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, start_new_session=True)

    def _kill_stale(self, pid_file: Path) -> None:
        """A group a pid file names, still alive in this boot: an app of a node that did not stop
        cleanly.  Its processes are killed (this node holds the data directory, so no node runs
        them now): those of that process group whose environment names the app, so a group id
        the kernel has since given to another program is left alone."""
        try:
            record = json.loads(pid_file.read_text())
            pgid, boot = int(record["pgid"]), str(record["boot"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            pid_file.unlink(missing_ok=True)
            return
        if pgid > 1 and boot == self._boot:
            stale = _members(pgid, f"HUDDLE_APP={pid_file.stem}".encode())
            for pid in stale:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if stale:
                self.stale_killed += 1
                log.warning("app %s: killed %d process(es) of group %d, left running by a node that did not stop "
                            "cleanly", pid_file.stem, len(stale), pgid)
        pid_file.unlink(missing_ok=True)

    async def run(self) -> None:
        """Start the autostart apps, then tick the machines until cancelled."""
        now = self._clock()
        if self._picture is not None:
            self._settled_at = now + self._picture.settle
        for app in self.apps.values():
            if app.spec.autostart:
                self._carry_out(app, app.machine.start(now))
        while True:
            self._step()
            deadlines = [d for a in self.apps.values() if (d := a.machine.next_deadline()) is not None]
            if self._picture is not None:  # the picture is read again each heartbeat
                deadlines.append(self._clock() + self._picture.every)
            self._poke.clear()
            timeout = None if not deadlines else max(0.0, min(deadlines) - self._clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout)

    def _step(self) -> None:
        now = self._clock()
        picture = self._picture
        members = () if picture is None else picture.members()
        for app in self.apps.values():  # in start order: a dependency that comes up lets its dependents go
            m, spec = app.machine, app.spec
            self._carry_out(app, m.tick(now))
            if spec.placement == "one-of-type" and picture is not None and m.state in _HOLDING:
                chosen = holder(members, spec.name, picture.node_type)
                if chosen is not None and chosen != picture.me:  # another node holds it: stop, then stand by
                    log.info("app %s: held by node %s; stopping it here", spec.name, chosen[:8])
                    self._carry_out(app, m.restart(now))
                    continue
            if m.state is AppState.WAITING and self._may_start(spec, members):
                self._carry_out(app, m.ready(now))
        self._note()

    def _note(self) -> None:
        """Tell ``watch`` of each app whose label changed since it was last told."""
        watch = self.watch
        for name, app in self.apps.items():
            label = app.machine.label()
            if label != self._noted[name]:
                self._noted[name] = label
                if watch is not None:
                    watch(name, str(app.machine.state), label)

    def _may_start(self, spec: AppSpec, members: Sequence[Mapping[str, Any]]) -> bool:
        """Every app it depends on runs (this node's; another node's in the picture) and, for a
        ``one-of-type`` app, the picture makes this node its holder."""
        for dep in spec.depends_on:
            name, node_type = split_dependency(dep)
            if node_type is None:
                if self.apps[name].machine.state is not AppState.RUNNING:
                    return False
            elif not remote_ready(members, name, node_type):
                return False
        if spec.placement != "one-of-type":
            return True
        picture = self._picture
        return picture is not None and self._clock() >= self._settled_at and may_start(
            members, spec.name, picture.node_type, picture.me)

    async def close(self) -> None:
        """Stop every app in reverse dependency order: the apps no other running app depends on
        first, together, each within its stop-timeout (then SIGKILL), then those they depended
        on; then the watchdog, told of no group by then."""
        left = dict(self.apps)
        while left:
            needed = {d for app in left.values() for d in app.spec.local_deps}
            wave = [app for name, app in left.items() if name not in needed]
            await asyncio.gather(*(self._stop(app) for app in wave))
            for app in wave:
                del left[app.spec.name]
        watchdog = self._watchdog
        if watchdog is not None and watchdog.stdin is not None:
            watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(watchdog.wait, 2.0)

    async def _stop(self, app: _App) -> None:
        self._carry_out(app, app.machine.stop(self._clock()))
        if not app.gone.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(app.gone.wait(), app.spec.stop_timeout)
            if not app.gone.is_set():
                self._carry_out(app, app.machine.tick(self._clock()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(app.gone.wait(), 2.0)

    # ------------------------------------------------------------------ orders

    def order(self, name: str, what: str) -> dict[str, Any]:
        """``start``, ``stop`` or ``restart`` an app (UnknownApp: none of that name); its status."""
        app = self.apps.get(name)
        if app is None:
            raise UnknownApp(f"no app {name!r} on this node (apps: {', '.join(self.apps) or 'none'})")
        now = self._clock()
        machine = app.machine
        actions = machine.start(now) if what == "start" else machine.stop(now) if what == "stop" \
            else machine.restart(now)
        self._carry_out(app, actions)
        self._note()
        self._poke.set()
        return self.status(app, now)

    def output(self, name: str, after: int | None, limit: int | None = None) -> dict[str, Any]:
        app = self.apps.get(name)
        if app is None:
            raise UnknownApp(f"no app {name!r} on this node (apps: {', '.join(self.apps) or 'none'})")
        return app.output.read(after, limit)

    def statuses(self) -> list[dict[str, Any]]:
        now = self._clock()
        return [self.status(app, now) for app in self.apps.values()]

    @staticmethod
    def status(app: _App, now: float) -> dict[str, Any]:
        m = app.machine
        proc = app.proc if m.state in UP else None
        return {"name": app.spec.name, "state": str(m.state), "pid": None if proc is None else proc.pid,
                "restarts": m.restarts, "failures": m.failures, "last_exit": m.last_exit, "error": m.error or None,
                "uptime": None if m.started_at is None else round(now - m.started_at, 3),
                "retry_in": m.retry_in(now), "depends_on": list(app.spec.depends_on), "autostart": app.spec.autostart,
                "restart": app.spec.restart, "placement": app.spec.placement}

    def labels(self) -> dict[str, str]:
        """Each app's state as the system picture shows it."""
        return {name: app.machine.label() for name, app in self.apps.items()}

    # ------------------------------------------------------------------ actions

    def _carry_out(self, app: _App, actions: list[Action]) -> None:
        for action in actions:
            if action is SPAWN:
                self._spawn(app)
            elif action is KILL or isinstance(action, Signal):
                signum = signal.SIGKILL if action is KILL else action.signum  # type: ignore[union-attr]
                if app.proc is not None and not app.gone.is_set():
                    with contextlib.suppress(OSError):
                        os.killpg(app.proc.pid, signum)

    def _spawn(self, app: _App) -> None:
        spec, now = app.spec, self._clock()
        env = {**os.environ, **dict(spec.env), **self._env(spec)}
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(list(spec.command), cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=write_end, stderr=write_end, start_new_session=True,
                                    preexec_fn=self._guard)  # noqa: PLW1509 - the parent-death guard (docs/control.md)
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(read_end)
            os.close(write_end)
            text = getattr(exc, "strerror", None) or str(exc)
            app.output.write(f"huddle: cannot start {spec.command[0]}: {text}\n".encode())
            log.warning("app %s: cannot start %s: %s", spec.name, spec.command[0], text)
            self._carry_out(app, app.machine.spawn_failed(now, text))
            return
        os.close(write_end)
        app.proc = proc
        app.gone.clear()
        self._tell_watchdog(f"+{proc.pid}")
        with contextlib.suppress(OSError):
            app.pid_file.write_text(json.dumps({"pgid": proc.pid, "boot": self._boot}))
        loop = asyncio.get_running_loop()
        os.set_blocking(read_end, False)
        loop.add_reader(read_end, self._readable, app, read_end)
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:  # a kernel before 5.3: a thread waits for it instead
            app.waiter = asyncio.ensure_future(asyncio.to_thread(proc.wait))
            app.waiter.add_done_callback(lambda _: self._ended(app, proc, None))
        else:
            loop.add_reader(pidfd, self._ended, app, proc, pidfd)
        log.info("app %s: started, pid %d", spec.name, proc.pid)

    def _readable(self, app: _App, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            app.output.write(data)
            return
        asyncio.get_running_loop().remove_reader(fd)
        os.close(fd)

    def _ended(self, app: _App, proc: subprocess.Popen[bytes], pidfd: int | None) -> None:
        if pidfd is not None:
            asyncio.get_running_loop().remove_reader(pidfd)
            os.close(pidfd)
        code = proc.wait()
        with contextlib.suppress(OSError):  # what the app left in its group goes with it
            os.killpg(proc.pid, signal.SIGKILL)
        self._tell_watchdog(f"-{proc.pid}")
        app.pid_file.unlink(missing_ok=True)
        app.gone.set()
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        log.info("app %s: pid %d ended (%s)", app.spec.name, proc.pid, how)
        self._carry_out(app, app.machine.exited(self._clock(), code))
        if app.machine.state is AppState.FAILED:
            log.warning("app %s: failed to start %d time(s) in a row: given up (huddle app start %s)",
                        app.spec.name, app.machine.failures, app.spec.name)
        self._note()
        self._poke.set()

    def _tell_watchdog(self, line: str) -> None:
        watchdog = self._watchdog
        if watchdog is not None and watchdog.stdin is not None and not watchdog.stdin.closed:
            try:
                watchdog.stdin.write(f"{line}\n".encode())
                watchdog.stdin.flush()
            except OSError as exc:
                log.warning("the apps' watchdog is gone (%s): an app may outlive a node killed now", exc)
