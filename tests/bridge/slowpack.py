"""A test-only pack whose probe runs ``sleep 317``, found by an agent subprocess through PYTHONPATH.

Cancelling the MCP call must reach the agent and kill that ``sleep``: a
process anyone can look for.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from tests.testpacks import install_test_pack

SLEEP_ARGV = ["sleep", "317"]
SLOW_PROBE = "bridgetest.sleep.long"

PACK_SOURCE = f'''
"""Test-only pack for the bridge tests."""
from sonde.packs.base import NoParams, Pack, Result

PACK = Pack("bridgetest", "0.0.1", "Test-only: a probe that sleeps in a subprocess.")


class Slept(Result):
    returncode: int


@PACK.probe("{SLOW_PROBE}", "Runs `sleep 317`.", timeout_s=120)
async def sleep_long(ctx, params: NoParams) -> Slept:
    done = await ctx.run({SLEEP_ARGV!r})
    return Slept(returncode=done.returncode)
'''


def write_slow_pack(site: Path) -> Path:
    """Write the pack and its ``*.dist-info`` entry point under ``site``; return ``site``."""
    return install_test_pack(site, "bridgetest", PACK_SOURCE)


def sleepers_under(pid: int) -> list[psutil.Process]:
    """The ``sleep 317`` processes descended from ``pid`` that are still alive."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    alive = []
    for child in children:
        try:
            if child.cmdline() == SLEEP_ARGV and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive
