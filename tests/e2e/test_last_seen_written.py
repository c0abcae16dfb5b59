"""A connected agent's last contact reaches the database every two heartbeats: a hub killed with
no clean stop leaves behind when each agent was last heard from, not when it connected; and
`sonde hub agent list` shows nobody online once no hub holds the data directory."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.e2e.harness import file_rows
from tests.e2e.procs import enroll_agent, running_hub, wait_until


def stored(db_path: Path) -> tuple[str, float] | None:
    """The one agent's (status, last_seen) as the database file holds them, read-only."""
    rows = file_rows(db_path, "SELECT status, last_seen FROM agents WHERE last_seen IS NOT NULL")
    return (rows[0][0], rows[0][1]) if rows else None


def test_a_killed_hub_leaves_each_agents_last_contact_not_its_connect_time(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:  # written every 2 s
        db_path = hub.data_dir / "sonde.db"
        agent = enroll_agent(hub, tmp_path, "web-1")
        agent.start()
        try:
            wait_until(lambda: (stored(db_path) or ("", 0.0))[0] == "online")
            first = stored(db_path)
            assert first is not None
            connected_at = first[1]
            # heartbeats arrive every second: within a few writes the file is past the connect time
            wait_until(lambda: (stored(db_path) or ("", 0.0))[1] >= connected_at + 3, timeout=20)
            listed = hub.cli("hub", "agent", "list")
            assert listed.returncode == 0, listed.stderr
            assert " online " in listed.stdout
            assert "no hub is running" not in listed.stderr
            hub.proc.stop(signal.SIGKILL)  # no `detach` runs: only the periodic write said anything
            after = stored(db_path)
            assert after is not None
            assert after == ("online", after[1])  # as a killed hub leaves it; the next start says offline
            assert after[1] >= connected_at + 3
            # the admin commands see that no hub holds the directory: nobody is online
            listed = hub.cli("hub", "agent", "list")
            assert listed.returncode == 0, listed.stderr
            assert " offline " in listed.stdout
            assert " online " not in listed.stdout
            assert f"no hub is running on {hub.data_dir}: none of its agents is online" in listed.stderr
        finally:
            agent.stop()
