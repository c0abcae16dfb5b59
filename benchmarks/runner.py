"""Run the scenarios of one set in order, each under its deadline, and write the results."""

from __future__ import annotations

import compileall
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import trio

from benchmarks import (
    scenario_concurrent,
    scenario_fanout,
    scenario_local,
    scenario_roundtrip,
    scenario_scale,
)
from benchmarks.common import Bench, ScenarioResult
from benchmarks.hub import Workspace
from benchmarks.machine import describe_machine, now_iso, package_versions, raise_open_file_limit
from benchmarks.procs import REPO
from benchmarks.report import check_targets, render_table, write_results
from benchmarks.sizes import Sizes

Scenario = Callable[[Bench], Awaitable[ScenarioResult]]
SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "roundtrip": (scenario_roundtrip.TITLE, scenario_roundtrip.run),
    "concurrent": (scenario_concurrent.TITLE, scenario_concurrent.run),
    "fanout": (scenario_fanout.TITLE, scenario_fanout.run),
    "scale": (scenario_scale.TITLE, scenario_scale.run),
    "local": (scenario_local.TITLE, scenario_local.run),
}


class ForeignCpu:
    """CPU used on this machine by processes other than the harness and its children.

    The machine's busy CPU time minus our own (the harness, plus its children
    once reaped, which every scenario does before it returns), as percent of
    one core over the window: 0 on a quiet machine, up to 100 x cores.
    """

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.machine0, self.ours0 = self.machine_busy_s(), self.ours_s()

    @staticmethod
    def machine_busy_s() -> float:
        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0)

    @staticmethod
    def ours_s() -> float:
        times = psutil.Process().cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    def percent(self) -> float:
        elapsed = time.perf_counter() - self.t0
        foreign = (self.machine_busy_s() - self.machine0) - (self.ours_s() - self.ours0)
        return max(0.0, 100 * foreign / elapsed) if elapsed > 0 else 0.0


def describe_open_files(open_files: dict[str, Any]) -> str:
    if open_files["soft"] > open_files["before_soft"]:
        change = f"raised the soft limit from {open_files['before_soft']} to {open_files['soft']}"
    else:
        change = f"the soft limit is already {open_files['soft']}"
    return (
        f"open files (RLIMIT_NOFILE): {change} (hard limit {open_files['hard']}); child processes inherit it"
    )


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of the first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, trio.Cancelled)), exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}"


async def run_scenario(bench: Bench, name: str) -> ScenarioResult:
    """One scenario under its deadline; a failure is recorded in the result, not raised."""
    title, scenario = SCENARIOS[name]
    print(f"{title} ...", flush=True)
    others = ForeignCpu()
    started = time.perf_counter()
    try:
        with trio.fail_after(bench.sizes.scenario_budget_s):
            result = await scenario(bench)
    except trio.TooSlowError:
        result = ScenarioResult(name, title, status="error")
        result.notes.append(f"error: over its budget of {bench.sizes.scenario_budget_s:g} s")
    except Exception as exc:  # the boundary of one scenario: the others still run
        result = ScenarioResult(name, title, status="error")
        result.notes.append(f"error: {describe_error(exc)}"[:2000])
        log_path = bench.workspace.log_dir / f"{name}.traceback.txt"
        log_path.write_text("".join(traceback.format_exception(exc)))
    result.seconds = time.perf_counter() - started
    result.background_cpu_percent = round(others.percent(), 1)
    print(f"    -> {result.status} in {result.seconds:.1f} s", flush=True)
    return result


async def run_set(sizes: Sizes, names: Sequence[str], workspace: Workspace) -> dict[str, dict[str, Any]]:
    bench = Bench(workspace, sizes)
    results = {}
    for name in names:
        results[name] = (await run_scenario(bench, name)).as_dict()
    return results


def compile_bytecode() -> str:
    """Byte-compile sonde as ``pip install`` does, so start-up times do not include compiling it.

    A checkout (an editable install) has no bytecode until something writes it, and
    ``PYTHONDONTWRITEBYTECODE`` (set on some machines) stops that; every ``sonde serve``
    would then compile every module it imports, which a wheel install never does.
    """
    compileall.compile_dir(str(REPO / "sonde"), quiet=1)
    return "bytecode: sonde compiled to __pycache__ first, as an install does"


def run_benchmarks(sizes: Sizes, names: Sequence[str], out_dir: Path, keep: bool = False) -> dict[str, Any]:
    """Run ``names`` at ``sizes``, write ``out_dir/<set>-<date>.{json,txt}``; returns the run."""
    open_files = raise_open_file_limit()
    print(describe_open_files(open_files), flush=True)
    bytecode = compile_bytecode()
    print(bytecode, flush=True)
    workspace = Workspace.create(keep)
    print(f"workspace: {workspace.root}{' (kept)' if keep else ''}", flush=True)
    date, started = now_iso(), time.perf_counter()
    machine = describe_machine()
    try:
        scenarios = trio.run(run_set, sizes, names, workspace)
    finally:
        workspace.remove()
    run = {
        "schema": 1,
        "set": sizes.name,
        "date": date,
        "duration_s": round(time.perf_counter() - started, 1),
        "machine": machine,
        "load_average_after": [round(x, 2) for x in psutil.getloadavg()],
        "versions": package_versions(),
        "open_files": open_files,
        "bytecode": bytecode,
        "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(sizes).items()},
        "scenarios": scenarios,
    }
    run["targets"] = check_targets(scenarios)
    json_path, table_path = write_results(out_dir, run)
    print("\n" + render_table(run), flush=True)
    print(f"results: {json_path}\n         {table_path}", flush=True)
    return run
