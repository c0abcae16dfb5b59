"""A watcher's look that the database refuses is said and made again, never the end of the hub."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
import trio

from sonde.hub.watching import SAY_EVERY_S, look_every


async def test_a_look_that_fails_is_said_once_a_minute_and_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    looks: list[str] = []
    missing = tmp_path / "gone" / "sonde.db"  # SQLite cannot open it: "unable to open database file"

    async def look() -> None:
        looks.append("looked")
        if len(looks) <= 40:
            sqlite3.connect(f"file:{missing}?mode=ro", uri=True)

    with trio.move_on_after(2 * 45 + 1):  # 45 looks, one every 2 s
        await look_every(2.0, "agents removed with the CLI", look)
    assert len(looks) == 45  # every look was made, the failed ones and those after
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 2  # the first failure, then once SAY_EVERY_S later
    assert said[0].startswith(
        "could not look for agents removed with the CLI in the hub's database (unable to open database "
        "file; 1 look(s) failed since this was last said); looking again every 2 s"
    )
    assert f"; {int(SAY_EVERY_S / 2)} look(s) failed since" in said[1]
