"""The handlers' driver: each handler a process of its own, never in the node's way (docs/control.md, "Handlers").

:meth:`HandlerRunner.fire` is called from the node's event subscribers (a peer up, suspect or
gone; a record in the log; an app's change of state): it only looks the handlers up and
offers each a job (:class:`~huddle.control.handlers.Admission`), so it returns at once.  A job
admitted runs in a task of its own:

* its program is spawned (no shell) in a session, so a process group, of its own, with the
  parent-death guard the apps have (it dies with the node), the node's environment, then the
  handler's ``env``, then the ``HUDDLE_*`` variables of the occurrence, and the occurrence as
  JSON on its standard input (then closed);
* its standard output and error go, through one pipe, to ``handlers.log`` in the data
  directory's ``apps`` folder (rotated as an app's log is);
* at its ``timeout`` its whole group gets SIGKILL; when its own process ends, what it left in
  its group is killed too.

Counted (``GET /api/v1/handlers``): started, succeeded, failed (a status other than 0, killed
at the timeout, or not spawned), timed out, dropped (the queue was full), not spawned.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..counters import Counters
from ..deathguard import death_guard
from .handlers import Admission, HandlerSpec
from .supervisor import _Output

__all__ = ["HandlerCounters", "HandlerRunner", "Job"]

log = logging.getLogger("huddle.control")

RECENT: Final = 16  # the latest runs the API shows
LOG_SIZE: Final = 1 << 20  # octets of handlers.log before it is rotated
LOG_KEEP: Final = 3


@dataclass(slots=True)
class HandlerCounters(Counters):
    started: int = 0  # processes spawned
    succeeded: int = 0  # ... that exited with status 0 within their timeout
    failed: int = 0  # ... that did not: another status, a signal, killed at the timeout; or not spawned
    timed_out: int = 0  # killed at their timeout (counted in failed too)
    dropped: int = 0  # jobs refused: as many running as allowed, and the queue full
    spawn_failed: int = 0  # programs that could not be spawned (counted in failed too)


@dataclass(frozen=True)
class Job:
    """One run of a handler: the ``on`` that fired it, its ``HUDDLE_*`` variables and its input."""

    spec: HandlerSpec
    fired: str
    env: Mapping[str, str]
    stdin: bytes


class HandlerRunner:
    """Every handler of one node (the module docstring)."""

    def __init__(self, specs: Sequence[HandlerSpec], folder: Path, env: Callable[[], Mapping[str, str]],
                 *, running: int, queued: int) -> None:
        """``folder`` the data directory's ``apps`` (its ``handlers.log``); ``env()`` the node's
        ``HUDDLE_*`` variables; ``running`` and ``queued`` the bounds (``[limits.handlers]``)."""
        self.specs = tuple(specs)
        self._by_on: dict[str, list[HandlerSpec]] = {}
        for spec in self.specs:
            self._by_on.setdefault(spec.on, []).append(spec)
        self._env = env
        self.counters = HandlerCounters()
        self.admission: Admission[Job] = Admission(running, queued)
        self.output = _Output(folder / "handlers.log", LOG_SIZE, LOG_KEEP)
        self._folder = folder
        self._tasks: set[asyncio.Task[None]] = set()
        self._groups: set[int] = set()  # the process groups of the handlers running now
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT)
        self._guard = death_guard()
        self._closed = False

    def wants(self, *ons: str) -> bool:
        """Does any handler run on one of these?"""
        return any(on in self._by_on for on in ons)

    def fire(self, ons: Sequence[str], env: Mapping[str, str], payload: Mapping[str, Any]) -> None:
        """An occurrence: each handler on one of ``ons`` gets a job (run now, queued or dropped)."""
        if self._closed:
            return
        stdin = b""
        for on in ons:
            for spec in self._by_on.get(on, ()):
                if not stdin:
                    stdin = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
                job = Job(spec, on, {**env, "HUDDLE_HANDLER": on}, stdin)
                admitted = self.admission.offer(job)
                if admitted == "run":
                    self._start(job)
                elif admitted == "dropped":
                    self.counters.dropped += 1

    def status(self) -> dict[str, Any]:
        a = self.admission
        return {"handlers": [{"on": s.on, "command": list(s.command), "timeout": s.timeout} for s in self.specs],
                "running": a.running, "queued": len(a.waiting), "max_running": a.limit, "max_queued": a.bound,
                "stats": self.counters.as_dict(), "recent": list(self.recent)}

    async def close(self) -> None:
        """The node stops: queued jobs never run; running ones are killed (their groups)."""
        self._closed = True
        list(self.admission.drain())
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------------ inside

    def _start(self, job: Job) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: Job) -> None:
        try:
            await self._one(job)
        finally:
            following = self.admission.done()
            if following is not None and not self._closed:
                self._start(following)

    async def _one(self, job: Job) -> None:
        spec, counters = job.spec, self.counters
        env = {**os.environ, **dict(spec.env), **self._env(), **job.env}
        self._folder.mkdir(parents=True, exist_ok=True)
        began = asyncio.get_running_loop().time()
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._guard)  # the parent-death guard, as an app has
        except (OSError, subprocess.SubprocessError) as exc:
            text = getattr(exc, "strerror", None) or str(exc)
            counters.failed += 1
            counters.spawn_failed += 1
            self.output.write(f"huddle: handler on {job.fired}: cannot start {spec.command[0]}: {text}\n".encode())
            self._done(job, None, began, text)
            return
        counters.started += 1
        self._groups.add(proc.pid)
        reader = asyncio.ensure_future(self._drain(proc))
        timed_out = False
        try:
            try:
                async with asyncio.timeout(spec.timeout):
                    await self._feed(proc, job.stdin)
                    code = await proc.wait()
            except TimeoutError:
                timed_out = True
                self._kill(proc.pid)
                code = await proc.wait()
        except asyncio.CancelledError:
            self._kill(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        finally:
            self._kill(proc.pid)  # what it left in its group goes with it
            self._groups.discard(proc.pid)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(reader, 2.0)
            reader.cancel()
        if timed_out:
            counters.timed_out += 1
            counters.failed += 1
            log.warning("handler on %s: %s killed at its timeout (%.1f s)", job.fired, spec.command[0], spec.timeout)
        elif code != 0:
            counters.failed += 1
            log.warning("handler on %s: %s ended with %s", job.fired, spec.command[0],
                        f"signal {-code}" if code < 0 else f"status {code}")
        else:
            counters.succeeded += 1
        self._done(job, code, began, "timed out" if timed_out else None)

    def _done(self, job: Job, code: int | None, began: float, error: str | None) -> None:
        took = asyncio.get_running_loop().time() - began
        self.recent.append({"on": job.fired, "command": job.spec.command[0], "exit": code, "error": error,
                            "seconds": round(took, 3)})

    @staticmethod
    async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
        stdin = proc.stdin
        if stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(data)
            await stdin.drain()
        stdin.close()

    async def _drain(self, proc: asyncio.subprocess.Process) -> None:
        stdout = proc.stdout
        if stdout is None:
            return
        while chunk := await stdout.read(1 << 16):
            self.output.write(chunk)

    @staticmethod
    def _kill(pgid: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
