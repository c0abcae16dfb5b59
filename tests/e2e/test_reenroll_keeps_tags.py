"""Enrolling a name again (with a token an admin made for that name) keeps the agent's tags,
and the audit row of that enrollment names the identity it replaced and the tags it kept.

Regression: the new identity had no tags, so a key scoped to `#prod` no longer reached the
machine, and the row said only `{"agentId": "<new>"}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import agent_env, audit_rows, sonde_enroll
from tests.e2e.procs import RunningHub, enroll_agent, running_hub

pytestmark = pytest.mark.e2e


def agents_listed(hub: RunningHub) -> dict[str, dict[str, Any]]:
    """`sonde hub agent list --json`, by name."""
    listed = hub.cli("hub", "agent", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {agent["name"]: agent for agent in json.loads(listed.stdout)}


def names_seen_by(hub: RunningHub, key: str) -> set[str]:
    with hub.client(key) as http:
        answer = http.get("/api/v1/agents")
    assert answer.status_code == 200, answer.text
    return {agent["name"] for agent in answer.json()["agents"]}


def test_enrolling_a_name_again_keeps_its_tags_and_names_the_identity_replaced(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        enroll_agent(hub, tmp_path, "a2")
        old_id = agents_listed(hub)["a2"]["id"]
        tagged = hub.cli("hub", "agent", "tag", "a2", "prod", "Web")
        assert tagged.returncode == 0, tagged.stderr
        created = hub.cli("hub", "key", "create", "--name", "prod-team", "--agents", "#prod")
        assert created.returncode == 0, created.stderr
        prod_key = created.stdout.strip()

        made = hub.cli("hub", "token", "create", "--name", "a2")
        assert made.returncode == 0, made.stderr
        assert (
            f"enrolling with it replaces agent {old_id}; the new identity keeps its tags (prod, Web)"
            in made.stderr
        )
        token = made.stdout.strip()
        done = sonde_enroll(hub.url, token, "a2", agent_env(tmp_path / "fresh-home-a2"))
        assert done.returncode == 0, done.stderr

        again = agents_listed(hub)["a2"]
        assert again["id"] != old_id
        assert again["tags"] == ["prod", "Web"]
        assert names_seen_by(hub, prod_key) == {"a2"}  # the running hub's view, at once
        rows = [(r["target"], r["outcome"], json.loads(r["detail"])) for r in audit_rows(hub, "agent.enroll")]
        assert rows == [
            ("a2", "ok", {"agentId": old_id}),
            ("a2", "ok", {"agentId": again["id"], "replaced": old_id, "tagsKept": ["prod", "Web"]}),
        ]
