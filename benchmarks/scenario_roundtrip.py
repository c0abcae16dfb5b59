"""Scenario 1: sequential `probe` calls through MCP, against two floors.

One MCP client calls ``probe(agent, "bench.noop.echo")`` N times in a row on
one simulated agent. Then, with the hub stopped, the same client shape calls
a trivial MCP tool (the SDK's own cost, `benchmarks.floors`; answered as one
JSON body as the hub answers these calls, and for reference over SSE) and a
raw WebSocket client echoes a probe-request-sized frame (the transport's cost).

Hub overhead (p50) = probe p50 - MCP floor p50 - WebSocket floor p50 - agent
probe p50: what the hub and the agent's link add on top of the two
transports a probe must cross. CPU per call is each process's CPU time over
the timed calls divided by their number.
"""

from __future__ import annotations

import time
from typing import Any

import trio_websocket

from benchmarks.common import WARMUP_CALLS, Bench, ScenarioResult, SelfMeter
from benchmarks.fleet import SimulatedFleet, ensure_enrolled, running_agents
from benchmarks.fleet_worker import agent_name
from benchmarks.floors import NOOP_TOOL, WS_PATH
from benchmarks.hub import HubData, running_hub, wait_online
from benchmarks.mcp_calls import mcp_client, timed_call
from benchmarks.pack import ECHO_PROBE
from benchmarks.procs import CpuWindow, open_child, python_module
from benchmarks.stats import distribution, median_of, scalar
from sonde.protocol.codec import FrameCodec
from sonde.protocol.messages import ProbeRequest, ProbeRequestPayload
from sonde.protocol.signing import new_private_key

TITLE = "1. Probe round trip through MCP (sequential)"
FLOOR_START_TIMEOUT_S = 30.0


async def run(bench: Bench) -> ScenarioResult:
    result = ScenarioResult("roundtrip", TITLE)
    n = bench.sizes.round_trips
    result.params = {
        "round_trips": n,
        "floor_round_trips": bench.sizes.floor_round_trips,
        "warmup": WARMUP_CALLS,
    }
    probe = await measure_probes(bench, result, n)
    mcp_floor = await measure_mcp_floor(bench, result, bench.sizes.floor_round_trips, "mcp")
    mcp_sse_floor = await measure_mcp_floor(bench, result, bench.sizes.floor_round_trips, "mcp-sse")
    ws_floor = await measure_ws_floor(bench, result, bench.sizes.floor_round_trips)
    figures = result.figures
    figures["probe_rtt_ms"] = distribution(probe["rtt"], "ms")
    figures["agent_probe_duration_ms"] = distribution(probe["agent"], "ms")
    figures["mcp_floor_rtt_ms"] = distribution(mcp_floor, "ms")
    figures["mcp_sse_floor_rtt_ms"] = distribution(mcp_sse_floor, "ms")
    figures["ws_floor_rtt_ms"] = distribution(ws_floor, "ms")
    p50 = {key: median_of(figures[key]) or 0.0 for key in figures}
    floors = p50["mcp_floor_rtt_ms"] + p50["ws_floor_rtt_ms"]
    overhead = p50["probe_rtt_ms"] - floors - p50["agent_probe_duration_ms"]
    figures["hub_overhead_p50_ms"] = scalar(overhead, "ms")
    figures["probe_over_mcp_floor_p50"] = scalar(ratio(p50["probe_rtt_ms"], p50["mcp_floor_rtt_ms"]), "x")
    figures["probe_over_ws_floor_p50"] = scalar(ratio(p50["probe_rtt_ms"], p50["ws_floor_rtt_ms"]), "x")
    figures["probe_over_floors_sum_p50"] = scalar(ratio(p50["probe_rtt_ms"], floors), "x")
    figures["overhead_over_floors_sum_p50"] = scalar(ratio(overhead, floors), "x")
    return result


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


