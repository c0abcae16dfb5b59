"""A damaged database file is an answer that says what to do, not a 500 with a traceback.

Before, `GET /api/v1/audit/verify` on a sonde.db with 4 KiB of garbage written into its
middle answered 500 ``internal`` and logged SQLite's "database disk image is malformed"
with a traceback. Now any REST route that reaches a damaged page answers 503
``database_unavailable``: the file is damaged, stop the hub, restore sonde.db from a
backup, run `sonde hub audit verify`. The audit queue's refusal says the same.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from quart_trio import QuartTrio

from sonde.hub import audit_queue
from sonde.hub.audit import AuditEntry, append_many
from sonde.hub.audit_queue import AuditQueue
from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub, open_hub
from sonde.hub.db import open_database
from sonde.hub.errors import is_damaged_database
from sonde.hub.keys import ApiKeyRecord, create_api_key
from sonde.hub.mcp_server import SondeUser, call_tool
from sonde.hub.rest import create_rest_app
from sonde.hub.store import StoreCommitFailed, open_store
from sonde.hub.tools import all_tools

ROWS = 3000
ADMIN = caller_for(ApiKeyRecord(id="k-admin", name="admin", prefix="sonde_x", role="admin", created_at=0.0))
PAGE_BYTES = 4096


def damage(path: Path, marker: bytes) -> None:
    """Overwrite the 4 KiB page holding ``marker`` (a row of the audit table) with garbage."""
    data = path.read_bytes()
    at = data.index(marker) // PAGE_BYTES * PAGE_BYTES
    with path.open("r+b") as file:
        file.seek(at)
        file.write(bytes(range(256)) * (PAGE_BYTES // 256))


@pytest.fixture
async def damaged_hub(tmp_path: Path) -> AsyncIterator[tuple[Hub, str]]:
    """A hub on a database whose audit table has a damaged page in its middle, and an admin key's secret."""
    db = open_database(tmp_path / "sonde.db")
    try:
        _, secret = create_api_key(db, "admin", role="admin")
        entries = [
            AuditEntry(
                actor="cli", action="cli.test", outcome="ok", detail={"row": f"row-{i:05d}", "pad": "p" * 300}
            )
            for i in range(ROWS)
        ]
        append_many(db, entries)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in sonde.db itself
    finally:
        db.close()
    damage(tmp_path / "sonde.db", f"row-{ROWS // 2:05d}".encode())
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        yield hub, secret


@pytest.fixture
def damaged(damaged_hub: tuple[Hub, str]) -> tuple[QuartTrio, dict[str, str]]:
    """The REST app of that hub, and an admin's headers."""
    hub, secret = damaged_hub
    return create_rest_app(hub), {"Authorization": f"Bearer {secret}"}


