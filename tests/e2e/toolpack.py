"""A test-only pack with a runbook, made discoverable to subprocesses by entry point.

`toolcheck` has a category whose findings are fixed (one of each severity),
and a probe that hangs when the agent's environment says so: the hub and
every agent get the pack on PYTHONPATH; only an agent started with
SONDE_TOOLCHECK_HANG=1 hangs.
"""

from __future__ import annotations

from pathlib import Path

from tests.testpacks import install_test_pack

PACK_SOURCE = """
from __future__ import annotations

import os

import trio
from pydantic import Field

from sonde.packs.base import Pack, Params, Result
from sonde.packs.runbook import Finding, Runbook, RunbookStep

PACK = Pack("toolcheck", "0.0.1", "Test-only probes for the tool tests.")


class WaitParams(Params):
    seconds: float = Field(default=0.0, ge=0, le=3600)


class Waited(Result):
    hung: bool


@PACK.probe("toolcheck.state.read", "Answers at once, or hangs when this agent was started to hang.")
async def read_state(ctx, params: WaitParams) -> Waited:
    if os.environ.get("SONDE_TOOLCHECK_HANG") == "1":
        await trio.sleep_forever()
    await trio.sleep(params.seconds)
    return Waited(hung=False)


def fixed_findings(reading):
    return [
        Finding("info", "toolcheck info", "an informational finding", "toolcheck.state.read"),
        Finding("critical", "toolcheck critical", "a critical finding", "toolcheck.state.read"),
        Finding("warning", "toolcheck warning", "a warning finding", "toolcheck.state.read"),
    ]


PACK.runbooks["toolcheck"] = Runbook(
    "toolcheck", "Fixed findings for tests.", (RunbookStep("toolcheck.state.read", fixed_findings),)
)
"""


def write_toolpack(site: Path) -> Path:
    return install_test_pack(site, "toolcheck", PACK_SOURCE)
