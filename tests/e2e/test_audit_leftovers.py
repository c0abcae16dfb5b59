"""A hub stopped while it cannot write its audit log keeps the entries still waiting in a file.

A fault review stopped a hub with a full disk and lost 1,261 entries of calls it had answered:
its log said only how many. Here the disk is "full" for the hub alone (a file size limit: every
write past the database's end fails, as on a full disk) and the waiting entries are strangers'
refused requests (each is audited, up to a budget, with no key).
"""

from __future__ import annotations

import json
import re
import resource
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.procs import running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

SAVED = re.compile(
    r"(\d+) audit entries were not written before the hub stopped .*saved, as JSON lines, in (\S+);"
)


def test_entries_left_waiting_at_the_stop_are_saved_as_json_lines(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        resource.prlimit(hub.proc.popen.pid, resource.RLIMIT_FSIZE, (4096, 4096))  # the disk is full
        for _ in range(5):
            refused = httpx.get(
                f"{hub.url}/api/v1/agents", headers={"Authorization": "Bearer sonde_" + "x" * 43}
            )
            assert refused.status_code == 401
        hub.proc.wait_for(re.compile(r"cannot write"), timeout=10)  # the flusher has met the full disk
        assert hub.proc.stop(signal.SIGTERM) == 0
        said = SAVED.search(hub.proc.output)
    assert said is not None, hub.proc.output
    saved = Path(said.group(2))
    assert saved.parent == hub.data_dir  # a small file beside the database still fits
    assert saved.stat().st_mode & 0o777 == 0o600
    entries = [json.loads(line) for line in saved.read_text().splitlines()]
    assert len(entries) == int(said.group(1)) >= 5
    assert {entry["action"] for entry in entries} >= {"rest.auth"}, entries
