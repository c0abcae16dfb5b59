"""Scenario 5: the local paths, each through the real command.

- ``sonde serve --json``: spawn to ready line (repeated), then ``tools/list``
  and ``tools/call system.memory.usage`` (line written -> answer line read).
- ``sonde mcp-bridge`` (if this build has it): spawn to the answer of the
  first JSON-RPC request (``initialize``), then ``tools/list`` through it.
- The real agent (``sonde enroll`` then ``sonde start``, every pack it
  detects here): RSS while idle, then RSS and CPU while an MCP client asks
  it for 50 ``system.memory.usage`` probes per second through a hub.
"""

from __future__ import annotations

import json
import time
from typing import Any

import trio

from benchmarks.common import Bench, ScenarioResult
from benchmarks.fleet import make_tokens
from benchmarks.hub import HubData, RunningHub, running_hub, wait_online
from benchmarks.mcp_calls import ErrorLog, ToolFailed, mcp_client, timed_call
from benchmarks.procs import Child, CpuWindow, open_child, python_module, sample_rss
from benchmarks.stats import distribution, scalar

TITLE = "5. Local paths"
MEMORY_PROBE = "system.memory.usage"
LINE_TIMEOUT_S = 30.0
AGENT_NAME = "local-agent"
LOAD_RATE_PER_S = 50
IDLE_SAMPLE_S = 2.0
MAX_IN_FLIGHT = 25


async def run(bench: Bench) -> ScenarioResult:
    result = ScenarioResult("local", TITLE)
    result.params = {
        "serve_starts": bench.sizes.serve_starts,
        "serve_calls": bench.sizes.serve_calls,
        "agent_load_s": bench.sizes.agent_load_s,
        "agent_load_rate_per_s": LOAD_RATE_PER_S,
    }
    await measure_serve(bench, result)
    data = HubData(bench.workspace.directory("local/hub"))
    async with running_hub(bench.workspace, data, name="local-hub") as hub:
        await measure_bridge(bench, result, hub)
        await measure_agent(bench, result, hub)
    return result


# --- sonde serve --json -----------------------------------------------------------


