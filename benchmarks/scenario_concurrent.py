"""Scenario 2: C MCP clients spread over A agents, each calling `probe` back to back for T seconds.

Each client has its own MCP session and walks the agents round robin from
its own starting point, so every agent gets work. The clients run in the
harness process; the agents in a worker process; the hub alone in its own,
so its CPU (percent of one core over the T seconds) and RSS are its own.
Latency is per call, errors are tool errors or exceptions (counted, the
first messages kept); probes per second counts successful calls only.

The same clients then drive the trivial MCP tool of `benchmarks.floors` for
the same time: the calls per second the MCP SDK itself reaches on this
machine with client and server sharing it, the ceiling for any MCP server.
"""

from __future__ import annotations

import time

import trio
from mcp import Client

from benchmarks.common import Bench, ScenarioResult
from benchmarks.fleet import SimulatedFleet, ensure_enrolled, running_agents
from benchmarks.floors import NOOP_TOOL
from benchmarks.hub import HubData, running_hub, wait_online
from benchmarks.mcp_calls import ErrorLog, ToolFailed, call, mcp_client
from benchmarks.pack import ECHO_PROBE
from benchmarks.procs import CpuWindow, open_child, python_module, sample_rss
from benchmarks.stats import distribution, scalar

TITLE = "2. Concurrent probes"
AGENTS_PER_WORKER = 50
CALL_TIMEOUT_S = 30.0
FLOOR_START_TIMEOUT_S = 30.0


async def run(bench: Bench) -> ScenarioResult:
    sizes = bench.sizes
    result = ScenarioResult("concurrent", TITLE)
    result.params = {"clients": sizes.clients, "agents": sizes.agents, "seconds": sizes.concurrent_s}
    workspace = bench.workspace
    data = HubData(workspace.directory("concurrent/hub"))
    fleet = SimulatedFleet(workspace.directory("concurrent/agents"))
    workers = max(1, sizes.agents // AGENTS_PER_WORKER)
    result.params["agent_workers"] = workers
    async with running_hub(workspace, data, name="concurrent-hub") as hub:
        await ensure_enrolled(workspace, hub, fleet, sizes.agents)
        async with running_agents(workspace, hub, fleet, sizes.agents, workers=workers) as agents:
            await wait_online(hub, sizes.agents, 60.0, 0.1)
            names = fleet.names(sizes.agents)
            latencies: list[float] = []
            errors = ErrorLog()
            rss: list[float] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sample_rss, hub.meter(), rss)
                clients = await open_clients(nursery, hub.url, hub.admin_key, sizes.clients)
                hub_cpu = CpuWindow(hub.meter())
                worker_cpu = [CpuWindow(worker.meter()) for worker in agents.workers]
                started = trio.current_time()
                async with trio.open_nursery() as load:
                    for i, client in enumerate(clients):
                        first = i * len(names) // len(clients)
                        load.start_soon(drive, client, names, first, sizes.concurrent_s, latencies, errors)
                elapsed = trio.current_time() - started
                result.figures["hub_cpu_percent"] = scalar(hub_cpu.percent(), "% of one core")
                result.figures["agent_workers_cpu_percent"] = scalar(
                    sum(w.cpu_s() for w in worker_cpu) * 100 / elapsed, "% of one core"
                )
                nursery.cancel_scope.cancel()
    if sizes.concurrent_floor:
        await measure_floor(bench, result)
    result.figures["probes_per_s"] = scalar(len(latencies) / elapsed, "1/s")
    result.figures["latency_ms"] = distribution(latencies, "ms")
    result.figures["errors"] = scalar(errors.count, "count")
    result.figures["hub_rss_mib"] = distribution(rss, "MiB")
    if errors.count:
        result.notes.append(f"{errors.count} errors; first: {' | '.join(errors.first)}")
    floor = result.figures.get("mcp_floor_calls_per_s", {}).get("value") or 0.0
    if floor:
        result.figures["probes_over_mcp_floor"] = scalar(len(latencies) / elapsed / floor, "x")
    bench.say(
        f"{len(latencies) / elapsed:.0f} probes/s ({floor:.0f}/s on the MCP floor), {errors.count} errors"
    )
    return result


async def measure_floor(bench: Bench, result: ScenarioResult) -> None:
    """The same clients for the same time against the trivial MCP tool: the SDK's own ceiling here."""
    sizes = bench.sizes
    argv = python_module("benchmarks.floors", "mcp")
    env = bench.workspace.env("floors")
    latencies: list[float] = []
    errors = ErrorLog()
    async with open_child("floor-mcp-concurrent", argv, env=env, log_dir=bench.workspace.log_dir) as server:
        url = await server.read_line(FLOOR_START_TIMEOUT_S)
        async with trio.open_nursery() as nursery:
            clients = await open_clients(nursery, url, None, sizes.clients)
            window = CpuWindow(server.meter())
            started = trio.current_time()
            async with trio.open_nursery() as load:
                for client in clients:
                    load.start_soon(drive, client, [], 0, sizes.concurrent_s, latencies, errors, NOOP_TOOL)
            elapsed = trio.current_time() - started
            result.figures["mcp_floor_server_cpu_percent"] = scalar(window.percent(), "% of one core")
            nursery.cancel_scope.cancel()
    result.figures["mcp_floor_calls_per_s"] = scalar(len(latencies) / elapsed, "1/s")
    result.figures["mcp_floor_latency_ms"] = distribution(latencies, "ms")
    if errors.count:
        result.notes.append(f"MCP floor: {errors.count} errors; first: {' | '.join(errors.first)}")


async def open_clients(nursery: trio.Nursery, url: str, key: str | None, count: int) -> list[Client]:
    """``count`` MCP sessions, each kept open by a task in ``nursery`` until it is cancelled."""
    clients: list[Client] = []

    async def hold(task_status: trio.TaskStatus[None]) -> None:
        async with mcp_client(url, key) as client:
            clients.append(client)
            task_status.started()
            await trio.sleep_forever()

    for _ in range(count):
        await nursery.start(hold)
    return clients


async def drive(
    client: Client,
    names: list[str],
    first: int,
    seconds: float,
    latencies: list[float],
    errors: ErrorLog,
    tool: str = "probe",
) -> None:
    """Call ``tool`` back to back, round robin over agents ``names`` from ``first``, for ``seconds``."""
    deadline = trio.current_time() + seconds
    i = first
    while trio.current_time() < deadline:
        agent = names[i % len(names)] if names else "bench-00000"
        arguments = {"agent": agent, "probe": ECHO_PROBE, "params": {"text": "x"}}
        i += 1
        started = time.perf_counter()
        try:
            with trio.fail_after(CALL_TIMEOUT_S):
                await call(client, tool, arguments)
        except ToolFailed as exc:
            errors.add(f"tool error: {exc}")
            continue
        except trio.TooSlowError:
            errors.add(f"no answer within {CALL_TIMEOUT_S:g}s")
            continue
        except Exception as exc:  # a transport failure is a result of the run, not its end
            errors.add(f"{type(exc).__name__}: {exc}")
            continue
        latencies.append((time.perf_counter() - started) * 1000)
