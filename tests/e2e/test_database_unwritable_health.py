"""A hub whose database writes fail says so on GET /api/v1/health, whatever part of it wrote.

The real `sonde hub` is made unable to write by its file-size limit (RLIMIT_FSIZE, cut
from outside with prlimit, as tests/e2e/test_audit_unwritable.py does): past it every
write fails, as on a full disk. Before, a REST write refused with 503
``database_unavailable`` ("the hub cannot write its database (database or disk is
full)") left /health at 200 "ok" for as long as no MCP call made the audit queue fail.
"""

from __future__ import annotations

import re
import resource
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.procs import RunningHub, running_hub, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

TINY_FILES = 4096  # no file of the hub's may grow past this: every append to the WAL fails
DISK_WORDS = ("database or disk is full", "disk I/O error")


def degraded_for_a_while(http: httpx.Client, cause: str) -> dict[str, Any]:
    """GET /api/v1/health is 503 ``degraded``, its problem naming ``cause`` and the disk, and still
    so 2.5 s on (nothing else writes: the hub's own retries keep failing); its answer."""
    health = http.get("/api/v1/health")  # at once: what monitoring sees
    assert health.status_code == 503, health.text
    answer: dict[str, Any] = health.json()
    assert answer["status"] == "degraded"
    assert cause in answer["problem"], answer
    assert any(words in answer["problem"] for words in DISK_WORDS), answer
    time.sleep(2.5)
    assert http.get("/api/v1/health").status_code == 503
    return answer


def limit_file_size(hub: RunningHub, soft: int) -> None:
    resource.prlimit(hub.proc.popen.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))


def test_health_is_degraded_from_the_first_refused_write_until_a_write_works(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub, hub.client() as http:
        assert http.get("/api/v1/health").json()["status"] == "ok"
        limit_file_size(hub, TINY_FILES)
        try:
            refused = http.post("/api/v1/api-keys", json={"name": "ops"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "database_unavailable"  # as README says
            answer = degraded_for_a_while(http, "cannot write its database")
        finally:
            limit_file_size(hub, resource.RLIM_INFINITY)
        # room again: no call is needed for the hub to see it (an idle hub writes nothing)
        wait_until(lambda: http.get("/api/v1/health").status_code == 200, timeout=10)
        assert http.get("/api/v1/health").json() == {"status": "ok", "version": answer["version"]}
        assert http.post("/api/v1/api-keys", json={"name": "ops"}).status_code == 201
    log = hub.proc.output
    assert len(re.findall(r"ERROR +sonde\.hub\.store: the hub cannot write its database \(", log)) == 1, log
    assert len(re.findall(r"sonde\.hub\.store: the hub's database takes writes again", log)) == 1, log
    assert "Traceback" not in log
