"""`sonde hub key|token|agent|audit ...`: a directory, file or argument they cannot use is one message
naming it and a non-zero exit, never a traceback, and never a change to a file that is not the hub's."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from sonde.hub.admin import record
from sonde.hub.audit import MAX_TARGET_CHARS
from sonde.hub.db import open_database
from sonde.hub.durations import parse_duration
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any, run_ok, without_file_overrides

EVERY_COMMAND = (
    ["key", "list"],
    ["key", "create", "--name", "laptop"],
    ["key", "revoke", "k1"],
    ["token", "create"],
    ["token", "list"],
    ["token", "revoke", "t1"],
    ["agent", "accept", "web-1"],
    ["agent", "tag", "web-1", "prod"],
    ["audit", "verify"],
    ["audit", "list"],
    ["audit", "prune", "--older-than", "30d"],
)


def refused_code(args: list[str]) -> int:
    """A refusal's exit code: `audit verify` tells "could not check" (3) from a broken chain (1)."""
    return 3 if args == ["audit", "verify"] else 1


def hub_cli(data_dir: Path, *args: str, overrides: bool = True) -> subprocess.CompletedProcess[str]:
    """`sonde hub ARGS --data-dir DATA_DIR`; without ``overrides`` file modes bind it, even as root."""
    argv = [*SONDE, "hub", *args, "--data-dir", str(data_dir)]
    return run_any(
        argv if overrides else without_file_overrides(argv),
        env=base_env(data_dir.parent / "home"),
        timeout=60,
    )


def not_utf8(text: bytes) -> str:
    """How Python hands a program an argument that is not UTF-8 (``subprocess`` gives the bytes back)."""
    return os.fsdecode(text)


def assert_refused(done: subprocess.CompletedProcess[str], code: int, *says: str) -> None:
    assert done.returncode == code, done.stderr
    for text in says:
        assert text in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""  # no key, token or listing from a database that is not the hub's


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A hub's data directory, as a first start leaves it."""
    open_database(tmp_path / "data" / "sonde.db").close()
    return tmp_path / "data"


def test_a_data_directory_closed_to_this_user_is_named(data_dir: Path) -> None:
    data_dir.chmod(0o000)
    try:
        for args in EVERY_COMMAND:
            done = hub_cli(data_dir, *args, overrides=False)
            assert_refused(
                done,
                refused_code(args),
                f"cannot use the hub's database {data_dir / 'sonde.db'} (permission denied: {data_dir})",
                "run this as the hub's user",
            )
    finally:
        data_dir.chmod(0o700)


def foreign_database(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE agents (x)")  # a name the hub's schema has: its migration would fail
        db.execute("INSERT INTO agents VALUES (1)")
    db.close()


def foreign_state(path: Path) -> tuple[object, ...]:
    with sqlite3.connect(path) as db:
        state = (
            db.execute("PRAGMA journal_mode").fetchone(),
            db.execute("PRAGMA user_version").fetchone(),
            db.execute("SELECT type, name FROM sqlite_master ORDER BY name").fetchall(),
        )
    db.close()
    return state


def test_another_programs_database_is_refused_and_nothing_in_it_changes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    foreign_database(data_dir / "sonde.db")
    before = foreign_state(data_dir / "sonde.db")
    assert before[0] == ("delete",)
    for args in EVERY_COMMAND:
        done = hub_cli(data_dir, *args)
        assert_refused(
            done,
            refused_code(args),
            f"{data_dir / 'sonde.db'} is not a hub database: it holds another program's tables ('agents')",
        )
        assert foreign_state(data_dir / "sonde.db") == before  # still in its own journal mode, no hub tables
    assert sorted(p.name for p in data_dir.iterdir()) == ["sonde.db"]


def test_an_empty_file_is_no_hub_database_and_stays_empty(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "sonde.db").touch()
    for args in EVERY_COMMAND:
        done = hub_cli(data_dir, *args)
        assert_refused(
            done, refused_code(args), f"no hub database in {data_dir / 'sonde.db'} (the file is empty)"
        )
        assert (data_dir / "sonde.db").stat().st_size == 0
    assert sorted(p.name for p in data_dir.iterdir()) == ["sonde.db"]


def test_a_file_that_is_not_sqlite_is_named(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "sonde.db").write_text("not a database\n" * 100)
    done = hub_cli(data_dir, "key", "list")
    assert_refused(done, 1, f"the hub's database {data_dir / 'sonde.db'} is not a SQLite database")


def test_a_database_from_a_newer_sonde_is_named(data_dir: Path) -> None:
    with sqlite3.connect(data_dir / "sonde.db") as db:
        db.execute("PRAGMA user_version = 99")
    db.close()
    done = hub_cli(data_dir, "key", "list")
    assert_refused(done, 1, f"hub database {data_dir / 'sonde.db'} has schema version 99", "upgrade Sonde")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["audit", "prune", "--older-than", "99999999999999999999d"], "--older-than"),
        (["token", "create", "--ttl", "9" * 400], "--ttl"),
    ],
)
def test_a_duration_past_any_sane_bound_is_refused(data_dir: Path, args: list[str], flag: str) -> None:
    done = hub_cli(data_dir, *args)
    assert_refused(done, 2, f"{flag}: duration ", "is too long: at most 100000d")
    assert len(done.stderr) < 300  # the number is shown cut short


