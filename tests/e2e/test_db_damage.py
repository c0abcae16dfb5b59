"""End to end: what a real hub and the admin commands do with a database that is gone, damaged
or on a full disk.

- An empty or missing ``sonde.db`` where a hub ran (a ``-wal`` file with its changes, the
  first admin key's file) is refused with what to do, and nothing is changed. Before, the
  hub started over as a new hub: SQLite deleted the ``-wal`` file, the hub made a new
  signing key (agents that pinned the old one could never come back) and a new admin key,
  overwrote ``first-admin-key``, and the old audit chain was gone.
- A first start interrupted before its first commit (an empty ``sonde.db``) starts cleanly.
- `sonde hub audit verify` on a damaged file says to restore it from a backup.
- A restart on a full disk names the file and the fix; before it said only
  ``StoreCommitFailed: the write transaction failed: database or disk is full`` (or
  ``OperationalError: disk I/O error``).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import file_rows
from tests.e2e.procs import (
    SONDE,
    URL_LINE,
    RunningHub,
    base_env,
    enroll_agent,
    first_admin_key,
    running_hub,
    spawn,
    wait_until,
)
from tests.subprocs import run_any

pytestmark = pytest.mark.e2e

LOST = "but a hub ran in"


def start_hub(data_dir: Path, env: dict[str, str]) -> tuple[int, str]:
    """`sonde hub` on ``data_dir`` when it is expected to refuse: its exit code and stderr."""
    done = run_any([*SONDE, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], env=env, timeout=30)
    return done.returncode, done.stderr


def cli(data_dir: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    done = run_any([*SONDE, "hub", *args, "--data-dir", str(data_dir)], env=env, timeout=60)
    return done.returncode, done.stderr


def files(data_dir: Path) -> dict[str, bytes]:
    """The data directory's files, but the lock file (each hub writes its PID there)."""
    return {p.name: p.read_bytes() for p in sorted(data_dir.iterdir()) if p.name != "hub.lock"}


def killed_hub(tmp_path: Path) -> RunningHub:
    """A hub that ran, made a key and was killed: its last changes are in ``sonde.db-wal``."""
    with running_hub(tmp_path) as hub:
        assert hub.cli("hub", "key", "create", "--name", "ops").returncode == 0
        hub.proc.stop(signal.SIGKILL)
    assert (hub.data_dir / "sonde.db-wal").stat().st_size > 0
    return hub


@pytest.mark.parametrize("lost", ["emptied", "deleted"])
def test_a_database_lost_beside_its_wal_is_refused_and_nothing_is_changed(tmp_path: Path, lost: str) -> None:
    hub = killed_hub(tmp_path)
    db_path = hub.data_dir / "sonde.db"
    if lost == "emptied":
        db_path.write_bytes(b"")
    else:
        db_path.unlink()
    before = files(hub.data_dir)

    code, stderr = start_hub(hub.data_dir, hub.env)
    assert code == 1, stderr
    state = "empty" if lost == "emptied" else "missing"
    assert f"sonde hub: stopped: the hub's database {db_path} is {state}, {LOST} {hub.data_dir}: " in stderr
    assert "sonde.db-wal holds" in stderr
    assert "first-admin-key is there (the first admin key a hub made here)" in stderr
    assert "a new signing key (the agents enrolled with the old one would refuse it)" in stderr
    assert (
        "Either restore sonde.db from a backup, with the hub stopped: `sonde hub restore BACKUP "
        f"--data-dir {hub.data_dir}` (it moves sonde.db-wal and sonde.db-shm aside" in stderr
    )
    leftovers = ", ".join(
        str(hub.data_dir / name)
        for name in ("sonde.db-wal", "sonde.db-shm", "hub-key.pub", "first-admin-key")
    )
    assert (
        f"or, to start a new hub here on purpose, remove {leftovers} (or pass another --data-dir)" in stderr
    )
    assert "listening on" not in stderr
    assert "Traceback" not in stderr
    assert files(hub.data_dir) == before  # the -wal kept, no key made, first-admin-key as it was

    code, stderr = cli(hub.data_dir, hub.env, "key", "list")  # the admin commands say the same
    assert code == 1, stderr
    assert f"sonde hub: the hub's database {db_path} is {state}, {LOST}" in stderr
    code, stderr = cli(hub.data_dir, hub.env, "audit", "verify")
    assert code == 3, stderr
    assert f"the audit chain was not checked: the hub's database {db_path} is {state}, {LOST}" in stderr
    assert files(hub.data_dir) == before


@pytest.mark.parametrize("first_key", ["kept", "deleted as advised"])
def test_an_emptied_database_of_a_hub_stopped_cleanly_is_refused(tmp_path: Path, first_key: str) -> None:
    # Before hub-key.pub, a hub stopped cleanly (no -wal left) whose first-admin-key had been
    # deleted, as the hub advises, left no sign: an emptied sonde.db started a new hub.
    with running_hub(tmp_path) as hub:
        assert hub.proc.stop() == 0
    # no -wal after a clean stop; the hub's public key beside its database
    assert sorted(files(hub.data_dir)) == ["first-admin-key", "hub-key.pub", "sonde.db"]
    public_key = (hub.data_dir / "hub-key.pub").read_text()
    if first_key != "kept":
        (hub.data_dir / "first-admin-key").unlink()
    (hub.data_dir / "sonde.db").write_bytes(b"")
    code, stderr = start_hub(hub.data_dir, hub.env)
    assert code == 1, stderr
    assert (
        f"is empty, {LOST} {hub.data_dir}: hub-key.pub is there (the public key of the hub whose "
        "database was here)"
    ) in stderr
    named = [
        hub.data_dir / "hub-key.pub",
        *([hub.data_dir / "first-admin-key"] if first_key == "kept" else []),
    ]
    assert f"remove {', '.join(map(str, named))} (or pass another --data-dir)" in stderr
    assert (hub.data_dir / "hub-key.pub").read_text() == public_key
    if first_key == "kept":
        assert (hub.data_dir / "first-admin-key").read_text().strip() == hub.admin_key


