"""An empty or missing ``sonde.db`` where a hub's database existed is refused, by every open,
before SQLite sees it: given an empty file, SQLite deletes the -wal beside it (the last of
the lost database), and the hub started over as a new hub. A first start, interrupted or
not, still starts cleanly. The end-to-end cases are in tests/e2e/test_db_damage.py."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sonde.hub.admin import existing_database
from sonde.hub.config import HubConfig
from sonde.hub.core import FIRST_KEY_FILE, HUB_MARK_FILE, open_hub
from sonde.hub.db import open_database, open_database_read_only, schema_version
from sonde.hub.db_errors import DatabaseLost
from sonde.hub.db_files import HUB_RAN_FILES
from sonde.protocol.signing import new_private_key, public_key_to_text
from sonde.quickstart import STATE_FILE

WAL_BYTES = b"\x37\x7f\x06\x82" + bytes(4124)  # a -wal file's magic and a frame's worth


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


OPENS: dict[str, Callable[[Path], Any]] = {
    "hub": open_database,
    "admin command": lambda path: open_database(path, existing=True),
    "audit verify": open_database_read_only,
    "admin command, file missing": lambda path: existing_database(path.parent),
}


@pytest.mark.parametrize("how", list(OPENS))
@pytest.mark.parametrize("db_file", ["empty", "missing"])
def test_a_wal_without_its_database_is_refused_and_kept(tmp_path: Path, how: str, db_file: str) -> None:
    path = tmp_path / "sonde.db"
    if db_file == "empty":
        path.touch()
    (tmp_path / "sonde.db-wal").write_bytes(WAL_BYTES)
    before = snapshot(tmp_path)
    with pytest.raises(DatabaseLost) as refused:
        OPENS[how](path)
    assert snapshot(tmp_path) == before  # nothing made, nothing deleted
    text = str(refused.value)
    assert f"the hub's database {path} is {db_file}, but a hub ran in {tmp_path}" in text
    assert f"sonde.db-wal holds {len(WAL_BYTES)} bytes of its changes" in text
    assert "`sonde hub restore BACKUP --data-dir " in text
    assert "(it moves sonde.db-wal aside: they belong to the old file" in text
    assert f"to start a new hub here on purpose, remove {tmp_path / 'sonde.db-wal'} (or pass" in text


@pytest.mark.parametrize("name", sorted(HUB_RAN_FILES))
def test_a_file_only_a_hub_with_a_database_writes_is_a_sign(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("sonde_...\n")
    with pytest.raises(DatabaseLost, match=f"{name} is there"):
        open_database(tmp_path / "sonde.db")
    assert not (tmp_path / "sonde.db").exists()


def test_the_signs_are_the_files_the_hub_writes() -> None:
    assert set(HUB_RAN_FILES) == {HUB_MARK_FILE, FIRST_KEY_FILE, STATE_FILE}


@pytest.mark.parametrize("leftover", ["nothing", "empty file", "hub.lock", "empty -wal"])
def test_a_first_start_interrupted_before_its_first_commit_starts_cleanly(
    tmp_path: Path, leftover: str
) -> None:
    path = tmp_path / "sonde.db"
    if leftover != "nothing":
        path.touch()
    if leftover == "hub.lock":
        (tmp_path / "hub.lock").write_text("4242\n")
    if leftover == "empty -wal":
        (tmp_path / "sonde.db-wal").touch()
    db = open_database(path)
    try:
        assert schema_version(db) > 0
    finally:
        db.close()


def test_a_database_that_holds_something_is_opened_as_ever(tmp_path: Path) -> None:
    path = tmp_path / "sonde.db"
    open_database(path).close()
    (tmp_path / FIRST_KEY_FILE).write_text("sonde_...\n")
    db = open_database(path)
    db.close()


async def test_a_database_of_another_hub_is_said_to_be_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_hub(HubConfig(data_dir=tmp_path)):
        pass
    mark = tmp_path / HUB_MARK_FILE
    ours = mark.read_text()
    async with open_hub(HubConfig(data_dir=tmp_path)):
        pass
    assert not [r for r in caplog.records if "another hub" in r.getMessage()]
    other = public_key_to_text(new_private_key().public_key()) + "\n"
    mark.write_text(other)  # as if sonde.db came from another hub's directory
    async with open_hub(HubConfig(data_dir=tmp_path)):
        pass
    [warned] = [r for r in caplog.records if "another hub" in r.getMessage()]
    assert warned.levelno == logging.WARNING
    assert f"delete {mark}" in warned.getMessage()
    assert mark.read_text() == other != ours  # left for the operator to judge
