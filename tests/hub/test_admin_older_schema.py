"""An older Sonde's database: only a hub upgrades it, at its start, and says so.

Regression: `sonde hub backup` or `sonde hub agent list` run with a new Sonde, while the older
hub still served the file, upgraded it under that hub; the hub then failed every agent's
connect (1011) and every enrollment, while /api/v1/health still said ok.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from sonde.hub import db as hub_db
from sonde.hub import db_copies
from sonde.hub.admin import record
from sonde.hub.agent_records import insert_agent
from sonde.hub.db import SCHEMA_VERSION, open_database, write_transaction
from tests.hub.test_admin_errors import EVERY_COMMAND, hub_cli
from tests.hub.test_agent_records import make_agent

OLDER = 2


def older_database(data_dir: Path, monkeypatch: pytest.MonkeyPatch, version: int = OLDER) -> Path:
    """A hub database as the Sonde of schema ``version`` left it, with one agent and one audit row."""
    path = data_dir / "sonde.db"
    with monkeypatch.context() as patched:
        patched.setattr(hub_db, "MIGRATIONS", hub_db.MIGRATIONS[:version])
        patched.setattr(hub_db, "SCHEMA_VERSION", version)
        db = open_database(path)
        with write_transaction(db):
            db.execute(
                "INSERT INTO agents (id, name, public_key, packs, enrolled_at) VALUES (?, ?, ?, ?, ?)",
                ["id-web-1", "web-1", "k" * 43, "[]", 1.0],
            )
            record(db, "cli.agent.tags", "web-1", tags=[])
        db.close()
    return path


def version_of(path: Path) -> int:
    with sqlite3.connect(path) as db:
        (version,) = db.execute("PRAGMA user_version").fetchone()
    db.close()
    return int(version)


@pytest.mark.parametrize("args", [args for args in EVERY_COMMAND if args[0] != "audit"] + [["agent", "list"]])
def test_commands_refuse_an_older_database_and_leave_it_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    path = older_database(tmp_path / "data", monkeypatch)
    done = hub_cli(path.parent, *args)
    assert done.returncode == 1, done.stderr
    assert (
        f"has schema version {OLDER}, an older Sonde's, and this Sonde's commands need version "
        in done.stderr
    )
    assert "start the hub with this Sonde (it upgrades the file at its start)" in done.stderr
    assert "Traceback" not in done.stderr
    assert version_of(path) == OLDER


def test_a_backup_and_its_restore_keep_an_older_database_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = older_database(tmp_path / "data", monkeypatch)
    backup = tmp_path / "older.db"
    done = hub_cli(path.parent, "backup", str(backup))
    assert done.returncode == 0, done.stderr
    said = f"it is an older Sonde's database (schema version {OLDER}, this Sonde's is {SCHEMA_VERSION})"
    assert said in done.stderr
    assert version_of(path) == version_of(backup) == OLDER
    listed = hub_cli(path.parent, "audit", "list")  # read as it is: the backup is on the audit log
    assert listed.returncode == 0, listed.stderr
    assert "cli.hub.backup" in listed.stdout

    restored_dir = tmp_path / "restored"
    done = hub_cli(restored_dir, "restore", str(backup))
    assert done.returncode == 0, done.stderr
    assert said in done.stderr
    assert version_of(restored_dir / "sonde.db") == OLDER


def test_restoring_the_first_schemas_backup_says_what_it_takes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: schema 1 has no token revocation; reading its tokens failed, and the restore
    said nothing of what it took back (nor whose hub's it was)."""
    backup = older_database(tmp_path / "then", monkeypatch, version=1)
    live = tmp_path / "data" / "sonde.db"
    db = open_database(live)
    insert_agent(db, make_agent("db-9"))
    db.close()
    done = hub_cli(live.parent, "restore", str(backup))
    assert done.returncode == 0, done.stderr
    assert "agents enrolled since the backup are unknown to it and must enroll again: db-9 (" in done.stderr
    assert "could not be read" not in done.stderr
    assert version_of(live) == 1


def test_the_hub_says_it_upgraded_its_database_and_keeps_it_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = older_database(tmp_path / "data", monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sonde.hub.db"):
        open_database(path).close()  # what the hub's start does
    assert version_of(path) == SCHEMA_VERSION
    kept = path.with_name("sonde.db.schema-2")
    assert [r.getMessage() for r in caplog.records] == [
        f"upgraded the hub's database {path} from schema version {OLDER} to {SCHEMA_VERSION}: an older "
        f"Sonde cannot open it now (to go back: the file as it was is kept as {kept})"
    ]
    assert kept.stat().st_mode & 0o777 == 0o600  # it holds the hub's signing key
    assert version_of(kept) == OLDER
    with sqlite3.connect(kept) as copy:
        assert copy.execute("SELECT name FROM agents").fetchall() == [("web-1",)]
        assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # one file
    copy.close()
    assert sorted(p.name for p in path.parent.iterdir() if "schema" in p.name) == ["sonde.db.schema-2"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sonde.hub.db"):
        open_database(path).close()
        open_database(tmp_path / "new" / "sonde.db").close()
    assert caplog.records == []  # said once, and never of a new file
    assert not (tmp_path / "new" / "sonde.db.schema-0").exists()


def test_a_disk_without_room_for_the_copy_still_upgrades(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = older_database(tmp_path / "data", monkeypatch)
    full = shutil.disk_usage(path.parent)._replace(free=1024)
    monkeypatch.setattr(db_copies.shutil, "disk_usage", lambda _: full)
    with caplog.at_level(logging.WARNING, logger="sonde.hub.db"):
        open_database(path).close()
    assert version_of(path) == SCHEMA_VERSION
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith("not keeping a copy of the hub's database as it was before its upgrade: "), said
    assert said[1].endswith("(to go back: restore a backup taken before)"), said
    assert not path.with_name("sonde.db.schema-2").exists()
