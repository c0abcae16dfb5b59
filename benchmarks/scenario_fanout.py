"""Scenario 3: one `health_check` across A agents, then with one agent in 100 hanging.

The agents offer the bench pack, whose ``bench`` category runs three trivial
probes; the hub knows the runbook because the bench pack is installed on its
path. First ``health_check({"tags": [], "categories": ["bench"]})`` runs a
few times with every agent answering: wall time to the complete answer (and
to the first progress notification). Then the hang flag file is created:
agents 99, 199, ... stop answering, and the same call returns its partial
answer at the tool's deadline (``deadline_s``: the tool's default of 10 s in
the full set, shorter in the quick and smoke sets to save time); the figure
is the wall time to that answer.

If the hub has no `health_check` tool the scenario is skipped.
"""

from __future__ import annotations

import time
from typing import Any

import trio
from mcp import Client

from benchmarks.common import Bench, ScenarioResult
from benchmarks.fleet import SimulatedFleet, ensure_enrolled, running_agents
from benchmarks.hub import HubData, running_hub, wait_online
from benchmarks.mcp_calls import call, mcp_client, tool_names
from benchmarks.pack import CATEGORY
from benchmarks.procs import CpuWindow
from benchmarks.stats import distribution, scalar

TITLE = "3. Fleet fan-out (health_check)"
TOOL = "health_check"
HANG_EVERY = 100
AGENTS_PER_WORKER = 500


async def run(bench: Bench) -> ScenarioResult:
    sizes = bench.sizes
    result = ScenarioResult("fanout", TITLE)
    count = sizes.fanout_agents
    hang_every = HANG_EVERY if count >= HANG_EVERY else count  # below 100 agents, the last one hangs
    hanging = count // hang_every
    result.params = {"agents": count, "repeats": sizes.fanout_repeats, "hanging_agents": hanging}
    workspace = bench.workspace
    data = HubData(workspace.directory("fanout/hub"))
    fleet = SimulatedFleet(workspace.directory("fanout/agents"))
    flag = workspace.root / "fanout-hang.flag"
    workers = max(1, count // AGENTS_PER_WORKER)
    async with running_hub(workspace, data, name="fanout-hub") as hub:
        async with mcp_client(hub.url, hub.admin_key) as client:
            tools = await tool_names(client)
        if TOOL not in tools:
            return result.skip(f"{TOOL} not available (the hub's tools: {', '.join(tools)})")
        await ensure_enrolled(workspace, hub, fleet, count)
        result.params["enroll_s"] = round(fleet.enroll_seconds, 2)
        async with running_agents(
            workspace, hub, fleet, count, workers=workers, hang_every=hang_every, hang_flag=flag
        ) as agents:
            await wait_online(hub, count, 120.0, 0.2)
            async with mcp_client(hub.url, hub.admin_key) as client:
                arguments = await health_check_arguments(client, bench)
                result.params["arguments"] = arguments
                windows = [CpuWindow(hub.meter())] + [CpuWindow(w.meter()) for w in agents.workers]
                await complete_runs(bench, result, client, arguments, count, windows)
                flag.touch()
                await partial_run(bench, result, client, arguments, hanging)
    return result


async def health_check_arguments(client: Client, bench: Bench) -> dict[str, Any]:
    arguments: dict[str, Any] = {"tags": [], "categories": [CATEGORY]}
    listed = await client.list_tools()
    schema = next(tool.input_schema for tool in listed.tools if tool.name == TOOL)
    deadline_s = bench.sizes.fanout_deadline_s
    if deadline_s is not None and "deadline_s" in schema.get("properties", {}):
        arguments["deadline_s"] = deadline_s
    return arguments


class Timed:
    """Wall time of one call and of its first progress notification."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_progress_s: float | None = None
        self.progress_count = 0

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress_count += 1
        if self.first_progress_s is None:
            self.first_progress_s = time.perf_counter() - self.started

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started


async def complete_runs(
    bench: Bench,
    result: ScenarioResult,
    client: Client,
    arguments: dict[str, Any],
    count: int,
    cpu: list[CpuWindow],
) -> None:
    walls, firsts, probes = [], [], 0
    for _ in range(bench.sizes.fanout_repeats):
        timed = Timed()
        output = await call(client, TOOL, arguments, progress_callback=timed.on_progress)
        walls.append(timed.elapsed_s())
        if timed.first_progress_s is not None:
            firsts.append(timed.first_progress_s)
        summary = output["summary"]
        probes += summary["probes_run"]
        if output["partial"] or summary["agents_checked"] != count or summary["probes_failed"]:
            result.notes.append(
                f"an all-answering run was not complete: partial={output['partial']}, "
                f"agents_checked={summary['agents_checked']}, probes_failed={summary['probes_failed']}, "
                f"unreachable={len(output['unreachable'])}"
            )
    result.figures["complete_s"] = distribution(walls, "s")
    result.figures["first_progress_s"] = distribution(firsts, "s")
    result.figures["probes_per_call"] = scalar(probes / len(walls), "count")
    result.figures["hub_cpu_per_call_s"] = scalar(cpu[0].cpu_s() / len(walls), "s")
    agents_cpu_s = sum(window.cpu_s() for window in cpu[1:])
    result.figures["agent_workers_cpu_per_call_s"] = scalar(agents_cpu_s / len(walls), "s")
    bench.say(f"health_check over {count} agents: {sorted(walls)[len(walls) // 2]:.2f} s")


async def partial_run(
    bench: Bench, result: ScenarioResult, client: Client, arguments: dict[str, Any], hanging: int
) -> None:
    timed = Timed()
    with trio.fail_after(180):
        output = await call(client, TOOL, arguments, progress_callback=timed.on_progress)
    elapsed = timed.elapsed_s()
    summary = output["summary"]
    result.figures["partial_s"] = scalar(elapsed, "s")
    result.figures["partial_answered"] = scalar(1.0 if output["partial"] else 0.0, "bool")
    result.figures["partial_probes_succeeded"] = scalar(summary["probes_succeeded"], "count")
    result.figures["partial_probes_failed"] = scalar(summary["probes_failed"], "count")
    result.params["deadline_s"] = arguments.get("deadline_s", "tool default")
    if not output["partial"]:
        result.notes.append(f"with {hanging} agents hanging the answer was not marked partial")
    bench.say(f"partial answer with {hanging} hanging agents after {elapsed:.2f} s")
