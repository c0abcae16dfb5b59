"""A real hub, real agents, the real `sonde hub ...` commands beside it: `sonde hub agent remove`
cuts a connected agent off as `DELETE /api/v1/agents/{id}` does; a key's secret pasted where its
id was due is used by REST too and never shown nor recorded; the CLI and REST record the same facts
for the same action, and refuse the same globs."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import audit_rows
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until

pytestmark = pytest.mark.e2e

UNKNOWN_KEY = "sonde_" + "Q" * 43  # the shape of a key's secret, of no key


def agent_names(hub: RunningHub) -> set[str]:
    with hub.client() as http:
        return {a["name"] for a in http.get("/api/v1/agents").json()["agents"]}


def rows(hub: RunningHub, action: str) -> list[tuple[str | None, str, dict[str, Any]]]:
    return [(r["target"], r["outcome"], json.loads(r["detail"] or "{}")) for r in audit_rows(hub, action)]


def database_bytes(data_dir: Path) -> bytes:
    with sqlite3.connect(data_dir / "sonde.db") as db:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    db.close()
    return b"".join(p.read_bytes() for p in data_dir.iterdir() if p.name.startswith("sonde.db"))


def test_an_agent_removed_with_the_cli_is_cut_off_and_refused(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        gone, kept = (enroll_agent(hub, tmp_path, name) for name in ("gone", "kept"))
        procs = [gone.start(), kept.start()]
        try:
            wait_until(lambda: agent_names(hub) == {"gone", "kept"})
            listed = hub.cli("hub", "agent", "list", "--json")
            assert listed.returncode == 0, listed.stderr
            ids = {a["name"]: a["id"] for a in json.loads(listed.stdout)}
            assert set(ids) == {"gone", "kept"}
            table = hub.cli("hub", "agent", "list")
            assert re.search(rf"^gone +{ids['gone']} +online ", table.stdout, re.MULTILINE), table.stdout

            removed = hub.cli("hub", "agent", "remove", "gone")
            assert removed.returncode == 0, removed.stderr
            assert f"removed agent gone ({ids['gone']})" in removed.stderr
            hub.proc.wait_for(re.compile(r"agent gone offline: removed by an admin"), timeout=15)
            procs[0].wait_for(re.compile(r"disconnected from \S+: .*removed by an admin"))
            wait_until(lambda: procs[0].popen.poll() is not None, timeout=15)  # refused at its reconnect
            assert procs[0].popen.returncode == 3, procs[0].output
            procs[0].wait_for(re.compile(r"\(revoked: this agent was removed by an admin\)"))
            assert agent_names(hub) == {"kept"}
            assert procs[1].popen.poll() is None

            again = hub.cli("hub", "agent", "remove", ids["gone"])
            assert again.returncode == 1
            assert f"no agent named {ids['gone']!r}" in again.stderr
            with hub.client() as http:
                assert http.delete("/api/v1/agents/kept").status_code == 200
            # one row each, of one shape: the name, and the id in the detail
            wait_until(lambda: len(rows(hub, "rest.agent.remove")) == 1)
            assert rows(hub, "cli.agent.remove") == [("gone", "ok", {"agentId": ids["gone"]})]
            assert rows(hub, "rest.agent.remove") == [("kept", "ok", {"agentId": ids["kept"]})]
            assert json.loads(hub.cli("hub", "agent", "list", "--json").stdout) == []
        finally:
            for proc in procs:
                proc.stop()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with running_hub(tmp_path_factory.mktemp("admin")) as running:
        yield running


def new_key(hub: RunningHub, name: str) -> tuple[str, str]:
    with hub.client() as http:
        answer = http.post("/api/v1/api-keys", json={"name": name})
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]["id"], answer.json()["secret"]


def test_rest_revokes_a_key_by_its_secret_and_records_only_its_id(hub: RunningHub) -> None:
    key_id, secret = new_key(hub, "leaked-rest")
    with hub.client(secret) as leaked:
        assert leaked.get("/api/v1/agents").status_code == 200
    with hub.client() as admin:
        answer = admin.delete(f"/api/v1/api-keys/{secret}")
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"revoked": key_id}
        unknown = admin.delete(f"/api/v1/api-keys/{UNKNOWN_KEY}")
        assert unknown.status_code == 404
        assert "no API key has that secret" in unknown.text
        assert UNKNOWN_KEY not in unknown.text
        missing = admin.get(f"/api/v1/agents/{UNKNOWN_KEY}")
        assert missing.status_code == 404
        assert UNKNOWN_KEY not in missing.text
    with hub.client(secret) as leaked:
        assert leaked.get("/api/v1/agents").status_code == 401

    def revokes() -> list[Any]:  # not the refused ones of the module's other test
        return [r for r in rows(hub, "rest.api_key.revoke") if r[1] != "denied"]

    wait_until(lambda: len(revokes()) == 2)
    assert revokes() == [(key_id, "ok", {}), (None, "not_found", {})]
    with hub.client() as admin:
        served = admin.get("/api/v1/audit", params={"limit": 1000}).text
    assert secret not in served
    assert UNKNOWN_KEY not in served
    stored = database_bytes(hub.data_dir)
    assert secret.encode() not in stored
    assert UNKNOWN_KEY.encode() not in stored


def test_a_secret_in_a_refused_path_is_not_recorded(hub: RunningHub) -> None:
    _member_id, member = new_key(hub, "member-path")
    with hub.client(member) as http:
        assert http.delete(f"/api/v1/api-keys/{UNKNOWN_KEY}").status_code == 403
    with hub.client("sonde_not-a-key") as http:
        assert http.delete(f"/api/v1/api-keys/{UNKNOWN_KEY}").status_code == 401
    hidden = "/api/v1/api-keys/sonde_[hidden]"
    wait_until(lambda: any(r[0] == hidden for r in rows(hub, "rest.auth")))
    assert any(r[0] == hidden and r[1] == "denied" for r in rows(hub, "rest.api_key.revoke"))
    assert UNKNOWN_KEY.encode() not in database_bytes(hub.data_dir)


def test_the_cli_and_rest_record_the_same_facts_and_refuse_the_same_globs(hub: RunningHub) -> None:
    policy = {"agents": ["web-*"], "probes": ["system.*"]}
    with hub.client() as http:
        made = http.post("/api/v1/api-keys", json={"name": "rest-web", "policy": policy})
        assert made.status_code == 201, made.text
        token = http.post("/api/v1/enrollment-tokens", json={"ttlS": 7200})
        assert token.status_code == 201, token.text
        broken = http.post("/api/v1/api-keys", json={"name": "broken", "policy": {"agents": ["["]}})
        assert broken.status_code == 400
        assert "'[' has a '[' with no closing ']'" in broken.json()["error"]["message"]
    cli = hub.cli("hub", "key", "create", "--name", "cli-web", "--agents", "web-*", "--probes", "system.*")
    assert cli.returncode == 0, cli.stderr
    assert hub.cli("hub", "token", "create", "--ttl", "2h").returncode == 0
    refused = hub.cli("hub", "key", "create", "--name", "broken", "--agents", "[")
    assert refused.returncode == 2
    assert "'[' has a '[' with no closing ']'" in refused.stderr
    wait_until(lambda: rows(hub, "rest.token.create") != [])
    created = {r[2]["name"]: r[2] for r in rows(hub, "rest.api_key.create") + rows(hub, "cli.api_key.create")}
    assert created["rest-web"] == {"name": "rest-web", "role": "member", "policy": policy}
    assert created["cli-web"] == {"name": "cli-web", "role": "member", "policy": policy}
    assert [r[2] for r in rows(hub, "rest.token.create")] == [{"name": None, "ttl_s": 7200.0}]
    assert [r[2] for r in rows(hub, "cli.token.create")] == [{"name": None, "ttl_s": 7200.0}]
