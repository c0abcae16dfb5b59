"""A hub cancelled from outside (not stopped through its shutdown event) ends at once.

When the hub's own tasks and its store's writer were cancelled together, the audit queue's
last flush waited, shielded, for a write the cancelled writer would never take: a hub
cancelled with audit entries pending (an agent had just connected) never ended, and
neither did anything holding it. Found with an in-process hub and agent whose test failed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub


@pytest.mark.timeout(30)  # without the fix: no deadline inside can end a shielded wait
async def test_a_hub_cancelled_with_audit_entries_pending_ends_and_says_what_was_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="sonde.hub.audit_queue")
    with trio.CancelScope() as outside:
        async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
            await hub.audit("hub", "test.pending", None, "ok")  # appended; the flusher lingers
            outside.cancel()
            await trio.sleep_forever()
    assert outside.cancelled_caught
    assert "1 audit entries were not written before the hub stopped" in caplog.text
