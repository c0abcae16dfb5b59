"""Commands for probes: argv only, capped, killed on cancel, missing ones reported."""

from __future__ import annotations

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
