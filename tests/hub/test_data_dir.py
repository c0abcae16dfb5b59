"""`claim_data_dir`: one holder per data directory, the holder's PID in the refusal, a missing
directory made private, an existing one left as it is."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from sonde.hub.data_dir import KERNEL_LOCK_TABLE, LOCK_FILE, DataDirInUse, claim_data_dir, hub_holds
from tests.conftest import require


def test_a_second_claim_is_refused_naming_the_holder(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "b"
    with claim_data_dir(data_dir):
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700  # made by the hub: private
        assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(DataDirInUse, match=rf"^another hub \(PID {os.getpid()}\) is serving the data"):
            with claim_data_dir(data_dir):
                pass
    with claim_data_dir(data_dir):  # let go when the first claim ended
        pass


def test_a_holder_that_wrote_no_pid_is_still_refused(tmp_path: Path) -> None:
    with claim_data_dir(tmp_path):
        (tmp_path / LOCK_FILE).write_text("")  # the holder between its lock and its write
        with pytest.raises(DataDirInUse, match=r"^another hub is serving the data directory"):
            with claim_data_dir(tmp_path):
                pass


def test_an_open_directory_is_warned_about_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sonde.hub.data_dir")
    tmp_path.chmod(0o750)
    with claim_data_dir(tmp_path):
        pass
    assert [r.getMessage() for r in caplog.records] == [
        f"data directory {tmp_path} has mode 750; it holds the hub's database and signing key, "
        f"run `chmod 700 {tmp_path}`"
    ]
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o750
    caplog.clear()
    tmp_path.chmod(0o700)
    with claim_data_dir(tmp_path):
        pass
    assert caplog.records == []


def test_whether_a_hub_holds_a_directory_is_read_without_taking_its_lock(tmp_path: Path) -> None:
    require(KERNEL_LOCK_TABLE.exists(), "the kernel's lock table, /proc/locks (Linux)")
    assert hub_holds(tmp_path) is False  # no hub ever served it
    with claim_data_dir(tmp_path):
        assert hub_holds(tmp_path) is True
        with claim_data_dir(tmp_path / "other"):  # the other's lock is not this one
            assert hub_holds(tmp_path) is True
        assert hub_holds(tmp_path / "other") is False
    assert hub_holds(tmp_path) is False  # released with its holder


def lock_line(path: Path, kind: str = "FLOCK", waiter: bool = False) -> str:
    found = path.stat()
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    return f"1: {'-> ' if waiter else ''}{kind}  ADVISORY  WRITE 4242 {device} 0 EOF"


@pytest.mark.parametrize(
    ("lines", "held"),
    [
        (["FLOCK"], True),
        (["POSIX"], False),  # SQLite's own locks on the database are POSIX ones
        (["waiter"], False),  # a second hub waiting for it holds nothing
        ([], False),
    ],
)
def test_only_a_flock_held_on_the_lock_file_counts(tmp_path: Path, lines: list[str], held: bool) -> None:
    with claim_data_dir(tmp_path / "data"):
        pass  # made the lock file, and let it go
    lock = tmp_path / "data" / LOCK_FILE
    table = tmp_path / "locks"
    written = [lock_line(lock, "POSIX" if w == "POSIX" else "FLOCK", waiter=w == "waiter") for w in lines]
    table.write_text("\n".join(["2: FLOCK  ADVISORY  WRITE 1 00:00:1 0 EOF", *written, "bad line"]) + "\n")
    assert hub_holds(tmp_path / "data", lock_table=table) is held
    assert hub_holds(tmp_path / "data", lock_table=tmp_path / "no-such-table") is None
