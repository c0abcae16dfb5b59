"""The benchmark harness at tiny sizes, so it cannot rot: it completes and writes well-formed results.

No timing is asserted: only that every scenario ran (or was skipped with a
reason) and that every figure has the documented shape with numbers in it.
"""

from __future__ import annotations

import json
import math
import pstats
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.subprocs import run_ok

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = ("roundtrip", "concurrent", "fanout", "scale", "local")
DISTRIBUTION_KEYS = ("n", "min", "median", "p99", "max", "mean")
SMOKE_TIMEOUT_S = 100

pytestmark = pytest.mark.e2e


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_figure(name: str, figure: dict[str, Any]) -> None:
    assert isinstance(figure.get("unit"), str), name
    if figure["kind"] == "distribution":
        assert isinstance(figure["n"], int), name
        for key in DISTRIBUTION_KEYS[1:]:
            assert figure[key] is None if figure["n"] == 0 else is_number(figure[key]), (name, key)
    else:
        assert figure["kind"] == "scalar", name
        assert figure["value"] is None or is_number(figure["value"]), name


def test_smoke_run_writes_well_formed_results(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
        check=False,
    )
    failures = [line for line in done.stdout.splitlines() if "error" in line or "note:" in line]
    assert done.returncode == 0, "\n".join(failures) + "\n" + done.stderr[-3000:]
    [json_path] = tmp_path.glob("smoke-*.json")
    assert json_path.with_suffix(".txt").read_text().startswith("Sonde benchmarks, smoke set")
    run = json.loads(json_path.read_text())

    for key in ("date", "machine", "versions", "open_files", "sizes", "scenarios", "targets"):
        assert key in run, key
    for key in ("cpu_model", "logical_cores", "ram_bytes", "kernel", "python"):
        assert run["machine"][key], key
    for package in ("trio", "hypercorn", "mcp", "pydantic"):
        assert run["versions"][package], package
    assert set(run["scenarios"]) == set(SCENARIOS)
    for name, scenario in run["scenarios"].items():
        assert scenario["status"] in ("ok", "skipped"), (name, scenario["notes"])
        if scenario["status"] == "skipped":
            assert any(note.startswith("skipped:") for note in scenario["notes"]), name
            continue
        assert scenario["figures"], name
        for figure_name, figure in scenario["figures"].items():
            check_figure(f"{name}.{figure_name}", figure)
    assert is_number(run["scenarios"]["roundtrip"]["figures"]["probe_rtt_ms"]["median"])


def run_profiler(*args: str) -> str:
    """``python -m benchmarks.profile ARGS``, which must succeed; its stdout."""
    return run_ok(
        [sys.executable, "-m", "benchmarks.profile", *args], cwd=REPO, timeout=SMOKE_TIMEOUT_S
    ).stdout


def test_profiler_runs_the_hub_under_cprofile_and_reports_sonde_functions(tmp_path: Path) -> None:
    stdout = run_profiler("--cprofile", "--calls", "5", "--out", str(tmp_path))
    assert (tmp_path / "profile-hub.pstats").stat().st_size > 0
    assert "Ordered by: internal time" in stdout
    assert "sonde/hub/run.py" in stdout  # the hub's own frames are in it


def test_profiler_holds_an_idle_fleet_and_sees_its_heartbeats(tmp_path: Path) -> None:
    run_profiler("--cprofile", "--idle", "3", "--seconds", "2.5", "--heartbeat", "1", "--out", str(tmp_path))
    calls = {
        (Path(file).name, function): count
        for (file, _, function), (_, count, *_) in pstats.Stats(
            str(tmp_path / "profile-hub.pstats")
        ).stats.items()  # type: ignore[attr-defined]
    }
    assert calls[("codec.py", "decode")] >= 6  # heartbeats from 3 agents, 1 s apart, were decoded
    assert ("mcp_server.py", "call_tool") not in calls  # and no tool was called


def test_collapsed_stacks_are_summarized_by_own_and_inclusive_samples(tmp_path: Path) -> None:
    from benchmarks.profile import summarize

    stacks = tmp_path / "stacks.txt"
    stacks.write_text(
        "main (a/x.py:1);work (a/y.py:2);encode (b/z.py:3) 30\n"
        "main (a/x.py:1);work (a/y.py:2) 10\n"
        "main (a/x.py:1);idle (c/w.py:9) 60\n"
    )
    text = summarize(stacks)
    assert text.startswith("100 samples")
    own, inclusive = text.split("-- including callees")
    assert "60.0%  idle w.py" in own
    assert "30.0%  encode z.py" in own
    assert "100.0%  main x.py" in inclusive
    assert "40.0%  work y.py" in inclusive
