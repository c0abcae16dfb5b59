"""Commands for probes: argv only, capped, killed on cancel, missing ones reported."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import trio

from sonde.packs.base import ProbeUnavailable
from sonde.packs.process import run_command


async def test_runs_argv_and_collects_output() -> None:
    out = await run_command(["echo", "hello; rm -rf /"])
    assert out.returncode == 0
    assert out.stdout == "hello; rm -rf /\n"  # metacharacters are just text: no shell
    assert not out.truncated


async def test_string_commands_are_refused() -> None:
    with pytest.raises(TypeError, match="argv"):
        await run_command("echo hi")  # type: ignore[arg-type]


async def test_missing_command_is_unavailable() -> None:
    with pytest.raises(ProbeUnavailable, match="not installed"):
        await run_command(["sonde-no-such-command-xyz"])


async def test_output_is_capped_and_process_killed() -> None:
    out = await run_command(["yes"], max_output_bytes=10_000)
    assert out.truncated
    assert len(out.stdout) == 10_000


async def test_cancel_kills_the_process() -> None:
    me = psutil.Process()
    with trio.move_on_after(0.5):
        await run_command(["sleep", "30"])
    await trio.sleep(0.1)
    sleepers = [c for c in me.children() if c.name() == "sleep" and c.status() != psutil.STATUS_ZOMBIE]
    assert sleepers == []


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def gone_within(pid: int, seconds: float) -> bool:
    ended = gone(pid)
    with trio.move_on_after(seconds):
        while not ended:
            await trio.sleep(0.05)
            ended = gone(pid)
    return ended


async def test_cancel_kills_what_the_command_started(tmp_path: Path) -> None:
    """A wrapper's children ran on, reparented, after the probe that ran it gave up."""
    pidfile = tmp_path / "child.pid"
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    wrapper.chmod(0o755)
    started = trio.current_time()
    with trio.move_on_after(0.5):
        await run_command([str(wrapper)])
    assert trio.current_time() - started < 2  # at once, not after a SIGTERM's 5 s of grace
    assert await gone_within(int(pidfile.read_text()), 5.0), "the command's child runs on"


async def test_output_past_the_cap_kills_what_the_command_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nexec yes\n")
    wrapper.chmod(0o755)
    out = await run_command([str(wrapper)], max_output_bytes=10_000)
    assert out.truncated
    assert await gone_within(int(pidfile.read_text()), 5.0), "the command's child runs on"
