"""The hub warns once when the disk under its data directory runs low, and once when there is room again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from sonde.hub.free_space import low_on_space, watch_free_space


def test_low_space_is_said_in_words(tmp_path: Path) -> None:
    said = low_on_space(tmp_path, min_free_bytes=2**62)  # more than any disk here has
    assert said is not None
    assert "MiB free of" in said


async def test_the_watch_warns_once_per_episode(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sonde.hub.free_space")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_free_space, tmp_path, 0.01, 2**62)
        await trio.sleep(0.2)  # many checks, all low
        nursery.cancel_scope.cancel()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "is low on space" in warnings[0].getMessage()
    assert "refuses calls" in warnings[0].getMessage()
