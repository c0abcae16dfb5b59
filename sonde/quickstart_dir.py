"""Whose data directory `sonde up` is given: one it made, or one holding a real hub.

`sonde up` shares its default data directory with `sonde hub` (``~/.local/share/sonde``).
On a directory holding a hub it did not make (a `sonde hub` with its own agents and keys) it
would add an admin key and an agent to that hub, unasked. So it serves a directory only if it
made it: its `STATE_FILE` is there (written when it made its key, on its first run), or the
directory holds no hub yet (no agent, no API key: it makes it now). Anything else is refused,
with what is there and what to run instead.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from sonde.hub.audit import record_entry
from sonde.hub.db import open_database, query_one, write_transaction
from sonde.hub.keys import create_api_key, find_api_key

STATE_FILE = "quickstart.json"
STATE_FILE_MODE = 0o600


class HubNotMadeByUp(RuntimeError):
    """The data directory holds a hub `sonde up` did not make; the message says what to do."""


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """What `sonde up` keeps in ``data_dir`` (its key, its local agent's id), or None when it
    never made this directory its own."""
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state if isinstance(state, dict) else {}


def write_state(data_dir: Path, **changes: str) -> None:
    """Save ``changes`` in `STATE_FILE` (0600), keeping what else it holds."""
    state = {**(read_state(data_dir) or {}), **changes}
    fd = os.open(data_dir / STATE_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, STATE_FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle)


def quickstart_key(data_dir: Path) -> str:
    """The quick start's admin API key: read back, or created once and saved 0600.

    Raises `HubNotMadeByUp` (changing nothing) when ``data_dir`` holds a hub `sonde up` did not make.
    """
    state = read_state(data_dir)
    db = open_database(data_dir / "sonde.db")
    try:
        if state is None:
            refuse_a_hub_not_made_here(db, data_dir)
        secret = (state or {}).get("apiKey")
        if isinstance(secret, str) and find_api_key(db, secret) is not None:
            return secret
        with write_transaction(db):
            key, secret = create_api_key(db, "quickstart", role="admin")
            record_entry(db, "quickstart", "quickstart.api_key.create", key.id, name=key.name, role=key.role)
    finally:
        db.close()
    write_state(data_dir, apiKey=secret)
    return secret


def refuse_a_hub_not_made_here(db: Database, data_dir: Path) -> None:
    """Raise `HubNotMadeByUp` if ``db`` holds any agent or API key (revoked ones too)."""
    agents = _count(db, "agents")
    keys = _count(db, "api_keys")
    if agents == 0 and keys == 0:
        return
    revoked = _count(db, "api_keys", "revoked_at IS NOT NULL")
    held = f"{_plural(agents, 'agent')}, {_plural(keys, 'API key')}" + (
        f", {revoked} of them revoked" if revoked else ""
    )
    where = shlex.quote(str(data_dir))
    raise HubNotMadeByUp(
        f"the data directory {data_dir} holds a hub that `sonde up` did not make "
        f"({held}); nothing was changed: a quick start "
        "there would add its own admin key and agent to that hub. To run that hub, use "
        f"`sonde hub --data-dir {where}`; for a trial, give `sonde up` a directory of its own: "
        "`sonde up --data-dir OTHER` (or SONDE_DATA_DIR)"
    )


def _count(db: Database, table: str, where: str = "1") -> int:
    row = query_one(db, f"SELECT COUNT(*) AS n FROM {table} WHERE {where}")
    return int(row["n"]) if row is not None else 0


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
