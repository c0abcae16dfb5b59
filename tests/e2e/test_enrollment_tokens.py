"""End to end, an enrollment token's whole life: listed, revoked, refused when revoked.

A real `sonde hub` (no agents running: enrollment is all these tests need), the
real `sonde hub token ...` commands on its data directory, the real `sonde
enroll`, and the REST routes with an admin and a member key.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlite_utils import Database

from sonde.hub import db as hub_db
from sonde.hub.enrollment_tokens import create_enrollment_token
from tests.e2e.harness import agent_env, audit_rows, listed, post_enroll, sonde_enroll
from tests.e2e.procs import SONDE, RunningHub, running_hub, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    with running_hub(tmp_path_factory.mktemp("tokens")) as running:
        yield running


def tokens_by_id(hub: RunningHub) -> dict[str, dict[str, Any]]:
    """GET /api/v1/enrollment-tokens, by token id."""
    return listed(hub, "/api/v1/enrollment-tokens", "tokens", "id")


def new_token(hub: RunningHub, name: str) -> tuple[str, str]:
    """The id and secret of a fresh token reserved for ``name``, from POST /api/v1/enrollment-tokens."""
    with hub.client() as http:
        answer = http.post("/api/v1/enrollment-tokens", json={"name": name})
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]["id"], answer.json()["secret"]


def audited(hub: RunningHub, action: str, target: str) -> list[tuple[str, dict[str, Any]]]:
    """The outcome and detail of each audit row of ``action`` on ``target``."""
    rows = audit_rows(hub, action)
    return [(row["outcome"], json.loads(row["detail"] or "{}")) for row in rows if row["target"] == target]


def test_a_token_revoked_from_the_cli_enrolls_nothing_and_says_why(hub: RunningHub, tmp_path: Path) -> None:
    secret = hub.token("--name", "tok-revoked")
    listed = hub.cli("hub", "token", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    token_id = next(t["id"] for t in json.loads(listed.stdout) if t["name"] == "tok-revoked")
    revoked = hub.cli("hub", "token", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    assert token_id not in {t["id"] for t in json.loads(hub.cli("hub", "token", "list", "--json").stdout)}

    home = tmp_path / "home-tok-revoked"
    done = sonde_enroll(hub.url, secret, "tok-revoked", agent_env(home))
    assert done.returncode == 1
    assert "sonde enroll: enrollment token was revoked at " in done.stderr
    assert "ask an admin for a new one" in done.stderr
    assert not (home / ".sonde").exists()
    answer = post_enroll(hub, secret, "tok-revoked")
    assert answer.status_code == 401  # as a used or expired token is refused
    assert answer.json()["error"]["code"] == "token_revoked"
    assert answer.json()["error"]["message"].startswith("enrollment token was revoked at ")

    assert tokens_by_id(hub)[token_id]["state"] == "revoked"  # kept, for the audit trail to name
    assert audited(hub, "cli.token.revoke", token_id) == [("ok", {"name": "tok-revoked"})]
    refusal = ("denied", {"code": "token_revoked"})
    wait_until(lambda: audited(hub, "agent.enroll", "tok-revoked") == [refusal, refusal])


def test_only_an_admin_revokes_a_token_over_rest(hub: RunningHub) -> None:
    token_id, secret = new_token(hub, "tok-rest")
    with hub.client() as admin:
        created = admin.post("/api/v1/api-keys", json={"name": "member", "role": "member"})
        assert created.status_code == 201, created.text
        with hub.client(created.json()["secret"]) as member:
            refused = member.delete(f"/api/v1/enrollment-tokens/{token_id}")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
        assert tokens_by_id(hub)[token_id]["state"] == "active"

        done = admin.delete(f"/api/v1/enrollment-tokens/{token_id}")
        assert done.status_code == 200, done.text
        assert done.json() == {"revoked": token_id}
        shown = tokens_by_id(hub)[token_id]
        assert shown["state"] == "revoked"
        assert shown["revoked_at"] is not None
        assert post_enroll(hub, secret, "tok-rest").json()["error"]["code"] == "token_revoked"

        used_id, used_secret = new_token(hub, "tok-used")
        assert post_enroll(hub, used_secret, "tok-used").status_code == 201
        assert tokens_by_id(hub)[used_id]["state"] == "used"
        for target, says in [
            (token_id, f"enrollment token {token_id} was already revoked at "),
            (used_id, f"enrollment token {used_id} was already used at "),
            ("no-such-id", "no enrollment token has id 'no-such-id'"),
            ("z" * 65, "no enrollment token has an id that long (65 characters)"),
        ]:
            again = admin.delete(f"/api/v1/enrollment-tokens/{target}")
            assert again.status_code == 404, again.text
            assert set(again.json()["error"]) == {"code", "message"}
            assert again.json()["error"]["code"] == "not_found"
            assert again.json()["error"]["message"].startswith(says)
        spec = admin.get("/api/v1/openapi.json").json()
    assert "delete" in spec["paths"]["/api/v1/enrollment-tokens/{id}"]
    wait_until(lambda: audited(hub, "rest.token.revoke", "no-such-id") == [("not_found", {"state": None})])
    assert audited(hub, "rest.token.revoke", token_id) == [
        ("ok", {"name": "tok-rest"}),
        ("not_found", {"state": "revoked"}),
    ]
    assert audited(hub, "rest.token.revoke", used_id) == [("not_found", {"state": "used"})]


@pytest.mark.parametrize("ttl", ["900", True])
def test_a_token_lifetime_must_be_a_json_number(hub: RunningHub, ttl: object) -> None:
    with hub.client() as http:
        refused = http.post("/api/v1/enrollment-tokens", json={"ttlS": ttl})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == {
            "code": "invalid_body",
            "message": "ttlS: Input should be a valid number",
        }
        made = http.post("/api/v1/enrollment-tokens", json={"ttlS": 900})
    assert made.status_code == 201, made.text
    token = made.json()["token"]
    assert token["expires_at"] - token["created_at"] == 900


def test_a_hub_database_from_before_revocation_upgrades_on_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "hubdata"  # where running_hub points the hub
    data_dir.mkdir(mode=0o700)
    old = Database(sqlite3.connect(data_dir / "sonde.db", isolation_level=None))
    hub_db.MIGRATIONS[0](old)  # the schema version 1 left, which had no revoked_at
    old.execute("PRAGMA user_version = 1")
    leaked, leaked_secret = create_enrollment_token(old, name="old-leaked")
    _, kept_secret = create_enrollment_token(old, name="old-kept")
    old.close()
    with running_hub(tmp_path) as hub, hub.client() as http:
        assert tokens_by_id(hub)[leaked.id]["state"] == "active"
        assert http.delete(f"/api/v1/enrollment-tokens/{leaked.id}").status_code == 200
        assert post_enroll(hub, leaked_secret, "old-leaked").json()["error"]["code"] == "token_revoked"
        assert post_enroll(hub, kept_secret, "old-kept").status_code == 201


def test_rest_revokes_a_token_by_its_own_text_and_audits_only_its_id(hub: RunningHub) -> None:
    token_id, secret = new_token(hub, "web-text")
    with hub.client() as admin:
        done = admin.delete(f"/api/v1/enrollment-tokens/{secret}")
        assert done.status_code == 200, done.text
        assert done.json() == {"revoked": token_id}
        again = admin.delete(f"/api/v1/enrollment-tokens/{secret}")
        assert again.status_code == 404
        assert f"enrollment token {token_id} was already revoked at " in again.json()["error"]["message"]
    assert tokens_by_id(hub)[token_id]["state"] == "revoked"

    def outcomes() -> list[str]:
        return [r["outcome"] for r in audit_rows(hub, "rest.token.revoke") if r["target"] == token_id]

    wait_until(lambda: len(outcomes()) == 2)  # the hub commits its audit rows in batches
    assert outcomes() == ["ok", "not_found"]
    assert not any(secret in json.dumps(r) for r in audit_rows(hub, "rest.token.revoke"))


def test_token_list_names_the_agent_a_token_enrolled(hub: RunningHub) -> None:
    _, secret = new_token(hub, "tok-listed")
    enrolled = post_enroll(hub, secret, "tok-listed")
    assert enrolled.status_code == 201, enrolled.text
    agent_id = enrolled.json()["agentId"]
    table = hub.cli("hub", "token", "list", "--all")
    assert table.returncode == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if line.split()[1] == "tok-listed"]
    assert row.split()[2] == "used"
    assert row.endswith(f" by agent tok-listed ({agent_id})")


def test_a_reserved_token_without_its_name_says_the_name_to_enroll_with(
    hub: RunningHub, tmp_path: Path
) -> None:
    """Before: "enrollment token is reserved for the agent named 'db-7', not 'HOSTNAME'", with no
    word that `sonde enroll` took the hostname for want of --name."""
    _, secret = new_token(hub, "db-7")
    env = {**agent_env(tmp_path / "home"), "SONDE_ENROLL_TOKEN": secret}
    done = subprocess.run(
        [*SONDE, "enroll", "--hub", hub.url], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode != 0
    assert "enrollment token is reserved for the agent named 'db-7', not " in done.stderr
    assert "enroll with `--name db-7` (without it, the machine's hostname is the name)" in done.stderr
    assert secret not in done.stderr
