"""The `bench` pack: trivial probes for simulated agents, and a three-step runbook.

The probes cost next to nothing, so what a scenario measures is the hub, the
link and MCP, not the probe. An agent whose config carries
``packs.bench.hangFlag = PATH`` stops answering its probes while ``PATH``
exists: that is how scenario 3 makes one agent in a hundred hang.

The hub learns this pack like any third-party pack, through the
``sonde.packs`` entry point (see `write_entry_point`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import trio
from pydantic import Field

from sonde.packs.base import NoParams, Pack, Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.registry import PackRegistry, load_packs
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep

PACK_NAME = "bench"
ECHO_PROBE = "bench.noop.echo"
HANG_PROBE = "bench.noop.hang"
CATEGORY = "bench"
PROBE_TIMEOUT_S = 60.0  # longer than health_check's deadline, so a hanging agent hangs past it

PACK = Pack(
    name=PACK_NAME,
    version="1.0.0",
    description="Trivial probes for the Sonde benchmark harness: they answer at once (or never).",
    categories=(CATEGORY,),
)


class EchoParams(Params):
    text: Annotated[str, Field(max_length=256)] = ""


class Echo(Result):
    text: str


class Clock(Result):
    unix_s: float


class Pid(Result):
    pid: int


async def hang_if_flagged(ctx: ProbeContext) -> None:
    """Never return while the agent's hang flag file exists (scenario 3's hanging agents)."""
    flag = ctx.settings.for_pack(PACK_NAME).get("hangFlag")
    if isinstance(flag, str) and await trio.Path(flag).exists():
        await trio.sleep_forever()


@PACK.probe(ECHO_PROBE, "Echo `text` back at once.", timeout_s=PROBE_TIMEOUT_S)
async def echo(ctx: ProbeContext, params: EchoParams) -> Echo:
    await hang_if_flagged(ctx)
    return Echo(text=params.text)


@PACK.probe("bench.noop.clock", "The agent's clock, in seconds since the epoch.", timeout_s=PROBE_TIMEOUT_S)
async def clock(ctx: ProbeContext, params: NoParams) -> Clock:
    await hang_if_flagged(ctx)
    return Clock(unix_s=time.time())


@PACK.probe("bench.noop.pid", "The agent's process id.", timeout_s=PROBE_TIMEOUT_S)
async def pid(ctx: ProbeContext, params: NoParams) -> Pid:
    await hang_if_flagged(ctx)
    return Pid(pid=os.getpid())


@PACK.probe(HANG_PROBE, "Never answers: for timeout and cancellation runs.", timeout_s=3600)
async def hang(ctx: ProbeContext, params: NoParams) -> Echo:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def no_findings(reading: Reading) -> list[Finding]:
    return []


RUNBOOK = Runbook(
    category=CATEGORY,
    description="Three trivial probes: the fan-out cost of health_check without any probe cost.",
    steps=(
        RunbookStep(ECHO_PROBE, no_findings, {"text": "health"}),
        RunbookStep("bench.noop.clock", no_findings),
        RunbookStep("bench.noop.pid", no_findings),
    ),
)
PACK.runbooks[RUNBOOK.category] = RUNBOOK


def bench_registry(describe_installed: bool = False) -> PackRegistry:
    """The registry a simulated agent offers: the bench pack, and with ``describe_installed``
    the installed packs (Sonde's own) that a real agent here would offer too, those it detects
    on this machine, so that its register and enrollment describe them as a real agent's do
    (tens of KB of probe descriptions and parameter schemas).

    The same set for both, as `sonde enroll` and `sonde start` offer: offered every installed
    pack, the agents registered more packs than they had enrolled with, so each one's first
    register changed its record's packs (an encode of them and a database write), which a real
    agent's does not."""
    if not describe_installed:
        return PackRegistry.of([PACK])
    from sonde.agent.identity import active_packs  # agent code: not for the hub, which loads this pack

    installed = [pack for name, pack in load_packs().packs.items() if name != PACK_NAME]
    return active_packs(PackRegistry.of([PACK, *installed]), None)


ENTRY_POINT_DIST = "sonde_bench_pack-1.0.0.dist-info"


def write_entry_point(site_dir: Path) -> Path:
    """Make ``site_dir`` (put it on PYTHONPATH) declare this pack under ``sonde.packs``.

    A minimal ``.dist-info`` is what an installed third-party pack looks like
    to `importlib.metadata`, so a hub started with it on its path loads the
    pack (and its runbook) through the same code as any other pack.
    """
    dist = site_dir / ENTRY_POINT_DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sonde-bench-pack\nVersion: 1.0.0\n")
    (dist / "entry_points.txt").write_text(f"[sonde.packs]\n{PACK_NAME} = benchmarks.pack:PACK\n")
    return site_dir
