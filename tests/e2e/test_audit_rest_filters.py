"""A real hub's ``GET /api/v1/audit`` takes its filters as `sonde hub audit list` does: ``since``
and ``until`` a duration ago or an ISO 8601 time (a plain number still unix seconds), ``key`` an
API key's id or name; and it answers as the CLI's ``--json`` does for the same words.

Before, ``since=2h`` was refused ("Input should be a valid number") and ``key=ops`` (a name)
matched nothing, silently."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from sonde.hub.audit import AuditEntry, append_many
from sonde.hub.db import open_database
from tests.e2e.procs import running_hub

pytestmark = pytest.mark.e2e

DAY_S = 86400.0
SEEDED_AT = time.time() - 3 * DAY_S  # before the hub's own rows, all made within the test


def seeded_log(data_dir: Path) -> None:
    db = open_database(data_dir / "sonde.db")
    try:
        append_many(
            db, [AuditEntry(actor="cli", action="cli.seeded", target="web-1", outcome="ok", ts=SEEDED_AT)]
        )
    finally:
        db.close()


def iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def actions(http: httpx.Client, **query: str) -> list[str]:
    answer = http.get("/api/v1/audit", params=query)
    assert answer.status_code == 200, (query, answer.text)
    return [entry["action"] for entry in answer.json()["entries"]]


def refusal(http: httpx.Client, **query: str) -> str:
    answer = http.get("/api/v1/audit", params=query)
    assert answer.status_code == 400, (query, answer.text)
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == "invalid_query"
    return str(error["message"])


def test_rest_takes_durations_times_and_key_names_as_the_cli_does(tmp_path: Path) -> None:
    seeded_log(tmp_path / "hubdata")
    with running_hub(tmp_path) as hub:
        with hub.client() as http:
            ops = http.post("/api/v1/api-keys", json={"name": "ops", "role": "admin"}).json()
            twins = [
                http.post("/api/v1/api-keys", json={"name": "twin"}).json()["key"]["id"] for _ in range(2)
            ]
        with hub.client(ops["secret"]) as as_ops:
            assert as_ops.post("/api/v1/enrollment-tokens", json={}).status_code == 201
        with hub.client() as http:
            assert actions(http, key="ops") == ["rest.token.create"]  # by its name, as by its id
            assert actions(http, key=ops["key"]["id"]) == ["rest.token.create"]
            assert "cli.seeded" not in actions(http, since="2h")
            assert actions(http, until="1d") == ["cli.seeded"]
            assert actions(http, since=iso(SEEDED_AT - 60), until=iso(SEEDED_AT + 60)) == ["cli.seeded"]
            assert actions(http, since=f"{SEEDED_AT - 60:.0f}", until=f"{SEEDED_AT + 60:.0f}") == [
                "cli.seeded"
            ]
            assert refusal(http, key="twin") == (
                f"key: 2 keys are named 'twin': give one's id ({twins[0]}, {twins[1]}); "
                "GET /api/v1/api-keys lists them"
            )
            assert refusal(http, since="5m", until="5m").endswith("the range holds no time")
            twice = http.get("/api/v1/audit", params=[("since", "2h"), ("since", "1d")])
            assert twice.status_code == 400, twice.text
            assert twice.json()["error"]["message"] == "'since' is given more than once: give it once"
            said = refusal(http, since="yesterday")
            assert "unix seconds (1767225600), a duration ago (90s, 15m, 2h, 7d) or a time (2026-" in said
            from_rest = http.get("/api/v1/audit", params={"key": "ops", "since": "2h"}).json()
        listed = hub.cli("hub", "audit", "list", "--key", "ops", "--since", "2h", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == from_rest
