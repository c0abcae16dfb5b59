"""Audit entries the hub could not write before it stopped, kept as JSON lines in a file.

A hub stopped while its audit log cannot be written (a full disk, an I/O error) had only a
count to say for the entries still waiting, though it answered their calls: a fault review
stopped a hub with a full disk and lost 1,261 of them. They are written beside the database
(``sonde.db.audit-unwritten-<UTC time>.jsonl``, 0600: they may name agents and parameters)
or, where that fails too (the same full disk), in the system's temporary directory, and the
log says where. They are not on the hash chain: an operator keeps the file with the audit log.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from sonde.hub.audit import AuditEntry


def save_leftovers(entries: Sequence[AuditEntry], db_path: Path) -> tuple[Path | None, list[str]]:
    """Write ``entries`` to a new file, beside ``db_path`` or in the temporary directory; the file
    (None when neither took it) and why each place refused."""
    name = f"{db_path.name}.audit-unwritten-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.jsonl"
    text = "".join(
        json.dumps(entry.model_dump(mode="json"), separators=(",", ":")) + "\n" for entry in entries
    )
    refused = []
    for directory in (db_path.parent, Path(tempfile.gettempdir())):
        path = directory / name
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            refused.append(f"{path}: {exc.strerror or exc}")
            continue
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            return path, refused
        except OSError as exc:
            refused.append(f"{path}: {exc.strerror or exc}")
            path.unlink(missing_ok=True)
    return None, refused
