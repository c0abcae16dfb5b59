"""The admin key a hub makes at its first start: shown on a terminal, never put in a log, audited.

Under systemd (or with stderr sent to a file) the hub's stderr is a log that others may
read or ship: the key goes to a 0600 file in the data directory instead, and the log says
where. On a terminal it is printed once, as before.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import httpx

from sonde.hub.db import open_database
from tests.e2e.procs import (
    KEY_LINE,
    SONDE,
    URL_LINE,
    base_env,
    first_admin_key,
    on_a_terminal,
    running_hub,
    spawn,
)


def audit_rows(data_dir: Path, action_like: str) -> list[tuple[str, str, str | None, str]]:
    with sqlite3.connect(data_dir / "sonde.db") as db:
        rows = db.execute(
            "SELECT actor, action, target, detail FROM audit WHERE action LIKE ? ORDER BY seq", [action_like]
        ).fetchall()
    db.close()
    return rows


def test_with_stderr_a_log_the_key_is_in_a_private_file_and_on_the_audit_chain(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--log-format", "json") as hub:  # running_hub: the key is in no line
        with hub.client() as http:
            assert http.get("/api/v1/api-keys").status_code == 200  # the file's key is the admin key
            keys = http.get("/api/v1/api-keys").json()["keys"]
        assert not any("First start" in line and "sonde_" in line for line in hub.proc.lines)
    [(actor, action, target, detail)] = audit_rows(hub.data_dir, "%api_key.create")
    assert (actor, action, target) == ("hub", "hub.api_key.create", keys[0]["id"])
    assert '"role":"admin"' in detail

    # a second start makes no key, and leaves the file (and its content) as it was
    (hub.data_dir / "first-admin-key").unlink()
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir)], hub.env)
    try:
        proc.wait_for(URL_LINE, timeout=30)
        assert not any("First start" in line for line in proc.lines)
    finally:
        proc.stop()
    assert not (hub.data_dir / "first-admin-key").exists()
    assert len(audit_rows(hub.data_dir, "%api_key.create")) == 1


def test_on_a_terminal_the_key_is_printed_once_and_no_file_is_written(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    args = ["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)]
    with on_a_terminal(args, base_env(tmp_path / "home"), URL_LINE) as seen:
        url = URL_LINE.search(seen)
        assert url is not None, seen
        keys = [m.group(1) for line in seen.splitlines() if (m := KEY_LINE.search(line))]
        assert len(keys) == 1, seen
        answer = httpx.get(
            f"{url.group(1)}/api/v1/api-keys", headers={"Authorization": f"Bearer {keys[0]}"}, timeout=10
        )
        assert answer.status_code == 200
        assert not (data_dir / "first-admin-key").exists()
        assert re.search(r"shown once and never again", seen)


def test_an_earlier_key_file_is_rewritten_private(tmp_path: Path) -> None:
    """A file of that name left with a wider mode (a restore, a copy) does not keep it. Beside an
    empty store (a first start that stopped before it listened): beside no database at all the
    file shows a hub's database was lost there, and the hub refuses to start (test_db_damage.py)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    open_database(data_dir / "sonde.db").close()
    stale = data_dir / "first-admin-key"
    stale.write_text("old\n")
    stale.chmod(0o644)
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], base_env(tmp_path / "home"))
    try:
        key = first_admin_key(proc, data_dir)  # checks the mode is 0600
        assert key.startswith("sonde_")
    finally:
        proc.stop()


def test_a_first_key_whose_file_cannot_be_written_is_named_with_the_way_out(tmp_path: Path) -> None:
    # Before, the hub stopped on the OSError with no word of the key it had made and marked made:
    # every later start made none, and nobody had ever seen this one.
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "first-admin-key").symlink_to(tmp_path / "elsewhere")  # refused: O_NOFOLLOW
    env = base_env(tmp_path / "home")
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], env)
    assert proc.popen.wait(30) == 1
    said = "\n".join(proc.lines)
    with closing(sqlite3.connect(data_dir / "sonde.db")) as db:  # `with` a connection does not close it
        [(key_id,)] = db.execute("SELECT id FROM api_keys").fetchall()
    assert f"created the first admin API key (id {key_id}), but could not write it to" in said
    assert f"sonde hub key revoke {key_id} --data-dir {data_dir}" in said
    assert "sonde hub key create --name admin --role admin" in said
    assert "Traceback" not in said
    assert not (tmp_path / "elsewhere").exists()  # the link was not followed

    # the way out the message gives works
    (data_dir / "first-admin-key").unlink()
    made = subprocess.run(
        [*SONDE, "hub", "key", "create", "--name", "admin", "--role", "admin", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    revoked = subprocess.run(
        [*SONDE, "hub", "key", "revoke", key_id, "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert revoked.returncode == 0, revoked.stderr
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], env)
    try:
        url = proc.wait_for(URL_LINE, timeout=30).group(1)
        assert not any("First start" in line for line in proc.lines)  # made once, as before
        answer = httpx.get(
            f"{url}/api/v1/api-keys", headers={"Authorization": f"Bearer {made.stdout.strip()}"}, timeout=10
        )
    finally:
        proc.stop()
    assert answer.status_code == 200, answer.text
    keys = answer.json()["keys"]
    assert {(k["id"] == key_id, k["revoked_at"] is not None) for k in keys} == {(True, True), (False, False)}