async def measure_probes(bench: Bench, result: ScenarioResult, n: int) -> dict[str, list[float]]:
    workspace = bench.workspace
    data = HubData(workspace.directory("roundtrip/hub"))
    fleet = SimulatedFleet(workspace.directory("roundtrip/agents"))
    rtt: list[float] = []
    agent: list[float] = []
    async with running_hub(workspace, data, name="roundtrip-hub") as hub:
        result.figures["hub_cold_start_s"] = scalar(hub.start_s, "s")
        await ensure_enrolled(workspace, hub, fleet, 1)
        async with running_agents(workspace, hub, fleet, 1) as agents:
            await wait_online(hub, 1, 30.0, 0.05)
            arguments = {"agent": agent_name(0), "probe": ECHO_PROBE, "params": {"text": "x"}}
            async with mcp_client(hub.url, hub.admin_key) as client:
                for _ in range(WARMUP_CALLS):
                    await timed_call(client, "probe", arguments)
                windows = [CpuWindow(hub.meter()), CpuWindow(agents.workers[0].meter())]
                me, me0 = SelfMeter(), SelfMeter().cpu_s()
                for _ in range(n):
                    ms, output = await timed_call(client, "probe", arguments)
                    rtt.append(ms)
                    agent.append(output["duration_ms"])
                cpu = [window.cpu_s() for window in windows] + [me.cpu_s() - me0]
    for key, cpu_s in zip(("hub", "agent", "client"), cpu, strict=True):
        result.figures[f"{key}_cpu_per_probe_ms"] = scalar(cpu_s * 1000 / n, "ms")
    bench.say(f"probe p50 {sorted(rtt)[len(rtt) // 2]:.2f} ms over {n} calls")
    return {"rtt": rtt, "agent": agent}


async def measure_mcp_floor(bench: Bench, result: ScenarioResult, n: int, kind: str) -> list[float]:
    """The trivial tool answered as JSON (``mcp``, as the hub answers a probe) or over SSE (``mcp-sse``)."""
    samples: list[float] = []
    argv = python_module("benchmarks.floors", kind)
    env = bench.workspace.env("floors")
    async with open_child(f"floor-{kind}", argv, env=env, log_dir=bench.workspace.log_dir) as server:
        url = await server.read_line(FLOOR_START_TIMEOUT_S)
        arguments = {"agent": agent_name(0), "probe": ECHO_PROBE, "params": {"text": "x"}}
        async with mcp_client(url) as client:
            for _ in range(WARMUP_CALLS):
                await timed_call(client, NOOP_TOOL, arguments)
            window = CpuWindow(server.meter())
            for _ in range(n):
                samples.append((await timed_call(client, NOOP_TOOL, arguments))[0])
            name = kind.replace("-", "_")
            result.figures[f"{name}_floor_server_cpu_per_call_ms"] = scalar(window.cpu_s() * 1000 / n, "ms")
    return samples


def probe_request_frame() -> str:
    """A real signed ``probe.request`` frame: the size a probe puts on the agent's socket."""
    codec = FrameCodec(signing_key=new_private_key())
    payload = ProbeRequestPayload(request_id="0" * 32, probe=ECHO_PROBE, params={"text": "x"}, timeout_s=30.0)
    return codec.encode(ProbeRequest(payload=payload))


async def measure_ws_floor(bench: Bench, result: ScenarioResult, n: int) -> list[float]:
    samples: list[float] = []
    frame = probe_request_frame()
    argv = python_module("benchmarks.floors", "ws")
    env = bench.workspace.env("floors")
    async with open_child("floor-ws", argv, env=env, log_dir=bench.workspace.log_dir) as server:
        base = await server.read_line(FLOOR_START_TIMEOUT_S)
        url = base.replace("http://", "ws://") + WS_PATH
        async with trio_websocket.open_websocket_url(url) as ws:
            for _ in range(WARMUP_CALLS):
                await echo(ws, frame)
            window = CpuWindow(server.meter())
            for _ in range(n):
                samples.append(await echo(ws, frame))
            result.figures["ws_floor_server_cpu_per_echo_ms"] = scalar(window.cpu_s() * 1000 / n, "ms")
    result.params["ws_frame_bytes"] = len(frame)
    return samples


async def echo(ws: trio_websocket.WebSocketConnection, frame: str) -> float:
    started = time.perf_counter()
    await ws.send_message(frame)
    answer: Any = await ws.get_message()
    if answer != frame:
        raise RuntimeError("the echo server answered something else")
    return (time.perf_counter() - started) * 1000
