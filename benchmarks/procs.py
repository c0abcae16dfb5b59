"""Child processes for the harness: the hub, agent workers, floor servers, `sonde serve`.

`open_child` starts a process and owns it for the length of an ``async with``:
one task reads its stdout into a bounded channel of lines, one keeps the last
lines of its stderr, and leaving the block stops it (SIGTERM, then SIGKILL
after a grace period) whatever happened inside. Every wait has a deadline.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
STDERR_LINES_KEPT = 2000
STDOUT_LINES_BUFFERED = 256
STOP_GRACE_S = 10.0
READ_CHUNK_BYTES = 65536
PIPE_BYTES = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def child_env(home: Path, *, python_path: Sequence[Path] = ()) -> dict[str, str]:
    """The environment of a child: ours minus SONDE_*, its own HOME, the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONDE_")}
    env["HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in python_path), str(REPO)])
    home.mkdir(parents=True, exist_ok=True)
    return env


@dataclass
class Child:
    """A running child process; create it with `open_child`."""

    name: str
    process: trio.Process
    stdout_lines: trio.MemoryReceiveChannel[str]
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES_KEPT))
    stderr_count: int = 0
    stderr_closed: bool = False
    _stderr_changed: trio.Event = field(default_factory=trio.Event)

    @property
    def pid(self) -> int:
        return self.process.pid

    def meter(self) -> ProcessMeter:
        return ProcessMeter(self.process.pid)

    async def read_line(self, timeout_s: float) -> str:
        """The next stdout line; `RuntimeError` (with the stderr tail) at EOF or after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            try:
                return await self.stdout_lines.receive()
            except trio.EndOfChannel:
                raise RuntimeError(f"{self.name} exited early; stderr:\n{self.describe()}") from None
        raise RuntimeError(f"{self.name} wrote no line within {timeout_s:g}s; stderr:\n{self.describe()}")

    async def read_event(self, timeout_s: float) -> dict[str, Any]:
        """The next stdout line, parsed as a JSON object."""
        line = await self.read_line(timeout_s)
        try:
            event = json.loads(line)
        except ValueError:
            raise RuntimeError(f"{self.name} wrote a non-JSON line: {line[:200]!r}") from None
        if not isinstance(event, dict):
            raise RuntimeError(f"{self.name} wrote a non-object line: {line[:200]!r}")
        return event

    async def wait_stderr(self, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str]:
        """The first stderr line (kept so far or to come) matching ``pattern``."""
        with trio.move_on_after(timeout_s):
            while True:
                for line in self.stderr_tail:
                    match = pattern.search(line)
                    if match:
                        return match
                if self.stderr_closed:
                    break
                self._stderr_changed = trio.Event()
                await self._stderr_changed.wait()
        raise RuntimeError(f"{self.name}: no line matching {pattern.pattern!r}; stderr:\n{self.describe()}")

    def stderr_matching(self, pattern: re.Pattern[str]) -> list[re.Match[str]]:
        return [m for m in (pattern.search(line) for line in self.stderr_tail) if m]

    def describe(self, lines: int = 30) -> str:
        tail = list(self.stderr_tail)[-lines:]
        return "\n".join(tail) or "(nothing on stderr)"

    async def close_stdin(self) -> None:
        if self.process.stdin is not None:
            await self.process.stdin.aclose()

    async def send_line(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(text.encode() + b"\n")

    async def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns the exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace_s):
                return await self.process.wait()
            self.process.kill()
        return await self.process.wait()

    async def _pump_stdout(self, send: trio.MemorySendChannel[str]) -> None:
        async with send:
            if self.process.stdout is None:
                return
            async for line in lines_of(self.process.stdout):
                await send.send(line)

    async def _pump_stderr(self) -> None:
        if self.process.stderr is None:
            return
        async for line in lines_of(self.process.stderr):
            self.stderr_tail.append(line)
            self.stderr_count += 1
            self._stderr_changed.set()
        self.stderr_closed = True
        self._stderr_changed.set()


async def lines_of(stream: trio.abc.ReceiveStream) -> AsyncIterator[str]:
    """The lines of ``stream`` (decoded, without newline) until EOF."""
    buffer = b""
    while True:
        try:
            chunk = await stream.receive_some(READ_CHUNK_BYTES)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            chunk = b""
        if not chunk:
            if buffer:
                yield buffer.decode(errors="replace")
            return
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.decode(errors="replace")


@asynccontextmanager
async def open_child(
    name: str,
    argv: Sequence[str],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    stdin: bool = True,
    log_dir: Path | None = None,
) -> AsyncIterator[Child]:
    """Run ``argv`` for the duration of the block; it is stopped when the block ends."""
    process = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(cwd or REPO),
        start_new_session=True,  # a Ctrl-C at the terminal reaches the harness only; it stops us
    )
    for stream in (process.stdout, process.stderr):
        widen_pipe(stream)
    send, receive = trio.open_memory_channel[str](STDOUT_LINES_BUFFERED)
    child = Child(name, process, receive)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child._pump_stdout, send)
            nursery.start_soon(child._pump_stderr)
            try:
                yield child
            finally:
                with trio.CancelScope(shield=True):
                    await child.stop()
                nursery.cancel_scope.cancel()
    finally:
        if log_dir is not None:
            write_log(log_dir / f"{name}.stderr.log", child.stderr_tail)


def write_log(path: Path, lines: deque[str]) -> None:
    """Keep a child's last stderr lines (a small write, once, at the end)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def widen_pipe(stream: Any) -> None:
    """Give a child's output pipe 1 MiB of room (Linux), so a burst of its log lines never blocks
    the child on a write while the harness is busy: a full pipe would stall its event loop."""
    try:
        fcntl.fcntl(stream.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):
        pass  # not Linux, or above /proc/sys/fs/pipe-max-size: the default 64 KiB it is


def python_module(module: str, *args: str) -> list[str]:
    return [PYTHON, "-m", module, *args]


class ProcessMeter:
    """CPU time and RSS of one process (psutil), for windows measured by the caller."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)

    def cpu_s(self) -> float:
        """User + system CPU seconds used so far."""
        times = self.process.cpu_times()
        return times.user + times.system

    def rss_bytes(self) -> int:
        return int(self.process.memory_info().rss)


class CpuWindow:
    """CPU use of a process between `start` and `stop`, as percent of one core."""

    def __init__(self, meter: ProcessMeter) -> None:
        self.meter = meter
        self.cpu0 = meter.cpu_s()
        self.t0 = trio.current_time()

    def percent(self) -> float:
        elapsed = trio.current_time() - self.t0
        return 100.0 * (self.meter.cpu_s() - self.cpu0) / elapsed if elapsed > 0 else 0.0

    def cpu_s(self) -> float:
        return self.meter.cpu_s() - self.cpu0


async def sample_cpu(meter: ProcessMeter, last: list[float], interval_s: float = 0.1) -> None:
    """Keep ``last[0]`` at the CPU seconds used so far, until the process is gone or this is cancelled."""
    while True:
        try:
            last[0] = meter.cpu_s()
        except psutil.NoSuchProcess:
            return
        await trio.sleep(interval_s)


async def sample_rss(meter: ProcessMeter, into: list[float], interval_s: float = 0.5) -> None:
    """Append the RSS (MiB) every ``interval_s`` until cancelled."""
    while True:
        try:
            into.append(meter.rss_bytes() / 2**20)
        except psutil.NoSuchProcess:
            return
        await trio.sleep(interval_s)