async def test_verify_on_a_damaged_file_says_to_restore_it_from_a_backup(
    damaged: tuple[QuartTrio, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    app, headers = damaged
    answer = await app.test_client().get("/api/v1/audit/verify", headers=headers)
    assert answer.status_code == 503
    error: dict[str, Any] = (await answer.get_json())["error"]
    assert error["code"] == "database_unavailable"
    message = error["message"]
    assert "sonde.db" in message
    assert "is damaged" in message
    assert "database disk image is malformed" in message
    assert "stop the hub, restore sonde.db from a backup, and run `sonde hub audit verify`" in message
    assert "Retry-After" not in answer.headers  # waiting does not mend it
    logged = [r for r in caplog.records if r.name == "sonde.hub.rest"]
    assert any(r.levelno == logging.ERROR and "is damaged" in r.getMessage() for r in logged)
    assert not any(r.exc_info for r in logged)  # no traceback: no bug of the hub's


async def test_other_routes_keep_answering_what_the_damage_does_not_reach(
    damaged: tuple[QuartTrio, dict[str, str]],
) -> None:
    app, headers = damaged
    client = app.test_client()
    assert (await client.get("/api/v1/agents", headers=headers)).status_code == 200
    assert (await client.get("/api/v1/audit?limit=10", headers=headers)).status_code == 200  # the newest rows


async def test_an_mcp_tool_reaching_the_damage_says_to_restore_from_a_backup(
    damaged_hub: tuple[Hub, str], caplog: pytest.LogCaptureFixture
) -> None:
    hub, _ = damaged_hub
    (query_logs,) = [spec for spec in all_tools() if spec.name == "query_logs"]
    ctx: Any = SimpleNamespace(
        request=SimpleNamespace(scope={"user": SondeUser(ADMIN)}), meta=None
    )  # no progress asked
    # a grep no row matches reads the whole trail, the damaged page too
    result = await call_tool(hub, query_logs, ctx, {"source": "audit", "grep": "no-such-text", "lines": 10})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "is damaged" in text
    assert "database disk image is malformed" in text
    assert "restore sonde.db from a backup" in text
    assert "Internal error" not in text
    logged = [r for r in caplog.records if r.name == "sonde.hub.mcp_server"]
    assert any(r.levelno == logging.ERROR and "is damaged" in r.getMessage() for r in logged)
    assert not any(r.exc_info for r in logged)  # no traceback: no bug of the hub's


def sqlite_error(kind: type[sqlite3.Error], message: str, code: int | None) -> sqlite3.Error:
    error = kind(message)
    if code is not None:
        error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return error


def test_damage_is_told_apart_from_a_lock_a_full_disk_and_a_bug() -> None:
    corrupt = sqlite_error(sqlite3.DatabaseError, "database disk image is malformed", sqlite3.SQLITE_CORRUPT)
    assert is_damaged_database(corrupt)
    index = sqlite_error(
        sqlite3.DatabaseError, "database disk image is malformed", 779
    )  # SQLITE_CORRUPT_INDEX
    assert is_damaged_database(index)
    assert is_damaged_database(
        sqlite_error(sqlite3.DatabaseError, "file is not a database", sqlite3.SQLITE_NOTADB)
    )
    assert is_damaged_database(sqlite_error(sqlite3.DatabaseError, "database disk image is malformed", None))
    assert not is_damaged_database(
        sqlite_error(sqlite3.OperationalError, "database is locked", sqlite3.SQLITE_BUSY)
    )
    assert not is_damaged_database(sqlite_error(sqlite3.OperationalError, "database or disk is full", 13))
    assert not is_damaged_database(
        sqlite_error(sqlite3.OperationalError, "no such table: x", sqlite3.SQLITE_ERROR)
    )
    assert not is_damaged_database(ValueError("malformed"))


async def test_a_commit_the_damage_fails_is_answered_as_damage(tmp_path: Path) -> None:
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        app = create_rest_app(hub)
        failed = StoreCommitFailed("the write transaction failed: database disk image is malformed")
        failed.__cause__ = sqlite_error(
            sqlite3.DatabaseError, "database disk image is malformed", sqlite3.SQLITE_CORRUPT
        )

        @app.get("/test/commit")
        async def commit() -> None:
            raise failed

        answer = await app.test_client().get("/test/commit")
        assert answer.status_code == 503
        assert "restore sonde.db from a backup" in (await answer.get_json())["error"]["message"]


async def test_the_audit_queue_refuses_calls_saying_the_file_is_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def malformed(db: object, entries: object) -> list[int]:
        raise sqlite_error(sqlite3.DatabaseError, "database disk image is malformed", sqlite3.SQLITE_CORRUPT)

    monkeypatch.setattr(audit_queue, "append_many", malformed)  # as SQLite fails on a damaged page
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)
        await queue.append(AuditEntry(actor="k", action="mcp.probe", outcome="ok"))
        with pytest.raises(audit_queue.AuditUnavailable):
            await queue.flush()
    refusal = queue.refusal()
    assert refusal is not None
    assert "restore sonde.db from a backup" in refusal
    assert "free disk space" not in refusal
