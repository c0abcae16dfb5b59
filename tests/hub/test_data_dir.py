"""`claim_data_dir`: one holder per data directory, the holder's PID in the refusal, a missing
directory made private, an existing one left as it is."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from sonde.hub.data_dir import LOCK_FILE, DataDirInUse, claim_data_dir


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
