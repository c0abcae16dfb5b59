"""The run's output: one JSON file and one text table, side by side, plus the targets check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.stats import Figure

# (scenario, figure, statistic, comparison, target, label) from the targets table
TARGETS: tuple[tuple[str, str, str, str, float, str], ...] = (
    ("roundtrip", "probe_rtt_ms", "median", "<=", 5.0, "probe round trip p50 <= 5 ms"),
    ("roundtrip", "probe_rtt_ms", "p99", "<=", 15.0, "probe round trip p99 <= 15 ms"),
    ("roundtrip", "hub_overhead_p50_ms", "value", "<=", 1.5, "hub overhead above the floors p50 <= 1.5 ms"),
    ("concurrent", "probes_per_s", "value", ">=", 400.0, "concurrent probes >= 400/s"),
    ("concurrent", "latency_ms", "p99", "<=", 250.0, "concurrent probes p99 <= 250 ms"),
    ("concurrent", "errors", "value", "<=", 0.0, "concurrent probes: 0 errors"),
    ("fanout", "complete_s", "median", "<=", 2.0, "health_check complete <= 2 s"),
    ("fanout", "partial_answered", "value", ">=", 1.0, "partial answer when agents hang"),
    ("scale", "hub_rss_per_agent_kib", "value", "<=", 100.0, "hub RSS per agent <= 100 KiB"),
    ("scale", "hub_idle_cpu_percent", "value", "<=", 10.0, "hub idle CPU <= 10 % of a core"),
    ("scale", "all_online", "value", ">=", 1.0, "all agents held online"),
    ("local", "serve_start_to_ready_s", "median", "<=", 0.4, "serve --json start to ready <= 0.4 s"),
    ("local", "serve_memory_usage_call_ms", "median", "<=", 5.0, "system.memory.usage call <= 5 ms"),
    # the figure is in MiB; the 40 MB is 40,000,000 bytes
    (
        "local",
        "agent_idle_rss_mib",
        "median",
        "<=",
        round(40e6 / 2**20, 2),
        "agent idle RSS <= 40 MB (38.15 MiB)",
    ),
)


def measured_at(scenario: str, params: dict[str, Any]) -> str:
    """The size a scenario's figures were measured at, in words, for the targets table."""
    if not params:
        return ""
    if scenario == "roundtrip":
        return f"{params['round_trips']} calls"
    if scenario == "concurrent":
        return f"{params['clients']} clients x {params['agents']} agents, {params['seconds']:g} s"
    if scenario == "fanout":
        return f"{params['agents']} agents"
    if scenario == "scale":
        return f"{max(params['agents'])} agents, heartbeat {params['heartbeat_interval_s']:g} s"
    return ""


def check_targets(scenarios: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target with the measured value and whether it was met (None when not measured)."""
    checks = []
    for scenario, figure_name, statistic, comparison, target, label in TARGETS:
        figures = scenarios.get(scenario, {}).get("figures", {})
        params = scenarios.get(scenario, {}).get("params", {})
        figure = largest_size(figures, figure_name)
        measured = None if figure is None else figure.get(statistic)
        met = None
        if isinstance(measured, int | float):
            met = measured <= target if comparison == "<=" else measured >= target
        checks.append(
            {
                "scenario": scenario,
                "figure": figure_name,
                "statistic": statistic,
                "target": f"{comparison} {target:g}",
                "label": label,
                "measured": measured,
                "met": met,
                "at": measured_at(scenario, params),
            }
        )
    return checks


def largest_size(figures: dict[str, Figure], name: str) -> Figure | None:
    """``name``, or for per-size figures (``name@1000``) the one at the largest size."""
    if name in figures:
        return figures[name]
    sized = [(int(key.split("@", 1)[1]), fig) for key, fig in figures.items() if key.startswith(name + "@")]
    return max(sized, key=lambda pair: pair[0])[1] if sized else None


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def figure_rows(figures: dict[str, Figure]) -> list[str]:
    rows = []
    for name, fig in figures.items():
        if fig["kind"] == "distribution":
            stats = (fig["n"], fig["min"], fig["median"], fig["p99"], fig["max"])
            cells = "".join(f"{number(v):>10}" for v in stats)
            rows.append(f"    {name:42}{cells}  {fig['unit']}")
        else:
            rows.append(f"    {name:42}{'':30}{number(fig['value']):>10}{'':20}  {fig['unit']}")
    return rows


def render_table(run: dict[str, Any]) -> str:
    """The run as a plain-text table (what `make bench` prints at the end)."""
    machine = run["machine"]
    lines = [
        f"Sonde benchmarks, {run['set']} set, {run['date']} ({run['duration_s']:.0f} s)",
        f"machine: {machine['cpu_model']}, {machine['logical_cores']} cores, {machine['ram_gib']} GiB RAM, "
        f"kernel {machine['kernel']}, Python {machine['python']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items() if v),
        f"open files (RLIMIT_NOFILE): soft {run['open_files']['before_soft']} -> {run['open_files']['soft']}"
        f" (hard {run['open_files']['hard']}), raised by the harness and inherited by its children",
        "",
    ]
    header = f"    {'figure':42}{'n':>10}{'min':>10}{'median':>10}{'p99':>10}{'max':>10}  unit"
    for name, scenario in run["scenarios"].items():
        background = scenario.get("other_processes_cpu_percent")
        noise = f", other processes' CPU {background:.0f} % of a core" if background is not None else ""
        lines.append(
            f"{scenario['title']} [{name}: {scenario['status']}, {scenario['seconds']:.1f} s{noise}]"
        )
        lines.append("    params: " + ", ".join(f"{k}={v}" for k, v in scenario["params"].items()))
        if scenario["figures"]:
            lines.append(header)
            lines.extend(figure_rows(scenario["figures"]))
        lines.extend(f"    note: {note}" for note in scenario["notes"])
        lines.append("")
    lines.append(
        "Targets (issue 8) at this set's sizes; 'at' names them (the largest where there are several)"
    )
    for check in run["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[check["met"]]
        at = f"  ({check['at']})" if check["at"] else ""
        lines.append(f"    {check['label']:46} {number(check['measured']):>10}  {verdict:12}{at}")
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path, run: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``<set>-<date>.json`` and ``.txt`` into ``out_dir``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{run['set']}-{run['date'].replace(':', '').replace('-', '')}"
    json_path, table_path = out_dir / f"{stem}.json", out_dir / f"{stem}.txt"
    json_path.write_text(json.dumps(run, indent=2) + "\n")
    table_path.write_text(render_table(run))
    return json_path, table_path
