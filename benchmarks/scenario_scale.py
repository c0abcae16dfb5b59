"""Scenario 4: connect A agents with heartbeats on and hold them.

For each size the hub starts afresh (same data directory, every agent
enrolled once), settles, and its RSS is taken as the baseline. Worker
processes then connect agents 0..A-1 (a bounded number of connects in flight
per worker, under hypercorn's default listen backlog of 100; the hub listens
with 4,096 now, and the limit is kept so that runs compare).

- time to all online: from spawning the workers until ``GET /api/v1/agents``
  lists A agents online (includes the workers' Python start-up);
  ``connect_s`` is the workers' own time from first connect to last ack.
- hub RSS per agent: (RSS with A agents online - baseline) / A, and the same
  at the hold's end (``hub_rss_held_per_agent_kib``), once the hub has given
  back what the connect storm left in its heap. The agents describe the
  installed packs a real agent here offers besides the bench pack
  (``packs_described``), at enrollment and register: the hub holds those
  descriptions for every agent it knows.
- idle CPU: the hub's CPU over the first half of the hold, nothing but
  heartbeats arriving (A / interval per second); also per heartbeat, and
  that cost extrapolated to the target's load (10,000 agents, 30 s interval).
- heartbeat lag: there is no heartbeat ack, so the proxy is the freshness of
  ``last_seen`` in one ``GET /api/v1/agents`` at the end of the hold: with
  heartbeats handled on time it stays under the interval (+1 s, as the hub
  reports whole seconds). ``late_agents`` counts those over interval + 1.5 s.
- probe under load: sequential `probe` calls to random agents in the second
  half of the hold; then `list_capabilities` twice (it looks at every agent).
- stop: SIGTERM to the hub with every agent still connected, seconds until it
  exited (``hub_stop_s``) and its CPU meanwhile (``hub_stop_cpu_s``). The
  simulated agents answer the hub's close frames on this same machine, so the
  wall time includes their CPU; the hub's CPU is what its own share costs.
"""

from __future__ import annotations

import calendar
import math
import random
import signal
import time

import trio

from benchmarks.common import Bench, ScenarioResult
from benchmarks.fleet import SimulatedFleet, ensure_enrolled, running_agents
from benchmarks.hub import HubData, RunningHub, agent_statuses, count_online, running_hub
from benchmarks.mcp_calls import ErrorLog, ToolFailed, timed_call
from benchmarks.mcp_calls import mcp_client as open_mcp
from benchmarks.pack import ECHO_PROBE, bench_registry
from benchmarks.procs import CpuWindow, sample_cpu, sample_rss
from benchmarks.stats import distribution, scalar

TITLE = "4. Scale: agents held by one hub"
AGENTS_PER_WORKER = 2500
CONNECTS_IN_FLIGHT = 96  # across workers: under hypercorn's default listen backlog of 100
REFERENCE_AGENTS, REFERENCE_INTERVAL_S = 10_000, 30.0  # the target: 10,000 agents, default heartbeats
SETTLE_S = 1.0
LATE_MARGIN_S = 1.5
ONLINE_TIMEOUT_S = 120.0  # after every worker reported its acks
STOP_TIMEOUT_S = 120.0  # SIGTERM to exit, with every agent connected; then it is killed


async def run(bench: Bench) -> ScenarioResult:
    sizes = bench.sizes
    result = ScenarioResult("scale", TITLE)
    result.params = {
        "agents": list(sizes.scale_agents),
        "hold_s": sizes.scale_hold_s,
        "heartbeat_interval_s": sizes.scale_heartbeat_s,
        "connects_in_flight": CONNECTS_IN_FLIGHT,
        "packs_described": sorted(bench_registry(describe_installed=True).packs),
    }
    workspace = bench.workspace
    data = HubData(workspace.directory("scale/hub"))
    fleet = SimulatedFleet(workspace.directory("scale/agents"), describe_installed=True)
    for count in sizes.scale_agents:
        async with running_hub(
            workspace, data, name=f"scale-hub-{count}", heartbeat_interval_s=sizes.scale_heartbeat_s
        ) as hub:
            if fleet.enrolled < max(sizes.scale_agents):
                await ensure_enrolled(workspace, hub, fleet, max(sizes.scale_agents))
                result.figures["enroll_per_agent_ms"] = scalar(
                    fleet.enroll_seconds * 1000 / fleet.enrolled, "ms"
                )
            await hold_agents(bench, result, hub, fleet, count)
    return result


