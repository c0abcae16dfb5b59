"""Tags set from the CLI reach a running hub (`sonde.hub.tag_changes`): the real `sonde hub agent
tag` changes the database file beside an in-process hub, whose view of the agent (what key
policies and tag filters read) takes the new tags at its next look; a change it already has,
or one of an agent it no longer holds, is left alone."""

from __future__ import annotations

import sys
from pathlib import Path

import trio
from sqlite_utils import Database

from sonde.hub.agent_records import insert_agent
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub, open_hub
from sonde.hub.db import open_database
from sonde.hub.tag_changes import audit_seq_before, notice_tag_changes
from tests.e2e.procs import base_env
from tests.hub.test_agent_records import make_agent


async def sonde_hub_cli(data_dir: Path, *args: str) -> None:
    argv = [sys.executable, "-m", "sonde", "hub", *args, "--data-dir", str(data_dir)]
    done = await trio.run_process(argv, env=base_env(data_dir / "home"), capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()


async def tags_become(hub: Hub, agent_id: str, tags: list[str], within_s: float = 15.0) -> None:
    """Wait for the hub's own watcher (`watch_tag_changes`, started by `open_hub`) to take them."""
    with trio.fail_after(within_s):
        while True:
            if hub.fleet.records[agent_id].tags == tags:
                return
            await trio.sleep(0.05)


async def test_tags_set_from_the_cli_reach_the_hubs_view(tmp_path: Path) -> None:
    db = open_database(tmp_path / "sonde.db")
    try:
        web, other = make_agent("web-1", tags=["prod"]), make_agent("db-1", tags=["db"])
        insert_agent(db, web)
        insert_agent(db, other)
    finally:
        db.close()
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        start = await hub.store.read(audit_seq_before, float("inf"))
        await sonde_hub_cli(tmp_path, "agent", "tag", "web-1", "--add", "canary")
        await tags_become(hub, web.id, ["prod", "canary"])  # the file changed, and the hub saw it
        assert hub.fleet.records[other.id].tags == ["db"]
        changed, after = await notice_tag_changes(hub, start)
        assert (changed, after > start) == ([], True)  # seen again: nothing to change
        assert await notice_tag_changes(hub, after) == ([], after)  # nothing new since

        await sonde_hub_cli(tmp_path, "agent", "remove", "db-1")
        hub.fleet.forget(other.id, "removed")  # as `cut_off_removed_agents` does
        await sonde_hub_cli(tmp_path, "agent", "tag", "web-1", "web")
        await tags_become(hub, web.id, ["web"])


def last_audit_seq(db: Database) -> int:
    return int(db.execute("SELECT max(seq) FROM audit").fetchone()[0] or 0)


async def test_a_look_goes_on_from_the_last_audit_row_of_any_action(tmp_path: Path) -> None:
    """Regression (a soak): with nobody tagging from the CLI, each look went on from where the
    hub started, so every 2 s it scanned every audit row written since: 72 ms at 380,000 rows,
    growing without bound until a restart."""
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        start = await hub.read_audit(last_audit_seq)
        for n in range(5):
            await hub.audit("k", "mcp.call", f"agent-{n}", "ok")
        last = await hub.read_audit(last_audit_seq)
        assert last >= start + 5
        assert await notice_tag_changes(hub, start) == ([], last)
