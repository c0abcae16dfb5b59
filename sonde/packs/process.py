"""Run one command for a probe: argv only, output capped, killed on cancel with all it started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import trio

from sonde.packs.base import ProbeUnavailable
from sonde.packs.packages import install_hint

DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
STDERR_MAX_BYTES = 64 * 1024
READ_CHUNK_BYTES = 65536


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str
    truncated: bool


async def _read_capped(stream: trio.abc.ReceiveStream, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes | bytearray] = []
    size = 0
    while True:
        chunk = await stream.receive_some(READ_CHUNK_BYTES)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], True


def kill_group(process: trio.Process) -> None:
    """Kill ``process`` and every process it started: its own group (`start_new_session`).
    Not yet reaped, its id cannot have been reused. A read-only command has nothing to save."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _deliver_cancel(process: trio.Process) -> None:
    kill_group(process)


async def run_command(
    argv: Sequence[str], *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
) -> CommandOutput:
    """Run ``argv`` (a list, never a string) and collect its output.

    Output past ``max_output_bytes`` is cut and the process killed. A missing
    executable raises `ProbeUnavailable`. Cancellation kills the process and what it
    started (a cancelled wrapper script's children ran on, reparented, in a review), at
    once: trio's default waits up to 5 s for a SIGTERM to be heeded.
    """
    if isinstance(argv, str | bytes):
        raise TypeError("commands are argv lists, never strings")
    if not argv:
        raise ValueError("empty command")
    executable = shutil.which(argv[0])
    if executable is None:
        raise ProbeUnavailable(f"command {argv[0]!r} is not installed on this machine{install_hint(argv[0])}")
    if not os.access(executable, os.X_OK):
        raise ProbeUnavailable(f"command {argv[0]!r} may not be run by this user")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    results: dict[str, tuple[bytes, bool]] = {}
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                check=False,
                env=env,
                start_new_session=True,  # its own group, killed whole
                deliver_cancel=_deliver_cancel,
            )
        )
        assert process.stdout is not None
        assert process.stderr is not None

        async def collect(key: str, stream: trio.abc.ReceiveStream, limit: int) -> None:
            results[key] = await _read_capped(stream, limit)
            if results[key][1]:
                kill_group(process)

        nursery.start_soon(collect, "out", process.stdout, max_output_bytes)
        nursery.start_soon(collect, "err", process.stderr, STDERR_MAX_BYTES)
    stdout, truncated = results["out"]
    stderr, _ = results["err"]
    return CommandOutput(
        process.returncode if process.returncode is not None else -1,
        stdout.decode(errors="replace"),
        stderr.decode(errors="replace"),
        truncated,
    )
