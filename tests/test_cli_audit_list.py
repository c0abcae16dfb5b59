"""`sonde hub audit list`: the audit log read from the CLI, with the filters of `GET /api/v1/audit`
(agent, key, action prefix, since, until, limit), as a table or as REST's JSON; it only reads the
database, so a read-only backup copy will do."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonde.hub.audit import AuditEntry, append_many
from sonde.hub.db import open_database
from sonde.hub.keys import create_api_key
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any, without_file_overrides

NOW = time.time()
HOUR_S = 3600.0


def hub_cli(data_dir: Path, *args: str, read_only: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [*SONDE, "hub", "audit", "list", *args, "--data-dir", str(data_dir)]
    return run_any(
        without_file_overrides(argv) if read_only else argv, env=base_env(data_dir.parent / "home")
    )


def entry(ts: float, actor: str, action: str, target: str | None, **detail: object) -> AuditEntry:
    return AuditEntry(ts=ts, actor=actor, action=action, target=target, outcome="ok", detail=detail)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Five rows: two days ago, three hours ago, one hour ago (two), a minute ago."""
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        append_many(
            db,
            [
                entry(NOW - 48 * HOUR_S, "cli", "cli.api_key.create", "k1", name="laptop"),
                entry(NOW - 3 * HOUR_S, "key-a", "mcp.call.probe", "web-1", tool="probe"),
                entry(NOW - HOUR_S, "key-a", "rest.agent.tags", "web-1", tags=["prod"]),
                entry(NOW - HOUR_S + 1, "key-b", "mcp.call.diagnose", "db-1", tool="diagnose"),
                entry(NOW - 60, "hub", "hub.api_key.create", "k2"),
            ],
        )
    finally:
        db.close()
    return tmp_path / "data"


def listed(data_dir: Path, *args: str) -> dict[str, object]:
    done = hub_cli(data_dir, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def actions(answer: dict[str, object]) -> list[str]:
    entries = answer["entries"]
    assert isinstance(entries, list)
    return [row["action"] for row in entries]


def test_every_row_newest_first_as_rest_answers_them(data_dir: Path) -> None:
    answer = listed(data_dir)
    assert answer["truncated"] is False
    assert actions(answer) == [
        "hub.api_key.create",
        "mcp.call.diagnose",
        "rest.agent.tags",
        "mcp.call.probe",
        "cli.api_key.create",
    ]
    entries = answer["entries"]
    assert isinstance(entries, list)
    assert set(entries[0]) == {
        "seq",
        "ts",
        "actor",
        "action",
        "target",
        "outcome",
        "duration_ms",
        "detail",
        "hash",
    }
    assert entries[2]["detail"] == {"tags": ["prod"]}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--agent", "web-1"], ["rest.agent.tags", "mcp.call.probe"]),
        (["--key", "key-a"], ["rest.agent.tags", "mcp.call.probe"]),
        (["--key", "cli"], ["cli.api_key.create"]),
        (["--action", "mcp.call."], ["mcp.call.diagnose", "mcp.call.probe"]),
        (["--since", "2h"], ["hub.api_key.create", "mcp.call.diagnose", "rest.agent.tags"]),
        (["--until", "2h"], ["mcp.call.probe", "cli.api_key.create"]),
        (["--since", "1d", "--until", "30m"], ["mcp.call.diagnose", "rest.agent.tags", "mcp.call.probe"]),
        (
            ["--since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 2 * HOUR_S))],
            ["hub.api_key.create", "mcp.call.diagnose", "rest.agent.tags"],
        ),
        (
            ["--until", time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(NOW - 2 * HOUR_S))],
            ["mcp.call.probe", "cli.api_key.create"],
        ),
        (["--agent", "web-1", "--action", "rest."], ["rest.agent.tags"]),
    ],
    ids=lambda value: re.sub(r"\d", "N", " ".join(value)),  # the same on every xdist worker: no clock in it
)
def test_the_filters_of_get_api_v1_audit(data_dir: Path, args: list[str], expected: list[str]) -> None:
    assert actions(listed(data_dir, *args)) == expected


def test_a_limit_keeps_the_newest_and_says_older_ones_match(data_dir: Path) -> None:
    answer = listed(data_dir, "--limit", "2")
    assert actions(answer) == ["hub.api_key.create", "mcp.call.diagnose"]
    assert answer["truncated"] is True
    table = hub_cli(data_dir, "--limit", "2")
    assert table.returncode == 0, table.stderr
    assert "older entries match too" in table.stderr