async def hold_agents(
    bench: Bench, result: ScenarioResult, hub: RunningHub, fleet: SimulatedFleet, count: int
) -> None:
    sizes = bench.sizes
    hold_s, interval = sizes.scale_hold_s, sizes.scale_heartbeat_s
    await trio.sleep(SETTLE_S)
    meter = hub.meter()
    baseline = meter.rss_bytes()
    figures = result.figures
    rss: list[float] = []
    workers = max(1, math.ceil(count / AGENTS_PER_WORKER))
    sampling = trio.CancelScope()

    async def sample() -> None:
        with sampling:
            await sample_rss(meter, rss)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample)
        started = trio.current_time()
        async with running_agents(
            bench.workspace,
            hub,
            fleet,
            count,
            workers=workers,
            hold_s=hold_s + ONLINE_TIMEOUT_S + 30,  # the workers' own deadline, with room to spare
            connect_timeout_s=max(60.0, count / 20),
            connect_concurrency=max(1, CONNECTS_IN_FLIGHT // workers),
        ) as agents:
            reached, _ = await count_online(hub, count, ONLINE_TIMEOUT_S, 0.5 if count <= 1000 else 2.0)
            online_s = trio.current_time() - started
            online_rss = meter.rss_bytes()
            idle = CpuWindow(meter)
            await trio.sleep(hold_s / 2)
            idle_percent = idle.percent()
            probes, errors = await probe_for(hub, fleet.names(count), hold_s / 2)
            held_rss = meter.rss_bytes()  # the storm over: what the hub holds the fleet in
            capabilities = await time_capabilities(hub)
            snapshot_at, agents_now = time.time(), await list_agents(hub)
            worker_rss = sum(worker.meter().rss_bytes() for worker in agents.workers)
            sampling.cancel()  # the RSS samples end here: the hub stops next
            stop_s, stop_cpu_s = await stop_timed(hub)
    staleness = [snapshot_at - seen for seen in last_seen_times(agents_now)]
    online = sum(1 for agent in agents_now if agent["status"] == "online")
    degraded = sum(1 for agent in agents_now if agent["status"] == "degraded")
    at = f"@{count}"
    figures["acked" + at] = scalar(agents.acked, "count")
    figures["online_reached" + at] = scalar(reached, "count")
    figures["time_to_all_online_s" + at] = scalar(online_s if reached == count else None, "s")
    figures["connect_s" + at] = scalar(agents.acked_seconds, "s")
    figures["agent_ack_s" + at] = distribution(agents.ack_seconds, "s")
    figures["hub_rss_baseline_mib" + at] = scalar(baseline / 2**20, "MiB")
    figures["hub_rss_online_mib" + at] = scalar(online_rss / 2**20, "MiB")
    figures["hub_rss_mib" + at] = distribution(rss, "MiB")
    figures["hub_rss_per_agent_kib" + at] = scalar((online_rss - baseline) / 1024 / max(reached, 1), "KiB")
    figures["hub_rss_held_per_agent_kib" + at] = scalar((held_rss - baseline) / 1024 / max(reached, 1), "KiB")
    figures["hub_idle_cpu_percent" + at] = scalar(idle_percent, "% of one core")
    beats_per_s = max(reached, 1) / interval
    figures["heartbeats_per_s" + at] = scalar(beats_per_s, "1/s")
    cpu_per_beat_ms = idle_percent * 10 / beats_per_s
    figures["hub_cpu_per_heartbeat_ms" + at] = scalar(cpu_per_beat_ms, "ms")
    reference_beats = REFERENCE_AGENTS / REFERENCE_INTERVAL_S
    figures["idle_cpu_extrapolated_10k_30s_percent" + at] = scalar(
        cpu_per_beat_ms * reference_beats / 10, "% of one core"
    )
    figures["last_seen_staleness_s" + at] = distribution(staleness, "s")
    figures["late_agents" + at] = scalar(sum(s > interval + LATE_MARGIN_S for s in staleness), "count")
    figures["all_online" + at] = scalar(1.0 if online == count else 0.0, "bool")
    figures["probe_rtt_under_load_ms" + at] = distribution(probes, "ms")
    (first_ms, first_cpu_ms), (again_ms, again_cpu_ms) = capabilities
    figures["list_capabilities_first_ms" + at] = scalar(first_ms, "ms")
    figures["list_capabilities_first_hub_cpu_ms" + at] = scalar(first_cpu_ms, "ms")
    figures["list_capabilities_ms" + at] = scalar(again_ms, "ms")
    figures["list_capabilities_hub_cpu_ms" + at] = scalar(again_cpu_ms, "ms")
    figures["worker_rss_per_agent_kib" + at] = scalar(worker_rss / 1024 / count, "KiB")
    figures["hub_stop_s" + at] = scalar(stop_s, "s")
    figures["hub_stop_cpu_s" + at] = scalar(stop_cpu_s, "s")
    if stop_s is None:
        result.notes.append(f"{count} agents: the hub did not exit within {STOP_TIMEOUT_S:g} s of SIGTERM")
    if errors.count:
        result.notes.append(f"{count} agents: {errors.count} probe errors; first: {' | '.join(errors.first)}")
    if agents.errors:
        result.notes.append(f"{count} agents: connect errors: {' | '.join(agents.errors[:3])}")
    if degraded:
        result.notes.append(f"{count} agents: {degraded} held as degraded (attestation changed)")
    if reached < count:
        result.notes.append(
            f"{count} agents: {agents.acked} acked by the hub, but only {reached} listed online "
            f"{ONLINE_TIMEOUT_S:g} s after the workers reported"
        )
    bench.say(
        f"{reached}/{count} agents online in {online_s:.1f} s; "
        f"{(online_rss - baseline) / 1024 / count:.0f} KiB/agent; idle CPU {idle_percent:.1f} %; "
        f"stopped in {'-' if stop_s is None else f'{stop_s:.1f}'} s"
    )


async def stop_timed(hub: RunningHub) -> tuple[float | None, float]:
    """SIGTERM the hub with its agents connected: seconds until it exited (None: it had not
    after `STOP_TIMEOUT_S`; leaving `running_hub` kills it) and its CPU seconds meanwhile,
    to the last sample before it exited."""
    meter = hub.meter()
    cpu = [meter.cpu_s()]
    first = cpu[0]
    started = trio.current_time()
    hub.child.process.send_signal(signal.SIGTERM)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_cpu, meter, cpu)
        with trio.move_on_after(STOP_TIMEOUT_S):
            await hub.child.process.wait()
        nursery.cancel_scope.cancel()
    took = trio.current_time() - started
    return (took if hub.child.process.returncode is not None else None), cpu[0] - first


