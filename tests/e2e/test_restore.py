"""`sonde hub restore`: a backup put in place of a crashed hub's database, for real.

By hand, the old file's -wal left beside the restored copy was applied to it by SQLite: the hub
served a mix of the two (keys made after the backup alive, the audit chain cut, pages damaged).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
from pathlib import Path

import httpx

from tests.conftest import require
from tests.e2e.procs import SONDE, URL_LINE, base_env, enroll_agent, running_hub, spawn


def key_ids(hub_cli: object) -> dict[str, str]:
    """name -> id of every API key, read with `sonde hub key list --json`."""
    done = hub_cli("hub", "key", "list", "--json")  # type: ignore[operator]
    assert done.returncode == 0, done.stderr
    return {key["name"]: key["id"] for key in json.loads(done.stdout)}


def test_restore_puts_the_backup_in_place_and_says_what_it_takes_back(tmp_path: Path) -> None:
    backup = tmp_path / "backup.db"
    with running_hub(tmp_path) as hub:
        for name in ("kept", "revoked-later"):
            assert hub.cli("hub", "key", "create", "--name", name).returncode == 0
        enroll_agent(hub, tmp_path, "early")
        enroll_agent(hub, tmp_path, "steady")
        token = hub.token()  # made before the backup, revoked after it
        done = hub.cli("hub", "backup", str(backup))
        assert done.returncode == 0, done.stderr
        assert "sonde hub restore" in done.stderr  # the backup says how to restore it
        ids = key_ids(hub.cli)
        assert hub.cli("hub", "key", "revoke", ids["revoked-later"]).returncode == 0
        assert hub.cli("hub", "key", "create", "--name", "made-later").returncode == 0
        enroll_agent(hub, tmp_path, "late")
        assert hub.cli("hub", "agent", "remove", "early").returncode == 0
        assert hub.cli("hub", "agent", "tag", "steady", "prod").returncode == 0
        assert hub.cli("hub", "token", "revoke", token).returncode == 0

        refused = hub.cli("hub", "restore", str(backup))  # the hub still runs: nothing changes
        assert refused.returncode == 1
        assert "nothing was restored: a hub is serving the data directory" in refused.stderr
        assert not list(hub.data_dir.glob("sonde.db.replaced-*"))

        hub.proc.stop(signal.SIGKILL)  # a crash: its last changes are in sonde.db-wal
        assert (hub.data_dir / "sonde.db-wal").stat().st_size > 0

        restored = hub.cli("hub", "restore", str(backup))
        assert restored.returncode == 0, restored.stderr
        said = restored.stderr
        assert f"restored {hub.data_dir / 'sonde.db'} from {backup}: 2 agents, 3 API keys" in said, said
        assert "its audit chain verifies" in said
        assert re.search(
            rf"API keys revoked since the backup are active again: revoked-later \({ids['revoked-later']}\)",
            said,
        )
        assert re.search(r"API keys made since the backup are gone: made-later \(\w+\)", said), said
        assert re.search(r"agents removed since the backup are known again: early \(\w+\)", said), said
        assert re.search(r"agents enrolled since the backup .* must enroll again: late \(\w+\)", said), said
        assert re.search(r"enrollment tokens revoked or used since the backup can enroll again: \w+", said), (
            said
        )
        retagged = r"agents tagged otherwise since the backup have the backup's tags again .*: steady \(\w+\)"
        assert re.search(retagged, said), said
        replaced = sorted(p.name for p in hub.data_dir.glob("sonde.db.replaced-*"))
        assert [name.rsplit("Z", 1)[1] for name in replaced] == ["", "-shm", "-wal"], replaced
        assert f"the files it replaced are kept as {', '.join(replaced)}:" in said, said
        assert not (hub.data_dir / "sonde.db-wal").exists()  # the old file's is aside, not beside the copy

        assert set(key_ids(hub.cli)) == {"admin", "kept", "revoked-later"}
        verified = hub.cli("hub", "audit", "verify")
        assert verified.returncode == 0, verified.stderr
        with sqlite3.connect(hub.data_dir / "sonde.db") as db:
            rows = list(db.execute("SELECT action, detail FROM audit ORDER BY seq DESC LIMIT 1"))
        db.close()
        assert [row[0] for row in rows] == ["cli.hub.restore"]
        taken_back = json.loads(rows[0][1])["takenBack"]  # on the record too, not only said
        assert any(
            line.startswith("API keys revoked since the backup are active again") for line in taken_back
        )
        assert any("steady" in line for line in taken_back)

        # a hub serves it: the first admin key works, the agents are the backup's
        again = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir)], hub.env)
        try:
            url = again.wait_for(URL_LINE).group(1)
            answer = httpx.get(f"{url}/api/v1/agents", headers={"Authorization": f"Bearer {hub.admin_key}"})
            assert answer.status_code == 200
            assert [agent["name"] for agent in answer.json()["agents"]] == ["early", "steady"]
        finally:
            assert again.stop() == 0


def test_a_file_that_is_no_hub_database_changes_nothing(tmp_path: Path) -> None:
    not_a_backup = tmp_path / "notes.db"
    with sqlite3.connect(not_a_backup) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    with running_hub(tmp_path) as hub:
        data_dir = hub.data_dir
    before = (data_dir / "sonde.db").read_bytes()
    done = spawn(
        ["hub", "restore", str(not_a_backup), "--data-dir", str(data_dir)], base_env(tmp_path / "home")
    )
    assert done.popen.wait(30) == 1
    done.stop()
    assert "nothing was restored" in done.output, done.output
    assert f"{not_a_backup} holds no hub database: name a file `sonde hub backup` wrote" in done.output, (
        done.output
    )
    assert "--data-dir" not in done.output  # the backup is what is wrong, not the data directory
    assert (data_dir / "sonde.db").read_bytes() == before
    assert not list(data_dir.glob("sonde.db.replaced-*"))
    assert not list(data_dir.glob(".sonde.db.restoring-*"))
    nowhere = tmp_path / "not-yet"  # a directory the restore would have made: none is left behind
    refused = subprocess.run(
        [*SONDE, "hub", "restore", str(not_a_backup), "--data-dir", str(nowhere)],
        env=base_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1, refused.stderr
    assert not nowhere.exists()


def test_another_hubs_backup_is_said_to_be_one_and_given_to_the_directory_owner(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "giving the data directory to another user needs root")
    other_backup = tmp_path / "other.db"
    with running_hub(tmp_path / "other") as other:
        assert other.cli("hub", "backup", str(other_backup)).returncode == 0
        other_mark = (other.data_dir / "hub-key.pub").read_text()
    with running_hub(tmp_path / "this") as hub:
        data_dir = hub.data_dir
        env = hub.env
    os.chown(data_dir, 65534, 65534)  # the hub's own user, not root, runs it
    mark = (data_dir / "hub-key.pub").read_text()
    before = sorted(p.name for p in data_dir.iterdir())

    def restore(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*SONDE, "hub", "restore", str(other_backup), "--data-dir", str(data_dir), *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    refused = restore()  # a wrong file from a shared backup directory would take the fleet offline
    assert refused.returncode == 1, refused.stderr
    assert f"sonde hub: nothing was restored: {other_backup} is another hub's database" in refused.stderr
    assert "pass --other-hub" in refused.stderr
    assert sorted(p.name for p in data_dir.iterdir()) == before
    done = restore("--other-hub")
    assert done.returncode == 0, done.stderr
    assert "it is another hub's database than sonde.db.replaced-" in done.stderr, done.stderr
    assert "since the backup" not in done.stderr  # nothing of this hub's history to take back
    assert "this backup is another hub's (--other-hub): " in done.stderr
    assert (data_dir / "hub-key.pub").read_text() != mark
    assert (data_dir / "hub-key.pub").read_text() == other_mark  # the restored hub's, which it serves
    assert "sonde.db is given to uid 65534, its directory's owner" in done.stderr
    assert (data_dir / "sonde.db").stat().st_uid == 65534
    assert (data_dir / "hub-key.pub").stat().st_uid == 65534  # it was left root's (an operator-day review)


def test_another_hubs_backup_is_refused_without_hub_key_pub_too(tmp_path: Path) -> None:
    """The file the hub's warning once said to delete: the database's own key tells then."""
    other_backup = tmp_path / "other.db"
    with running_hub(tmp_path / "other") as other:
        assert other.cli("hub", "backup", str(other_backup)).returncode == 0
    with running_hub(tmp_path / "this") as hub:
        data_dir, env = hub.data_dir, hub.env
    (data_dir / "hub-key.pub").unlink()
    refused = subprocess.run(
        [*SONDE, "hub", "restore", str(other_backup), "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1, refused.stderr
    assert "is another hub's database" in refused.stderr
