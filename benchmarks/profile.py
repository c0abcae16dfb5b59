"""``python -m benchmarks.profile``: where the hub spends a probe round trip (py-spy).

Starts a hub and one simulated agent as the round-trip scenario does, attaches
``py-spy record`` to the hub (and, with ``--agent``, to the agent worker), runs
``--calls`` sequential ``probe`` calls (or ``--concurrency`` clients at once, or
``--fanout`` health checks, or holds an ``--idle`` fleet for ``--seconds``) and
prints the functions with the most samples, by own time and including callees.
The raw collapsed stacks are kept in ``--out`` for a flame graph
(``py-spy``'s raw format; speedscope and inferno read it).

py-spy comes from the ``bench`` extra (``pip install -e '.[bench]'``); it needs
ptrace rights on the hub (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import trio

from benchmarks.common import WARMUP_CALLS
from benchmarks.fleet import SimulatedFleet, ensure_enrolled, running_agents
from benchmarks.fleet_worker import agent_name
from benchmarks.hub import HubData, Workspace, running_hub, wait_online
from benchmarks.mcp_calls import mcp_client, timed_call
from benchmarks.pack import CATEGORY, ECHO_PROBE
from benchmarks.scenario_fanout import AGENTS_PER_WORKER

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PY_SPY_RATE_HZ = 500
TOP = 25


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="probe calls per client (default 1000)")
    parser.add_argument("--concurrency", type=int, default=1, help="MCP clients calling at once (default 1)")
    parser.add_argument("--agent", action="store_true", help="profile the agent worker as well")
    parser.add_argument(
        "--fanout",
        type=int,
        default=0,
        metavar="AGENTS",
        help="instead: --calls health_check calls across this many agents (the bench category)",
    )
    parser.add_argument(
        "--idle",
        type=int,
        default=0,
        metavar="AGENTS",
        help="instead: hold this many agents for --seconds with nothing but heartbeats (and keepalive pings)",
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="how long --idle profiles (default 20)")
    parser.add_argument(
        "--heartbeat", type=float, default=30.0, help="the hub's heartbeat interval, seconds (default 30)"
    )
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help="run the hub (and with --agent the first agent worker) under cProfile instead of py-spy",
    )
    parser.add_argument(
        "--describe-installed",
        action="store_true",
        help="the simulated agents describe the installed packs a real agent here offers, as real agents do (scenario 4)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where the collapsed stacks go")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not args.cprofile and not Path(py_spy).exists():  # --cprofile needs no py-spy
        print("py-spy is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    outputs = trio.run(profile, args, py_spy)
    for name, path in outputs.items():
        print(f"\n== {name}: {path}")
        print(summarize_cprofile(path) if path.suffix == ".pstats" else summarize(path))
    return 0


def cprofile_options(path: Path) -> list[str]:
    return ["-m", "cProfile", "-o", str(path)]


def load(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    """The tool call each client repeats: a cheap probe, or a health_check across the fleet."""
    if args.fanout:
        return "health_check", {"tags": [], "categories": [CATEGORY]}
    return "probe", {"agent": agent_name(0), "probe": ECHO_PROBE, "params": {"text": "x"}}


async def profile(args: argparse.Namespace, py_spy: str) -> dict[str, Path]:
    """Run the load with the profilers attached; returns where each profile was written."""
    hub_stats, agent_stats = args.out / "profile-hub.pstats", args.out / "profile-agent.pstats"
    cprofile_agent = args.cprofile and args.agent
    agent_count = max(1, args.fanout, args.idle)
    tool, arguments = load(args)
    workspace = Workspace.create()
    try:
        data = HubData(workspace.directory("profile/hub"))
        fleet = SimulatedFleet(
            workspace.directory("profile/agents"), describe_installed=args.describe_installed
        )
        hub_options = cprofile_options(hub_stats) if args.cprofile else []
        async with running_hub(
            workspace,
            data,
            name="profile-hub",
            heartbeat_interval_s=args.heartbeat,
            python_options=hub_options,
        ) as hub:
            await ensure_enrolled(workspace, hub, fleet, agent_count)
            async with running_agents(
                workspace,
                hub,
                fleet,
                agent_count,
                workers=max(1, agent_count // AGENTS_PER_WORKER),
                python_options=lambda w: cprofile_options(agent_stats) if cprofile_agent and w == 0 else [],
            ) as agents:
                await wait_online(hub, agent_count, 120.0, 0.1)
                pids = {} if args.cprofile else {"hub": hub.child.pid}
                if args.agent and not args.cprofile:
                    pids["agent"] = agents.workers[0].pid
                outputs = {name: args.out / f"profile-{name}.txt" for name in pids}
                recorders = [start_py_spy(py_spy, pid, outputs[name]) for name, pid in pids.items()]
                try:
                    await trio.sleep(1.0)  # let py-spy attach
                    if args.idle:
                        await trio.sleep(args.seconds)
                    else:
                        async with trio.open_nursery() as nursery:
                            for _ in range(args.concurrency):
                                nursery.start_soon(drive, hub.url, hub.admin_key, tool, arguments, args.calls)
                finally:
                    for recorder in recorders:
                        recorder.send_signal(signal.SIGINT)  # py-spy writes its file and exits
                        await trio.to_thread.run_sync(recorder.wait, 30)
    finally:
        workspace.remove()
    if args.cprofile:  # written when the processes exited
        outputs["hub"] = hub_stats
    if cprofile_agent:
        outputs["agent"] = agent_stats
    return outputs


def start_py_spy(py_spy: str, pid: int, out: Path) -> subprocess.Popen[bytes]:
    argv = [py_spy, "record", "--pid", str(pid), "--rate", str(PY_SPY_RATE_HZ), "--format", "raw", "--gil"]
    return subprocess.Popen([*argv, "--output", str(out), "--nonblocking"], stdout=subprocess.DEVNULL)


async def drive(url: str, key: str, tool: str, arguments: dict[str, object], calls: int) -> None:
    async with mcp_client(url, key) as client:
        for _ in range(min(WARMUP_CALLS, calls)):
            await timed_call(client, tool, arguments)
        for _ in range(calls):
            ms, _output = await timed_call(client, tool, arguments)
            if tool != "probe":
                print(f"{tool}: {ms:.0f} ms")


def summarize_cprofile(path: Path, top: int = TOP) -> str:
    """The functions with the most own time, and the most time including callees."""
    import io
    import pstats

    lines = io.StringIO()
    stats = pstats.Stats(str(path), stream=lines)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumtime").print_stats(top)
    return lines.getvalue()


def summarize(path: Path, top: int = TOP) -> str:
    """The functions with the most samples in a collapsed-stack file: own and inclusive."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [
            frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].split(":")[0] for frame in stack.split(";")
        ]
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{total} samples"]
    for title, counter in (("own time", own), ("including callees", inclusive)):
        lines.append(f"-- {title}")
        lines += [f"{100 * n / max(total, 1):6.1f}%  {frame}" for frame, n in counter.most_common(top)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
