"""Exit codes as the README states them: 2 for a usage error (a name no agent could have, a token
that is no token), 1 when a command is refused or finds nothing to act on (nothing to accept, a
backup's file already there), 0 otherwise; and two backups into one directory never collide."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sonde.hub.agent_records import AgentRecord, insert_agent
from sonde.hub.backup import backup_name, destination
from sonde.hub.db import open_database
from sonde.name_rules import invalid_agent_name
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any


def sonde(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_any([*SONDE, *args], env=base_env(tmp_path / "home"), timeout=60)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A hub's store with one agent, web-1, whose attestation waits for nothing."""
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        insert_agent(db, AgentRecord(id="agent-1", name="web-1", public_key="k", enrolled_at=1.0))
    finally:
        db.close()
    return tmp_path / "data"


def test_accepting_with_nothing_pending_finds_nothing_to_act_on(tmp_path: Path, data_dir: Path) -> None:
    done = sonde(tmp_path, "hub", "agent", "accept", "web-1", "--data-dir", str(data_dir))
    assert done.returncode == 1, done.stderr
    assert "agent web-1 has no changed attestation waiting; nothing to accept" in done.stderr


@pytest.mark.parametrize("command", ["accept", "remove"])
def test_a_name_no_agent_could_have_is_a_usage_error(tmp_path: Path, data_dir: Path, command: str) -> None:
    done = sonde(tmp_path, "hub", "agent", command, "bad name", "--data-dir", str(data_dir))
    assert done.returncode == 2, done.stderr
    assert "invalid agent name or id 'bad name': an agent name is 1 to 63 letters" in done.stderr
    unknown = sonde(tmp_path, "hub", "agent", command, "web-2", "--data-dir", str(data_dir))
    assert unknown.returncode == 1, unknown.stderr  # a name an agent could have, that none has
    assert "no agent named 'web-2'" in unknown.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--name", "bad name"], invalid_agent_name("bad name")),
        (["--token", "garbage"], "the enrollment token is malformed"),
        (["--hub", "hub.example:3000"], "hub URL"),
    ],
    ids=["name", "token", "hub"],
)
def test_enroll_exits_2_for_a_malformed_argument(tmp_path: Path, args: list[str], says: str) -> None:
    given = {"--hub": "http://127.0.0.1:9", "--token": "enr_" + "Q" * 32}  # never reached
    given.update(dict(zip(args[::2], args[1::2], strict=True)))
    done = sonde(tmp_path, "enroll", *(word for pair in given.items() for word in pair))
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert not (tmp_path / "home" / ".sonde").exists()


def test_enroll_with_an_unreachable_hub_is_refused_not_a_usage_error(tmp_path: Path) -> None:
    done = sonde(tmp_path, "enroll", "--hub", "http://127.0.0.1:9", "--token", "enr_" + "Q" * 32)
    assert done.returncode == 1, done.stderr
    assert "cannot reach the hub at http://127.0.0.1:9" in done.stderr


def test_an_existing_backup_file_is_a_refusal_not_a_usage_error(tmp_path: Path, data_dir: Path) -> None:
    taken = tmp_path / "copy.db"
    taken.write_bytes(b"mine")
    done = sonde(tmp_path, "hub", "backup", str(taken), "--data-dir", str(data_dir))
    assert done.returncode == 1, done.stderr
    assert f"{taken} exists: a backup never replaces a file" in done.stderr
    assert taken.read_bytes() == b"mine"
    nowhere = sonde(tmp_path, "hub", "backup", str(tmp_path / "no" / "copy.db"), "--data-dir", str(data_dir))
    assert nowhere.returncode == 2, nowhere.stderr  # a DEST that cannot be used: still a usage error


def test_a_directory_gets_a_name_no_other_backup_has(tmp_path: Path) -> None:
    at = time.time()
    (tmp_path / backup_name(at)).write_bytes(b"an earlier copy, the same moment")
    second = destination(tmp_path, at)
    assert second.parent == tmp_path
    assert second.name != backup_name(at)
    second.write_bytes(b"")
    third = destination(tmp_path, at)
    assert third.name not in (backup_name(at), second.name)
    assert backup_name(at + 0.001) != backup_name(at)  # a copy a millisecond later has a name of its own


def test_two_backups_at_once_into_one_directory_both_succeed(tmp_path: Path, data_dir: Path) -> None:
    backups = tmp_path / "backups"
    backups.mkdir()
    argv = [*SONDE, "hub", "backup", str(backups), "--data-dir", str(data_dir)]
    env = base_env(tmp_path / "home")
    procs = [subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [(proc.wait(60), proc.stderr.read() if proc.stderr else "") for proc in procs]
    for proc in procs:
        if proc.stderr:
            proc.stderr.close()
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    assert len(list(backups.glob("sonde-*.db"))) == 3
    assert all(name.startswith(".") is False for name in (p.name for p in backups.iterdir()))