def test_durations_are_bounded_at_100000_days() -> None:
    assert parse_duration("100000d") == 100_000 * 86400
    assert parse_duration("99999d") == 99_999 * 86400  # the longest `since` query_logs admits
    for text in ("100001d", "8640000001", "9" * 400 + "d"):
        with pytest.raises(ValueError, match="is too long: at most 100000d"):
            parse_duration(text)


def test_a_reader_that_stops_reading_ends_the_listing_quietly(data_dir: Path) -> None:
    for name in ("one", "two", "three"):
        run_ok([*SONDE, "hub", "key", "create", "--name", name, "--data-dir", str(data_dir)])
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -1` gone before the listing is written: every write is EPIPE
    try:
        done = subprocess.run(
            [*SONDE, "hub", "key", "list", "--json", "--data-dir", str(data_dir)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=base_env(data_dir.parent / "home"),
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr  # 128 + SIGPIPE, as a shell reports such a tool
    assert done.stderr == ""


@pytest.mark.parametrize(
    "args",
    [["token", "revoke"], ["key", "revoke"], ["agent", "accept"], ["token", "create", "--name"]],
    ids=lambda args: " ".join(args),
)
def test_an_argument_that_is_not_utf8_is_refused(data_dir: Path, args: list[str]) -> None:
    done = hub_cli(data_dir, *args, not_utf8(b"web\xff"))
    assert_refused(done, 2, "'web\\udcff' is not UTF-8 text")
    assert "codec" not in done.stderr


def test_a_token_that_is_not_utf8_is_refused_without_showing_it(data_dir: Path) -> None:
    done = hub_cli(data_dir, "token", "revoke", not_utf8(b"enr_secret\xff"))
    assert_refused(done, 2, "enrollment token is not UTF-8 text")
    assert "secret" not in done.stderr


def audit_targets(data_dir: Path) -> list[str]:
    db = open_database(data_dir / "sonde.db")
    try:
        return [row[0] for row in db.execute("SELECT coalesce(target, '') FROM audit")]
    finally:
        db.close()


@pytest.mark.parametrize(
    "args", [["key", "revoke"], ["token", "revoke"], ["agent", "accept"]], ids=lambda args: " ".join(args)
)
def test_a_huge_argument_is_shown_cut_short_and_never_stored(data_dir: Path, args: list[str]) -> None:
    huge = "a" * 100_000
    done = hub_cli(data_dir, *args, huge)
    assert_refused(done, 2, f"{'a' * 64!r}... (100000 characters) is too long")
    assert len(done.stderr) < 400
    assert all(len(target) <= MAX_TARGET_CHARS + 3 for target in audit_targets(data_dir))


def test_a_long_argument_is_echoed_as_a_prefix(data_dir: Path) -> None:
    done = hub_cli(data_dir, "key", "revoke", "k" * 90)
    assert done.returncode == 1, done.stderr
    assert f"no active API key with the id or name {'k' * 64!r}... (90 characters)" in done.stderr
    assert "k" * 65 not in done.stderr


def test_the_cli_audit_row_keeps_the_hubs_bounds(data_dir: Path) -> None:
    db = open_database(data_dir / "sonde.db")
    try:
        record(db, "cli.api_key.revoke", "t" * 100_000, "not_found", note="d" * 100_000)
        target, detail = db.execute("SELECT target, detail FROM audit").fetchone()
    finally:
        db.close()
    assert target == "t" * MAX_TARGET_CHARS + "..."
    assert len(detail) < 200  # the detail value is replaced by a note of its size