def test_a_new_hub_starts_once_the_named_files_are_removed(tmp_path: Path) -> None:
    hub = killed_hub(tmp_path)
    (hub.data_dir / "sonde.db").write_bytes(b"")
    for name in ("sonde.db-wal", "sonde.db-shm", "hub-key.pub", "first-admin-key"):
        (hub.data_dir / name).unlink()
    again = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir)], hub.env)
    try:
        assert first_admin_key(again, hub.data_dir) != hub.admin_key  # a new hub, on purpose
        again.wait_for(URL_LINE)
    finally:
        assert again.stop() == 0


@pytest.mark.parametrize("left", [["sonde.db"], ["sonde.db", "hub.lock"], []])
def test_a_first_start_interrupted_before_its_first_commit_starts_cleanly(
    tmp_path: Path, left: list[str]
) -> None:
    data_dir = tmp_path / "hubdata"
    data_dir.mkdir(mode=0o700)
    for name in left:  # an empty sonde.db (and the lock file), no -wal, no first-admin-key
        (data_dir / name).write_bytes(b"")
    hub = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], base_env(tmp_path))
    try:
        assert first_admin_key(hub, data_dir)
        hub.wait_for(URL_LINE)
    finally:
        assert hub.stop() == 0


def damage_the_audit_table(db_path: Path) -> None:
    """Write 4 KiB of random bytes over the page the audit table's rows start on."""
    conn = sqlite3.connect(db_path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'audit'").fetchone()[0]
    finally:
        conn.close()
    assert not db_path.with_name("sonde.db-wal").exists()  # all of it is in the file
    with db_path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(random.Random(4).randbytes(4096))


def test_verify_of_a_damaged_database_says_to_restore_it(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        assert hub.cli("hub", "key", "create", "--name", "ops").returncode == 0
        assert hub.proc.stop() == 0
    db_path = hub.data_dir / "sonde.db"
    damage_the_audit_table(db_path)
    code, stderr = cli(hub.data_dir, hub.env, "audit", "verify")
    assert code == 3, stderr
    assert (
        f"sonde hub: the audit chain was not checked: the hub's database {db_path} is not a SQLite "
        "database, or it is damaged (database disk image is malformed)"
    ) in stderr
    assert "or restore sonde.db from a backup, with the hub stopped" in stderr
    assert f"to start a new hub there instead, move away {db_path}" in stderr


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs (mounting needs root): a disk a test can fill."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    done = run_any(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mount)], timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        run_any(["umount", str(mount)], timeout=30)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; the file that holds them."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as handle:
        for size in (2**16, 2**10, 1):
            try:
                while True:
                    handle.write(bytes(size))
            except OSError:
                pass
    assert shutil.disk_usage(disk).free < 4096
    return filler


def assert_full_disk_said(stderr: str, db_path: Path) -> None:
    assert (
        f"sonde hub: stopped: cannot use the hub's database {db_path}: the file system holding "
        f"{db_path.parent} is full ("
    ) in stderr
    assert "nothing was changed. Free space on that file system (`df -h" in stderr
    assert "Traceback" not in stderr


def restart_works(hub: RunningHub) -> None:
    again = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir)], hub.env)
    try:
        again.wait_for(URL_LINE)
    finally:
        assert again.stop() == 0


def test_a_restart_on_a_full_disk_names_the_file_and_the_fix(small_disk: Path) -> None:
    with running_hub(small_disk) as hub:
        assert hub.proc.stop() == 0  # a clean stop: the next start makes the -shm file anew
    filler = fill(small_disk)
    code, stderr = start_hub(hub.data_dir, hub.env)
    assert code == 1, stderr
    assert_full_disk_said(stderr, hub.data_dir / "sonde.db")
    code, stderr = cli(hub.data_dir, hub.env, "key", "create", "--name", "more")
    assert code == 1, stderr
    assert f"sonde hub: cannot use the hub's database {hub.data_dir / 'sonde.db'}: the file system" in stderr
    filler.unlink()
    restart_works(hub)


def agent_online(db_path: Path) -> bool:
    return file_rows(db_path, "SELECT status FROM agents") == [("online",)]


def test_a_restart_on_a_full_disk_that_must_mark_agents_offline_says_so(
    small_disk: Path, tmp_path: Path
) -> None:
    with running_hub(small_disk) as hub:
        agent = enroll_agent(hub, tmp_path, "web-1")
        agent.start()
        try:
            wait_until(lambda: agent_online(hub.data_dir / "sonde.db"))
            hub.proc.stop(signal.SIGKILL)  # the agent stays "online" in the file: the restart writes
        finally:
            agent.stop()
    filler = fill(small_disk)
    code, stderr = start_hub(hub.data_dir, hub.env)
    assert code == 1, stderr
    assert_full_disk_said(stderr, hub.data_dir / "sonde.db")
    assert "StoreCommitFailed" not in stderr
    filler.unlink()
    restart_works(hub)
