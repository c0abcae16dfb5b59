"""`sonde hub backup`: a copy of a running hub's database that a stopped hub can be restored
from (its agents reconnect: the same signing key), never replacing a file, private, on the
audit log; and no copy at all, with nothing left behind, when it cannot be made."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

from tests.e2e.harness import audit_rows, file_rows, status_of
from tests.e2e.procs import SONDE, URL_LINE, enroll_agent, running_hub, spawn, wait_until
from tests.subprocs import run_any


def test_a_running_hubs_copy_restores_the_hub_its_agents_know(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "web-1")
        agent.start()
        try:
            wait_until(lambda: status_of(hub, "web-1") == "online")
            copy = tmp_path / "backups" / "nightly.db"
            copy.parent.mkdir()
            made = hub.cli("hub", "backup", str(copy))  # the hub and its agent go on meanwhile
            assert made.returncode == 0, made.stderr
            assert f"to {copy} in " in made.stderr
            assert "1 agent, 1 API key, " in made.stderr
            assert "its audit chain verifies" in made.stderr
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600  # the hub's signing key is in it
            assert os.listdir(copy.parent) == ["nightly.db"]  # one file: no -wal, no partial left
            assert file_rows(copy, "SELECT name FROM agents") == [("web-1",)]
            wait_until(lambda: [r["target"] for r in audit_rows(hub, "cli.hub.backup")] == [str(copy)])

            again = hub.cli("hub", "backup", str(copy))
            assert again.returncode == 1  # refused, not a usage error
            assert f"{copy} exists: a backup never replaces a file" in again.stderr
            into_dir = hub.cli("hub", "backup", str(copy.parent))  # named for the moment
            assert into_dir.returncode == 0, into_dir.stderr
            assert len(list(copy.parent.glob("sonde-*Z.db"))) == 1

            port = hub.url.rsplit(":", 1)[1]
            hub.proc.stop(signal.SIGKILL)  # lose the database, as a disk would
            for name in ("sonde.db", "sonde.db-wal", "sonde.db-shm"):
                (hub.data_dir / name).unlink(missing_ok=True)
            (hub.data_dir / "sonde.db").write_bytes(copy.read_bytes())
            restored = spawn(["hub", "--bind", f"127.0.0.1:{port}", "--data-dir", str(hub.data_dir)], hub.env)
            try:
                assert restored.wait_for(URL_LINE).group(1) == hub.url
                wait_until(lambda: status_of(hub, "web-1") == "online", timeout=60)  # it trusts this hub
                verified = hub.cli("hub", "audit", "verify")
                assert verified.returncode == 0, verified.stderr
            finally:
                assert restored.stop() == 0
        finally:
            agent.stop()


def test_no_copy_without_a_place_for_it_or_a_database_to_copy(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        missing = hub.cli("hub", "backup", str(tmp_path / "nowhere" / "copy.db"))
        assert missing.returncode == 2
        assert f"{tmp_path / 'nowhere'} is not a directory: make it first" in missing.stderr
    empty = tmp_path / "not-a-hub"
    empty.mkdir()
    done = run_any([*SONDE, "hub", "backup", str(tmp_path / "copy.db"), "--data-dir", str(empty)], timeout=30)
    assert done.returncode == 1
    assert "no hub database at" in done.stderr
    assert not (tmp_path / "copy.db").exists()


def test_a_destination_with_a_trailing_slash_is_a_directory_made_when_missing(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        made_dir = tmp_path / "backups" / "nightly"  # neither exists yet
        first = hub.cli("hub", "backup", f"{made_dir}/")
        assert first.returncode == 0, first.stderr
        assert made_dir.is_dir()  # not a file named "nightly"
        assert f"created the directory {made_dir}" in first.stderr
        for place in (made_dir, made_dir.parent):
            assert stat.S_IMODE(place.stat().st_mode) == 0o700
        second = hub.cli("hub", "backup", f"{made_dir}/")  # the next night's copy goes beside it
        assert second.returncode == 0, second.stderr
        assert "created the directory" not in second.stderr
        assert len(list(made_dir.glob("sonde-*Z*.db"))) == 2
        weekly = made_dir.parent / "weekly"  # its parent there: README's `/var/backups/sonde/`
        assert hub.cli("hub", "backup", f"{weekly}/").returncode == 0
        assert len(list(weekly.glob("sonde-*Z.db"))) == 1

        a_file = tmp_path / "backups" / "plain.db"
        a_file.write_bytes(b"")
        refused = hub.cli("hub", "backup", f"{a_file}/")
        assert refused.returncode == 1
        assert f"{a_file} is a file, not a directory" in refused.stderr
