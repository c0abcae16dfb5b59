"""`sonde hub agent tag NAME TAG...`: an agent's tags from the CLI, as `PUT /api/v1/agents/{id}/tags`
sets them (normalized, refused with the same rule), on the audit log as `cli.agent.tags` with the
facts REST's `rest.agent.tags` row has; a name no agent has is refused (1), one no agent could have
is a usage error (2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sonde.hub.agent_records import AgentRecord, find_agent_by_name, insert_agent
from sonde.hub.audit import verify_audit
from sonde.hub.db import open_database
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any

UNKNOWN_KEY = "sonde_" + "Q" * 43


def hub_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_any(
        [*SONDE, "hub", *args, "--data-dir", str(data_dir)], env=base_env(data_dir.parent / "home")
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A hub's store with one agent, web-1, tagged 'prod'."""
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        insert_agent(
            db, AgentRecord(id="agent-1", name="web-1", public_key="k", enrolled_at=1.0, tags=["prod"])
        )
    finally:
        db.close()
    return tmp_path / "data"


def stored_tags(data_dir: Path, name: str = "web-1") -> list[str]:
    db = open_database(data_dir / "sonde.db")
    try:
        record = find_agent_by_name(db, name)
    finally:
        db.close()
    assert record is not None
    return record.tags


def tag_rows(data_dir: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    db = open_database(data_dir / "sonde.db")
    try:
        assert verify_audit(db).ok
        rows = db.execute("SELECT actor, target, outcome, detail FROM audit WHERE action = 'cli.agent.tags'")
        return [(actor, target, outcome, json.loads(detail)) for actor, target, outcome, detail in rows]
    finally:
        db.close()


def test_tags_are_set_replacing_normalized_and_audited_as_rest_does(data_dir: Path) -> None:
    done = hub_cli(data_dir, "agent", "tag", "web-1", "#web", " Canary ", "WEB", "eu:west")
    assert done.returncode == 0, done.stderr
    assert stored_tags(data_dir) == ["web", "Canary", "eu:west"]  # '#' and blanks dropped, one 'web'
    assert "tags of agent web-1: web, Canary, eu:west (were: prod)" in done.stderr
    assert done.stdout == ""
    assert tag_rows(data_dir) == [("cli", "web-1", "ok", {"tags": ["web", "Canary", "eu:west"]})]
    by_id = hub_cli(data_dir, "agent", "tag", "agent-1", "prod")  # by id too, as REST
    assert by_id.returncode == 0, by_id.stderr
    assert stored_tags(data_dir) == ["prod"]


def test_tags_are_added_and_removed_keeping_the_others(data_dir: Path) -> None:
    added = hub_cli(data_dir, "agent", "tag", "web-1", "--add", "web", "--add", "#canary", "--add", "PROD")
    assert added.returncode == 0, added.stderr
    assert stored_tags(data_dir) == ["prod", "web", "canary"]  # 'PROD' is the tag it had
    removed = hub_cli(data_dir, "agent", "tag", "web-1", "--remove", "CANARY", "--remove", "#prod")
    assert removed.returncode == 0, removed.stderr
    assert stored_tags(data_dir) == ["web"]
    cleared = hub_cli(data_dir, "agent", "tag", "web-1", "--clear")
    assert cleared.returncode == 0, cleared.stderr
    assert stored_tags(data_dir) == []
    assert "tags of agent web-1: none (were: web)" in cleared.stderr
    assert [row[3] for row in tag_rows(data_dir)] == [
        {"tags": ["prod", "web", "canary"]},
        {"tags": ["web"]},
        {"tags": []},
    ]


def test_removing_a_tag_the_agent_lacks_changes_nothing_and_exits_1(data_dir: Path) -> None:
    done = hub_cli(data_dir, "agent", "tag", "web-1", "--remove", "staging", "--add", "web")
    assert done.returncode == 1, done.stderr
    assert "agent web-1 has no tag 'staging' (its tags: prod); nothing changed" in done.stderr
    assert stored_tags(data_dir) == ["prod"]
    assert tag_rows(data_dir) == []


def test_tags_as_they_are_change_nothing_and_say_so(data_dir: Path) -> None:
    done = hub_cli(data_dir, "agent", "tag", "web-1", "#prod")
    assert done.returncode == 0, done.stderr
    assert "agent web-1 already has the tags prod; nothing changed" in done.stderr
    assert tag_rows(data_dir) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["web-1", "bad tag"], "invalid tag 'bad tag': a tag starts with a letter or digit"),
        (["web-1", "-x"], "invalid tag '-x'"),
        (["web-1", UNKNOWN_KEY + "!"], "invalid tag 'sonde_[hidden]!'"),
        (["web-1", "--add", "a/b"], "invalid tag 'a/b'"),
        (["web-1", *(f"t{i}" for i in range(65))], "an agent can have at most 64 tags"),
        (["web-1"], "give the tags to set (TAG...), or --add, --remove or --clear"),
        (["web-1", "a", "--add", "b"], "either the tags to set (TAG...) or --add/--remove/--clear"),
        (
            ["web-1", "--clear", "--remove", "prod"],
            "either the tags to set (TAG...) or --add/--remove/--clear",
        ),
        (["bad name", "prod"], "invalid agent name or id 'bad name'"),
    ],
)
def test_a_bad_tag_or_name_is_a_usage_error_and_changes_nothing(
    data_dir: Path, args: list[str], says: str
) -> None:
    done = hub_cli(data_dir, "agent", "tag", *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert UNKNOWN_KEY not in done.stderr
    assert "Traceback" not in done.stderr
    assert stored_tags(data_dir) == ["prod"]
    assert tag_rows(data_dir) == []


def test_an_unknown_agent_is_refused_with_exit_1(data_dir: Path) -> None:
    done = hub_cli(data_dir, "agent", "tag", "web-2", "prod")
    assert done.returncode == 1, done.stderr
    assert "no agent named 'web-2' (see `sonde hub agent list`)" in done.stderr
    assert tag_rows(data_dir) == []


def test_tag_help_says_what_each_form_does() -> None:
    done = run_any([*SONDE, "hub", "agent", "tag", "--help"], env=base_env(Path("/nonexistent")))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "Usage: sonde hub agent tag" in text
    for flag in ("--add", "--remove", "--clear", "--data-dir"):
        assert flag in text
    assert "a running hub uses the new tags within a few seconds" in text.lower()
