"""What the audit routes of a running hub say about a pruned log and a cut-off listing.

Before, ``GET /api/v1/audit/verify`` of a pruned log said only how many rows verified, not
that the log starts after the pruned ones, and ``GET /api/v1/audit`` did not say when more
entries matched than the limit let through.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sonde.hub.audit import AuditEntry, append_many
from sonde.hub.db import open_database
from tests.e2e.procs import SONDE, running_hub
from tests.subprocs import run_ok

pytestmark = pytest.mark.e2e

DAY = 86400.0


def old_log(data_dir: Path, rows: int) -> None:
    """A data directory whose audit log starts with ``rows`` rows 200 days old."""
    db = open_database(data_dir / "sonde.db")
    try:
        old = time.time() - 200 * DAY
        append_many(db, [AuditEntry(actor="key:ops", action="mcp.call", target="web-1", outcome="ok",
                                    ts=old + i) for i in range(rows)])  # fmt: skip
    finally:
        db.close()


def test_verify_says_where_a_pruned_log_starts_and_a_listing_says_it_was_cut(tmp_path: Path) -> None:
    old_log(tmp_path / "hubdata", 40)
    with running_hub(tmp_path) as hub:
        with hub.client() as http:
            assert http.get("/api/v1/audit/verify").json()["startsAfter"] == 0
        argv = [*SONDE, "hub", "audit", "prune", "--older-than", "100d", "--data-dir", str(hub.data_dir)]
        pruned = run_ok(argv, env=hub.env, timeout=60)  # beside the running hub
        assert "pruned 40 audit rows" in pruned.stderr
        with hub.client() as http:
            verified = http.get("/api/v1/audit/verify").json()
            assert verified["ok"], verified
            assert verified["startsAfter"] == 40
            everything = http.get("/api/v1/audit", params={"limit": 1000}).json()
            assert everything["truncated"] is False
            seqs = [entry["seq"] for entry in everything["entries"]]
            assert min(seqs) == 41  # the first start's key, then the prune
            assert len(seqs) >= 2
            newest = http.get("/api/v1/audit", params={"limit": len(seqs) - 1}).json()
            assert [entry["seq"] for entry in newest["entries"]] == seqs[:-1]
            assert newest["truncated"] is True
            one_action = http.get("/api/v1/audit", params={"action": "cli.audit.prune"}).json()
            assert [entry["detail"]["through_seq"] for entry in one_action["entries"]] == [40]
            assert one_action["truncated"] is False