def test_the_table_shows_each_row_on_one_line(data_dir: Path) -> None:
    done = hub_cli(data_dir, "--agent", "web-1")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["SEQ", "TIME", "ACTOR", "ACTION", "TARGET", "OUTCOME", "DETAIL"]
    assert len(rows) == 2
    assert rows[0].split()[0] == "3"
    assert time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(NOW - HOUR_S)) in rows[0]
    assert rows[0].split()[3:] == ["key-a", "rest.agent.tags", "web-1", "ok", '{"tags":["prod"]}']
    assert done.stderr == ""


def test_nothing_matching_is_an_empty_list_not_an_error(data_dir: Path) -> None:
    answer = listed(data_dir, "--agent", "nobody")
    assert answer == {"entries": [], "truncated": False}
    table = hub_cli(data_dir, "--agent", "nobody")
    assert table.returncode == 0
    assert "no audit entries match" in table.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "yesterday"], "--since: 'yesterday' is neither a duration"),
        (["--since", "1767225600"], "--since: '1767225600' needs a unit"),
        (["--until", "-5m"], "--until: invalid duration '-5m': a duration cannot be negative"),
        (["--since", "2026-13-45"], "--since: '2026-13-45' is neither a duration"),
        (["--since", "1h", "--until", "2h"], "--since (1h) must come before --until (2h)"),
        (["--limit", "0"], "--limit must be 1 to 1000, not 0"),
        (["--limit", "1001"], "--limit must be 1 to 1000, not 1001"),
        (["--agent", "a" * 65], "is too long"),
    ],
)
def test_a_bad_filter_is_a_usage_error(data_dir: Path, args: list[str], says: str) -> None:
    done = hub_cli(data_dir, *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


@pytest.fixture
def read_only_copy(data_dir: Path) -> Iterator[Path]:
    """The store as a read-only backup: neither its directory nor its file can be written."""
    assert sorted(p.name for p in data_dir.iterdir()) == ["sonde.db"]  # a closed WAL database
    (data_dir / "sonde.db").chmod(0o444)
    data_dir.chmod(0o555)
    try:
        yield data_dir
    finally:
        data_dir.chmod(0o755)


def test_it_only_reads_so_a_read_only_copy_will_do(read_only_copy: Path) -> None:
    before = {p.name: p.read_bytes() for p in read_only_copy.iterdir()}
    done = hub_cli(read_only_copy, "--json", read_only=True)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["entries"]) == 5
    assert {p.name: p.read_bytes() for p in read_only_copy.iterdir()} == before


def test_no_hub_database_is_said_and_nothing_is_made(tmp_path: Path) -> None:
    done = hub_cli(tmp_path / "nothing")
    assert done.returncode == 1
    assert f"no hub database at {tmp_path / 'nothing' / 'sonde.db'}" in done.stderr
    assert not (tmp_path / "nothing").exists()


def test_a_keys_name_finds_its_entries(tmp_path: Path) -> None:
    """Before: `--key laptop` (a name: the table shows only ids) silently matched nothing."""
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        laptop, _ = create_api_key(db, "laptop")
        twins = [create_api_key(db, "twin")[0] for _ in range(2)]
        append_many(db, [entry(NOW - 60, laptop.id, "mcp.call.probe", "web-1", tool="probe")])
    finally:
        db.close()
    data_dir = tmp_path / "data"
    by_name = hub_cli(data_dir, "--key", "laptop", "--json")
    assert by_name.returncode == 0, by_name.stderr
    assert actions(json.loads(by_name.stdout)) == ["mcp.call.probe"]
    assert f"(key 'laptop' is id {laptop.id}: its entries)" in by_name.stderr
    assert actions(listed(data_dir, "--key", laptop.id)) == ["mcp.call.probe"]
    two = hub_cli(data_dir, "--key", "twin")
    assert two.returncode == 2
    assert f"--key: 2 keys are named 'twin': give one's id ({twins[0].id}, {twins[1].id})" in two.stderr
    nobody = hub_cli(data_dir, "--key", "nobody")
    assert nobody.returncode == 0
    assert (
        "no audit entries match (no API key has the id or name 'nobody': see `sonde hub key list`)"
        in nobody.stderr
    )


def test_no_terminal_control_reaches_the_table() -> None:
    """Regression (a hostile-agent review): an agent's error message with a C1 CSI (U+009B)
    and a bidirectional override (U+202E) was printed raw in the detail column."""
    from sonde.hub.admin_audit_list import table_row

    row = {
        "seq": 1,
        "ts": 0.0,
        "actor": "hub",
        "action": "mcp.probe",
        "target": "web\u202e1",
        "outcome": "error",
        "detail": {"error": "a\u009b2Jb\u202ec", "name": "café"},
    }
    shown = table_row(row)
    assert shown.isprintable(), shown
    assert "\\u009b2J" in shown
    assert "\\u202e" in shown
    assert "café" in shown  # printable text stays as it is
