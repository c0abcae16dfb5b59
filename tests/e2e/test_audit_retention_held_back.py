"""`sonde hub --audit-keep` behind a row from a wrong clock: a real hub warns, saying why."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.procs import running_hub
from tests.hub.test_audit_retention_held_back import append


def test_the_hub_warns_when_a_row_from_a_wrong_clock_holds_its_prune_back(tmp_path: Path) -> None:
    append(tmp_path / "hubdata" / "sonde.db", -365, 3, 3)
    with running_hub(tmp_path, "--audit-keep", "2d") as hub:
        warned = hub.proc.wait_for(re.compile(r"WARNING sonde\.hub\.audit_retention: audit retention: (.*)"))
        said = warned.group(1)
        assert said.startswith("no audit rows pruned: the log starts with a row made after the cutoff")
        assert "2 rows older than that were kept: they come after row 1, made at " in said
        assert "(a wrong clock can put rows out of order)" in said
        verified = hub.cli("hub", "audit", "verify")
        assert verified.returncode == 0, verified.stderr
