"""End to end: another process holding the hub's database write lock makes a REST write a 503.

The answer says what happened and that nothing changed, with Retry-After; the log
has a warning, not a traceback; once the lock is released the same write works.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.procs import RunningHub, running_hub, wait_until

pytestmark = pytest.mark.e2e


@contextmanager
def write_locked(db_path: Path) -> Iterator[None]:
    """Hold ``db_path``'s write lock, as a backup or an `sqlite3` shell in a transaction does."""
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def token_count(hub: RunningHub) -> int:
    with hub.client() as http:
        answer = http.get("/api/v1/enrollment-tokens")
    assert answer.status_code == 200, answer.text
    return len(answer.json()["tokens"])


def test_a_write_while_another_process_holds_the_lock_is_a_503_saying_so(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        before = token_count(hub)
        with write_locked(hub.data_dir / "sonde.db"), hub.client() as http:
            http.timeout = 30
            answer = http.post("/api/v1/enrollment-tokens", json={"name": "while-locked"})
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "database_unavailable"
            assert "locked by another process" in error["message"]
            assert "nothing was changed" in error["message"]
            assert int(answer.headers["Retry-After"]) > 0
        assert token_count(hub) == before
        log = hub.proc.output
        assert "Traceback" not in log
        assert "database is locked" in log
        assert "REST handler failed" not in log

        def created() -> bool:  # the audit log retries its own write once a second meanwhile
            with hub.client() as http:
                return http.post("/api/v1/enrollment-tokens", json={"name": "after"}).status_code == 201

        started = time.monotonic()
        wait_until(created, timeout=15)
        assert time.monotonic() - started < 15
        assert token_count(hub) == before + 1
