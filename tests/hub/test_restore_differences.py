"""What a restore says it took back, read from the database it replaced: an agent's tags and its
accepted attestation too (a review: both went back to the backup's without a word)."""

from __future__ import annotations

from pathlib import Path

from sonde.hub.agent_records import AgentRecord, insert_agent
from sonde.hub.db import open_database
from sonde.hub.restore import differences, holdings

CODE = {"agentVersion": "1.0", "codeHash": "sha256:" + "a" * 64, "packs": {"system": "1.0"}}


def database(path: Path, tags: list[str], attestation: dict[str, object]) -> Path:
    db = open_database(path)
    try:
        for name in ("web-1", "web-2"):
            accepted = attestation if name == "web-1" else CODE
            record = AgentRecord(
                id=f"id-{name}", name=name, public_key="k", enrolled_at=1.0, tags=tags, attestation=accepted
            )
            insert_agent(db, record)
    finally:
        db.close()
    return path


def test_tags_and_an_accepted_attestation_taken_back_are_said(tmp_path: Path) -> None:
    backup = database(tmp_path / "backup.db", [], CODE)
    newer = {**CODE, "codeHash": "sha256:" + "b" * 64}
    replaced = database(tmp_path / "replaced.db", ["prod"], newer)
    said = differences(replaced, holdings(backup))
    assert said == [
        "agents tagged otherwise since the backup have the backup's tags again (keys scoped by tag reach "
        "them as then): web-1 (id-web-1), web-2 (id-web-2); `sonde hub agent list` shows them",
        "agents whose attestation was accepted since the backup have the backup's again, and may be held "
        "when they connect: web-1 (id-web-1); accept them again once you know why (`sonde hub agent accept NAME`)",
    ]
    assert differences(backup, holdings(backup)) == []
