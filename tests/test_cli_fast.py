"""`sonde.cli_fast` takes exactly the argv cyclopts would bind the same way, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sonde.cli_fast as fast
from sonde.commands import app

TAKEN = [
    (["serve", "--json"], ("serve", None)),
    (["serve", "--json", "--manifest", "m.json"], ("serve", Path("m.json"))),
    (["serve", "--manifest=m.json", "--json"], ("serve", Path("m.json"))),
    (["start"], ("start", (False, "ENV"))),
    (["start", "--allow-root"], ("start", (True, "ENV"))),
    (["start", "--log-level", "DEBUG", "--allow-root"], ("start", (True, "DEBUG"))),
    (["start", "--log-level=WARNING"], ("start", (False, "WARNING"))),
]
LEFT = [
    [],
    ["serve"],
    ["serve", "--help"],
    ["serve", "--json", "--json"],
    ["serve", "--json", "--manifest"],
    ["serve", "--json", "--manifest", "--x"],
    ["serve", "--json=1"],
    ["start", "--help"],
    ["start", "--allow-root=1"],
    ["start", "--no-allow-root"],
    ["start", "--log-level"],
    ["start", "extra"],
    ["hub"],
    ["--version"],
]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []
    monkeypatch.setenv(fast.LOG_LEVEL_ENV, "ENV")
    monkeypatch.setattr("sonde.agent.serve.run_serve", lambda manifest: seen.append(("serve", manifest)) or 0)

    def start(*, allow_root: bool, log_level: str) -> int:
        seen.append(("start", (allow_root, log_level)))
        return 0

    monkeypatch.setattr(fast, "run_start", start)
    return seen


@pytest.mark.parametrize(("argv", "expected"), TAKEN)
def test_fast_forms_bind_like_cyclopts(argv: list[str], expected: tuple[str, Any], calls: list[Any]) -> None:
    assert fast.fast_command(argv) == 0
    assert calls == [expected]
    command, bound, _ = app.parse_args(argv)
    assert command.__name__ == expected[0]
    arguments = {"json": False, "manifest": None, "allow_root": False, "log_level": "ENV", **bound.arguments}
    if expected[0] == "serve":
        assert arguments["json"] is True
        assert arguments["manifest"] == expected[1]
    else:
        assert (arguments["allow_root"], arguments["log_level"]) == expected[1]


@pytest.mark.parametrize("argv", LEFT)
def test_other_argv_go_to_cyclopts(argv: list[str], calls: list[Any]) -> None:
    assert fast.fast_command(argv) is None
    assert calls == []