async def request(child: Child, line: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Write one request line, read one answer line: (milliseconds, answer)."""
    started = time.perf_counter()
    await child.send_line(json.dumps(line))
    answer = json.loads(await child.read_line(LINE_TIMEOUT_S))
    return (time.perf_counter() - started) * 1000, answer


async def measure_serve(bench: Bench, result: ScenarioResult) -> None:
    workspace = bench.workspace
    starts: list[float] = []
    lists: list[float] = []
    calls: list[float] = []
    argv = python_module("sonde", "serve", "--json")
    cwd = workspace.directory("serve")  # no sondage.manifest.json here: every detected pack
    for i in range(bench.sizes.serve_starts):
        started = time.perf_counter()
        async with open_child(f"serve-{i}", argv, env=workspace.env("serve"), cwd=cwd) as child:
            ready = json.loads(await child.read_line(LINE_TIMEOUT_S))
            starts.append(time.perf_counter() - started)
            if ready.get("status") != "ready":
                raise RuntimeError(f"sonde serve --json did not start: {ready}")
            ms, listed = await request(child, {"id": 1, "method": "tools/list"})
            lists.append(ms)
            tool_count = len(listed["result"]["tools"])
            call = {"id": 2, "method": "tools/call", "params": {"name": MEMORY_PROBE, "input": {}}}
            for _ in range(bench.sizes.serve_calls):
                ms, answer = await request(child, call)
                if not answer.get("ok"):
                    raise RuntimeError(f"{MEMORY_PROBE} failed under sonde serve: {answer}")
                calls.append(ms)
            await child.close_stdin()
            with trio.move_on_after(LINE_TIMEOUT_S):
                await child.process.wait()
    result.params["serve_tools"] = tool_count
    result.figures["serve_start_to_ready_s"] = distribution(starts, "s")
    result.figures["serve_tools_list_ms"] = distribution(lists, "ms")
    result.figures["serve_memory_usage_call_ms"] = distribution(calls, "ms")
    bench.say(f"serve --json ready in {sorted(starts)[len(starts) // 2]:.2f} s (median)")


# --- sonde mcp-bridge ---------------------------------------------------------------


async def bridge_exists(bench: Bench) -> bool:
    done = await trio.run_process(
        python_module("sonde", "mcp-bridge", "--help"),
        env=bench.workspace.env("bridge"),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode == 0


async def measure_bridge(bench: Bench, result: ScenarioResult, hub: RunningHub) -> None:
    if not await bridge_exists(bench):
        result.notes.append("skipped mcp-bridge: this build has no `sonde mcp-bridge` command")
        return
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "sonde-bench", "version": "1"},
        },
    }
    argv = python_module("sonde", "mcp-bridge", "--hub", hub.url)
    started = time.perf_counter()
    env = {**bench.workspace.env("bridge"), "SONDE_API_KEY": hub.admin_key}  # never on a command line
    async with open_child("bridge", argv, env=env, log_dir=bench.workspace.log_dir) as child:
        await child.send_line(json.dumps(initialize))
        answer = json.loads(await child.read_line(LINE_TIMEOUT_S))
        first_answer_s = time.perf_counter() - started
        if "result" not in answer:
            raise RuntimeError(f"mcp-bridge answered initialize with {answer}")
        await child.send_line(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        lists = []
        for i in range(3):
            ms, listed = await request(child, {"jsonrpc": "2.0", "id": 10 + i, "method": "tools/list"})
            if "result" not in listed:
                raise RuntimeError(f"mcp-bridge answered tools/list with {listed}")
            lists.append(ms)
        await child.close_stdin()
        with trio.move_on_after(LINE_TIMEOUT_S):
            await child.process.wait()
    result.figures["bridge_start_to_first_answer_s"] = scalar(first_answer_s, "s")
    result.figures["bridge_tools_list_ms"] = distribution(lists, "ms")
    bench.say(f"mcp-bridge first answer after {first_answer_s:.2f} s")


# --- the real agent ---------------------------------------------------------------


async def enroll_real_agent(bench: Bench, hub: RunningHub) -> dict[str, str]:
    """`sonde enroll` with a token made on the hub's file; returns the agent's environment."""
    token = (await trio.to_thread.run_sync(make_tokens, hub.data.data_dir / "sonde.db", 1))[0]
    env = bench.workspace.env(AGENT_NAME)
    argv = python_module("sonde", "enroll", "--hub", hub.url, "--name", AGENT_NAME)
    done = await trio.run_process(
        argv, env={**env, "SONDE_ENROLL_TOKEN": token}, capture_stdout=True, capture_stderr=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"sonde enroll failed: {done.stderr.decode(errors='replace')[-500:]}")
    return env


async def measure_agent(bench: Bench, result: ScenarioResult, hub: RunningHub) -> None:
    env = await enroll_real_agent(bench, hub)
    argv = python_module("sonde", "start", "--allow-root")
    async with open_child(AGENT_NAME, argv, env=env, log_dir=bench.workspace.log_dir) as agent:
        await wait_online(hub, 1, 60.0, 0.1)
        meter = agent.meter()
        idle: list[float] = []
        with trio.move_on_after(IDLE_SAMPLE_S):
            await sample_rss(meter, idle, 0.25)
        busy: list[float] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_rss, meter, busy, 0.25)
            cpu = CpuWindow(meter)
            latencies, errors, rate = await probe_load(hub, bench.sizes.agent_load_s)
            result.figures["agent_busy_cpu_percent"] = scalar(cpu.percent(), "% of one core")
            nursery.cancel_scope.cancel()
    result.figures["agent_idle_rss_mib"] = distribution(idle, "MiB")
    result.figures["agent_busy_rss_mib"] = distribution(busy, "MiB")
    result.figures["agent_load_probes_per_s"] = scalar(rate, "1/s")
    result.figures["agent_load_latency_ms"] = distribution(latencies, "ms")
    result.figures["agent_load_errors"] = scalar(errors.count, "count")
    if errors.count:
        result.notes.append(f"{errors.count} probe errors under load; first: {' | '.join(errors.first)}")
    bench.say(f"agent RSS idle {max(idle):.1f} MiB, busy {max(busy):.1f} MiB at {rate:.0f} probes/s")


async def probe_load(hub: RunningHub, seconds: float) -> tuple[list[float], ErrorLog, float]:
    """`LOAD_RATE_PER_S` probes per second on the real agent, paced, a bounded number in flight."""
    latencies: list[float] = []
    errors = ErrorLog()
    arguments = {"agent": AGENT_NAME, "probe": MEMORY_PROBE, "params": {}}
    limiter = trio.CapacityLimiter(MAX_IN_FLIGHT)

    async def one(client: Any) -> None:
        async with limiter:
            try:
                latencies.append((await timed_call(client, "probe", arguments))[0])
            except ToolFailed as exc:
                errors.add(str(exc))

    async with mcp_client(hub.url, hub.admin_key) as client:
        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for k in range(int(seconds * LOAD_RATE_PER_S)):
                await trio.sleep_until(started + k / LOAD_RATE_PER_S)
                nursery.start_soon(one, client)
        elapsed = trio.current_time() - started
    return latencies, errors, len(latencies) / elapsed
