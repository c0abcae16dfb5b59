"""A fleet reconnecting at once is said in a few lines and a count (`sonde.hub.connection_lines`).

Regression (3,000 agents reconnecting): a line per agent per event, 6,000 lines, and 3,000 held
warnings of 600 bytes each naming a per-agent command; the burst outran stderr, which dropped lines."""

from __future__ import annotations

import logging

import pytest
import trio

from sonde.hub.connection_lines import ConnectionLines, say_connection_counts

log = logging.getLogger("test.connection_lines")


def test_past_its_lines_a_kind_is_counted_and_the_count_said(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    lines = ConnectionLines(per_window=3, window_s=3600)
    for i in range(10):
        lines.say("online", log, logging.INFO, "agent a%d online", i)
    lines.say("offline", log, logging.INFO, "agent b offline")  # another kind has lines of its own
    for i in range(5):
        lines.say("held", log, logging.WARNING, "agent h%d is held as degraded", i)
    assert [r.getMessage() for r in caplog.records] == [
        "agent a0 online",
        "agent a1 online",
        "agent a2 online",
        "agent b offline",
        "agent h0 is held as degraded",
        "agent h1 is held as degraded",
        "agent h2 is held as degraded",
    ]
    caplog.clear()
    lines.flush()
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said[0] == (logging.INFO, "7 more agent(s) came online in the last 3600 s")
    assert said[1][0] == logging.WARNING
    assert said[1][1].startswith("2 more agent(s) were held as degraded")
    assert "`sonde hub agent accept --all`" in said[1][1]
    assert len(said) == 2
    caplog.clear()
    lines.say("online", log, logging.INFO, "agent c online")  # a new window: said again
    assert [r.getMessage() for r in caplog.records] == ["agent c online"]


def test_a_line_nobody_sees_is_not_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    lines = ConnectionLines(per_window=1, window_s=3600)
    for _ in range(5):  # the hub stopping logs each agent's offline at DEBUG
        lines.say("offline", log, logging.DEBUG, "agent x offline")
    lines.flush()
    assert caplog.records == []


async def test_the_count_is_said_each_window_and_as_the_hub_stops(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    lines = ConnectionLines(per_window=1, window_s=0.2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(say_connection_counts, lines)
        for _ in range(3):
            lines.say("online", log, logging.INFO, "agent online")
        await trio.sleep(0.3)
        assert "2 more agent(s) came online in the last 0.2 s" in caplog.text
        lines.say("online", log, logging.INFO, "agent online")
        lines.say("online", log, logging.INFO, "agent online")
        nursery.cancel_scope.cancel()
    assert caplog.text.count("1 more agent(s) came online") == 1
