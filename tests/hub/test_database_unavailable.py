"""A write the hub's database refuses (locked by another process, a full disk) is an answer, not a crash.

REST maps it to 503 ``database_unavailable`` (tests/e2e/test_hub_database_locked.py); an
MCP tool that writes gets the same words as a tool error, with one audit row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub, open_hub
from sonde.hub.errors import database_unavailable
from sonde.hub.keys import ApiKeyRecord
from sonde.hub.mcp_server import SondeUser, call_tool
from sonde.hub.store import StoreCommitFailed
from sonde.hub.tools.base import ToolCall, ToolSpec

ADMIN = caller_for(ApiKeyRecord(id="k-admin", name="admin", prefix="sonde_x", role="admin", created_at=0.0))


def commit_failed(cause: sqlite3.Error) -> StoreCommitFailed:
    error = StoreCommitFailed(f"the write transaction failed: {cause}")
    error.__cause__ = cause
    return error


def locked_error() -> sqlite3.OperationalError:
    """An SQLITE_BUSY as SQLite reports it (its code set)."""
    error = sqlite3.OperationalError("database is locked")
    error.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    return error


class NoInput(BaseModel):
    pass


async def write_refused(call: ToolCall, args: NoInput) -> NoInput:
    raise commit_failed(locked_error())


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    async with open_hub(HubConfig(data_dir=tmp_path)) as opened:
        yield opened


def test_a_lock_is_told_apart_from_a_full_disk() -> None:
    assert commit_failed(locked_error()).locked
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    assert not commit_failed(full).locked
    locked = database_unavailable(True, "database is locked")
    assert (locked.status, locked.code, locked.headers["Retry-After"]) == (503, "database_unavailable", "5")
    assert "locked by another process" in locked.message
    assert "nothing was changed" in locked.message
    assert "database or disk is full" in database_unavailable(False, "database or disk is full").message


async def test_an_mcp_tool_whose_write_is_refused_gets_a_tool_error_and_one_audit_row(hub: Hub) -> None:
    spec: ToolSpec[Any, Any] = ToolSpec("writer", "writes", NoInput, NoInput, write_refused)
    ctx: Any = SimpleNamespace(
        request=SimpleNamespace(scope={"user": SondeUser(ADMIN)}), meta=None
    )  # no progress asked
    result = await call_tool(hub, spec, ctx, {})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "locked by another process" in text
    assert "nothing was changed" in text
    await hub.audit_queue.flush()
    rows = await hub.store.read(
        lambda db: list(db.query("SELECT outcome FROM audit WHERE action = 'mcp.call.writer'"))
    )
    assert rows == [{"outcome": "database_unavailable"}]
