"""``python -m benchmarks.markdown RESULT.json [...]``: the README's results table, from result files.

One column per file (e.g. the latest quick and full runs), one row per
headline figure, then the targets with the verdict of each run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.report import largest_size, number

# (scenario, figure, statistic or "p50/p99", label)
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("roundtrip", "probe_rtt_ms", "p50/p99", "1. probe round trip via MCP, ms"),
    ("roundtrip", "mcp_floor_rtt_ms", "p50/p99", "1. floor: trivial MCP tool (JSON answer), ms"),
    ("roundtrip", "mcp_sse_floor_rtt_ms", "p50/p99", "1. the same tool answered over SSE, ms"),
    ("roundtrip", "ws_floor_rtt_ms", "p50/p99", "1. floor: WebSocket echo, ms"),
    ("roundtrip", "agent_probe_duration_ms", "median", "1. agent-side probe duration p50, ms"),
    ("roundtrip", "hub_overhead_p50_ms", "value", "1. hub overhead above the floors p50, ms"),
    ("roundtrip", "hub_cpu_per_probe_ms", "value", "1. hub CPU per probe, ms"),
    ("roundtrip", "mcp_floor_server_cpu_per_call_ms", "value", "1. MCP floor server CPU per call, ms"),
    ("roundtrip", "client_cpu_per_probe_ms", "value", "1. MCP client CPU per call, ms"),
    ("concurrent", "probes_per_s", "value", "2. concurrent probes per s"),
    ("concurrent", "mcp_floor_calls_per_s", "value", "2. same clients on the MCP floor, calls/s"),
    ("concurrent", "latency_ms", "p50/p99", "2. concurrent latency, ms"),
    ("concurrent", "errors", "value", "2. errors"),
    ("concurrent", "hub_cpu_percent", "value", "2. hub CPU, % of a core"),
    ("concurrent", "hub_rss_mib", "max", "2. hub RSS max, MiB"),
    ("fanout", "complete_s", "median", "3. health_check complete, s"),
    ("fanout", "partial_s", "value", "3. partial answer (1 in 100 hanging), s"),
    ("scale", "time_to_all_online_s", "value", "4. time to all online, s"),
    ("scale", "hub_rss_per_agent_kib", "value", "4. hub RSS per agent, KiB"),
    ("scale", "hub_rss_held_per_agent_kib", "value", "4. hub RSS per agent at the hold's end, KiB"),
    ("scale", "hub_idle_cpu_percent", "value", "4. hub idle CPU, % of a core"),
    ("scale", "hub_cpu_per_heartbeat_ms", "value", "4. hub CPU per heartbeat, ms"),
    ("scale", "idle_cpu_extrapolated_10k_30s_percent", "value", "4. idle CPU at 10k agents / 30 s, %"),
    ("scale", "last_seen_staleness_s", "p50/p99", "4. last_seen staleness, s"),
    ("scale", "probe_rtt_under_load_ms", "p50/p99", "4. probe round trip with the fleet held, ms"),
    ("scale", "list_capabilities_first_ms", "value", "4. hub's first list_capabilities, ms"),
    ("scale", "list_capabilities_ms", "value", "4. list_capabilities after that, ms"),
    ("scale", "list_capabilities_hub_cpu_ms", "value", "4. list_capabilities after that, hub CPU, ms"),
    ("scale", "hub_stop_s", "value", "4. hub SIGTERM to exit with the fleet connected, s"),
    ("scale", "hub_stop_cpu_s", "value", "4. hub CPU from SIGTERM to exit, s"),
    ("local", "serve_start_to_ready_s", "median", "5. serve --json start to ready, s"),
    ("local", "serve_memory_usage_call_ms", "median", "5. serve system.memory.usage call, ms"),
    ("local", "bridge_start_to_first_answer_s", "value", "5. mcp-bridge start to first answer, s"),
    ("local", "agent_idle_rss_mib", "median", "5. agent idle RSS, MiB"),
    ("local", "agent_busy_rss_mib", "max", "5. agent RSS at 50 probes/s, MiB"),
)


def cell(run: dict[str, Any], scenario: str, figure_name: str, statistic: str) -> str:
    figures = run["scenarios"].get(scenario, {}).get("figures", {})
    figure = figures.get(figure_name) if "@" in figure_name else largest_size(figures, figure_name)
    if figure is None:
        return "-"
    if statistic == "p50/p99":
        return f"{number(figure.get('median'))} / {number(figure.get('p99'))}"
    return number(figure.get(statistic))


def sizes_of(runs: list[dict[str, Any]], scenario: str, figure_name: str) -> list[int]:
    found = {
        int(key.split("@", 1)[1])
        for run in runs
        for key in run["scenarios"].get(scenario, {}).get("figures", {})
        if key.startswith(figure_name + "@")
    }
    return sorted(found)


def expand_sizes(
    rows: tuple[tuple[str, str, str, str], ...], runs: list[dict[str, Any]]
) -> list[tuple[str, str, str, str]]:
    """Per-size figures (``name@1000``) become one row per size found in any run."""
    expanded = []
    for scenario, figure_name, statistic, label in rows:
        sizes = sizes_of(runs, scenario, figure_name)
        if not sizes:
            expanded.append((scenario, figure_name, statistic, label))
        for size in sizes:
            expanded.append((scenario, f"{figure_name}@{size}", statistic, f"{label} ({size:,} agents)"))
    return expanded


def column_title(run: dict[str, Any]) -> str:
    others = [s.get("other_processes_cpu_percent") or 0 for s in run["scenarios"].values()]
    return f"{run['set']} {run['date'][:10]} (others {max(others):.0f} %)"


def render(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| figure | " + " | ".join(column_title(run) for run in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for scenario, figure_name, statistic, label in expand_sizes(ROWS, runs):
        cells = [cell(run, scenario, figure_name, statistic) for run in runs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| target | " + " | ".join(run["set"] for run in runs) + " |", "|---|" + "---|" * len(runs)]
    for i, check in enumerate(runs[0]["targets"]):
        cells = []
        for run in runs:
            mine = run["targets"][i]
            verdict = {True: "met", False: "**missed**", None: "-"}[mine["met"]]
            cells.append(f"{number(mine['measured'])} {verdict}" + (f" ({mine['at']})" if mine["at"] else ""))
        lines.append(f"| {check['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read_run(path: str) -> dict[str, Any]:
    """One result file's run; `argparse.ArgumentTypeError` (one line) when it cannot be read."""
    try:
        run = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(
            f"no such file: {path} (no results yet? `python -m benchmarks` makes them)"
        ) from None
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path} is not JSON: {exc}") from None
    if not isinstance(run, dict) or not {"set", "date", "scenarios", "targets"} <= run.keys():
        raise argparse.ArgumentTypeError(f"{path} is not a benchmark result file")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.markdown",
        description="Print the README's results table from benchmark result files, one column per file.",
    )
    parser.add_argument(
        "results",
        nargs="+",
        type=read_run,
        metavar="RESULT.json",
        help="e.g. benchmarks/results/quick-*.json",
    )
    print(render(parser.parse_args(argv).results), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