async def list_agents(hub: RunningHub) -> list[dict[str, object]]:
    async with hub.rest() as client:
        return await agent_statuses(hub, client)


def last_seen_times(agents: list[dict[str, object]]) -> list[float]:
    """``last_seen`` (``2026-01-01T00:00:00Z``, whole seconds) of the online agents, as epoch seconds."""
    seen = []
    for agent in agents:
        text = agent.get("last_seen")
        if agent.get("status") == "online" and isinstance(text, str):
            seen.append(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    return seen


async def probe_for(hub: RunningHub, names: list[str], seconds: float) -> tuple[list[float], ErrorLog]:
    """Sequential `probe` calls to random agents for ``seconds``: latency with the fleet connected."""
    samples: list[float] = []
    errors = ErrorLog()
    rng = random.Random(8)
    async with open_mcp(hub.url, hub.admin_key) as client:
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            arguments = {"agent": rng.choice(names), "probe": ECHO_PROBE, "params": {"text": "x"}}
            try:
                samples.append((await timed_call(client, "probe", arguments))[0])
            except ToolFailed as exc:
                errors.add(str(exc))
            await trio.sleep(0.05)
    return samples, errors


async def time_capabilities(hub: RunningHub) -> list[tuple[float, float]]:
    """`list_capabilities` twice with the whole fleet connected (it looks at every agent): each
    call's milliseconds, and the hub's CPU milliseconds meanwhile (the rest is the MCP client's).
    The hub's first call also imports the packs' runbook modules, once in its life."""
    meter = hub.meter()
    timed = []
    async with open_mcp(hub.url, hub.admin_key) as client:
        for _ in range(2):
            cpu_s = meter.cpu_s()
            wall_ms = (await timed_call(client, "list_capabilities", {}))[0]
            timed.append((wall_ms, (meter.cpu_s() - cpu_s) * 1000))
    return timed
