"""`python -m benchmarks.markdown`: usage, --help, and a one-line error for a file that is not there
(a fresh checkout has no results, and the shell passes an unmatched glob on as it is)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import markdown as table

REPO = Path(__file__).resolve().parents[1]


def markdown(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.markdown", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_missing_file_is_named_in_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = str(tmp_path / "quick-*.json")
    done = markdown(missing)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    [usage, error] = done.stderr.splitlines()
    assert usage.startswith("usage: python -m benchmarks.markdown ")
    assert error.startswith(
        f"python -m benchmarks.markdown: error: argument RESULT.json: no such file: {missing} "
    )


@pytest.mark.parametrize(("args", "code"), [((), 2), (("--help",), 0), (("-h",), 0)])
def test_usage_and_help(args: tuple[str, ...], code: int) -> None:
    done = markdown(*args)
    assert done.returncode == code
    assert "Traceback" not in done.stderr
    assert (
        "usage: python -m benchmarks.markdown [-h] RESULT.json [RESULT.json ...]" in done.stdout + done.stderr
    )


def test_a_file_that_is_no_result_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text("[1, 2]")
    with pytest.raises(SystemExit) as caught:
        table.main([str(path)])
    assert caught.value.code == 2
    assert f"{path} is not a benchmark result file" in capsys.readouterr().err


def test_a_result_file_is_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenarios = {"local": {"other_processes_cpu_percent": 3.2, "figures": {}}}
    run = {"set": "quick", "date": "2026-11-25T23:19:12Z", "scenarios": scenarios, "targets": []}
    path = tmp_path / "quick.json"
    path.write_text(json.dumps(run))
    assert table.main([str(path)]) == 0
    assert capsys.readouterr().out.startswith("| figure | quick 2026-11-25 (others 3 %) |\n")
