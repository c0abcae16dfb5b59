"""A real hub, a real agent, and the real `sonde hub agent tag` and `sonde hub audit list` beside
them: the CLI's tags are the ones REST would set, recorded alike; the audit log reads the same from
the CLI as from `GET /api/v1/audit`, while the hub goes on writing it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import audit_rows, status_of
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until

pytestmark = pytest.mark.e2e


def rest_tags(hub: RunningHub, name: str, *, tag: str | None = None) -> list[list[str]]:
    with hub.client() as http:
        agents = http.get("/api/v1/agents", params={"tag": tag} if tag else None).json()["agents"]
    return [a["tags"] for a in agents if a["name"] == name]


def rows(hub: RunningHub, action: str) -> list[tuple[str | None, str, dict[str, Any]]]:
    return [(r["target"], r["outcome"], json.loads(r["detail"] or "{}")) for r in audit_rows(hub, action)]


def test_the_cli_and_rest_set_tags_alike_and_the_audit_reads_alike(tmp_path: Any) -> None:
    with running_hub(tmp_path) as hub:
        enroll_agent(hub, tmp_path, "web-1")
        with hub.client() as http:
            assert http.put("/api/v1/agents/web-1/tags", json={"tags": ["#prod", "Web"]}).status_code == 200
        done = hub.cli("hub", "agent", "tag", "web-1", "--add", "canary", "--remove", "web")
        assert done.returncode == 0, done.stderr
        assert "tags of agent web-1: prod, canary (were: prod, Web)" in done.stderr
        wait_until(lambda: len(rows(hub, "rest.agent.tags")) == 1)
        assert rows(hub, "rest.agent.tags") == [("web-1", "ok", {"tags": ["prod", "Web"]})]
        assert rows(hub, "cli.agent.tags") == [("web-1", "ok", {"tags": ["prod", "canary"]})]

        listed = hub.cli(
            "hub", "audit", "list", "--agent", "web-1", "--action", "cli.", "--since", "1h", "--json"
        )
        assert listed.returncode == 0, listed.stderr
        from_cli = json.loads(listed.stdout)
        with hub.client() as http:
            answer = http.get("/api/v1/audit", params={"agent": "web-1", "action": "cli."})
        assert answer.status_code == 200, answer.text
        assert from_cli == answer.json()
        assert [entry["action"] for entry in from_cli["entries"]] == ["cli.agent.tags"]
        table = hub.cli("hub", "audit", "list", "--key", "cli", "--limit", "1")
        assert table.returncode == 0, table.stderr
        assert "cli.agent.tags" in table.stdout.splitlines()[1]


def test_a_running_hub_uses_the_tags_set_from_the_cli(tmp_path: Any) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "web-1")
        agent.start()
        try:
            wait_until(lambda: status_of(hub, "web-1") == "online")  # its record is the hub's now
            done = hub.cli("hub", "agent", "tag", "web-1", "prod")
            assert done.returncode == 0, done.stderr
            wait_until(lambda: rest_tags(hub, "web-1", tag="prod") == [["prod"]], timeout=10)
        finally:
            agent.stop()
