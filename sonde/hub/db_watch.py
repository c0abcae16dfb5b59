"""The hub's database file, watched: removed or replaced under a running hub, the hub saves what
it holds and stops.

SQLite keeps writing to the file it opened, whatever became of its name: a hub whose
``sonde.db`` was deleted (``rm sonde.db*``, the data directory removed) answered every call and
every write as before, said ``ok`` on ``/api/v1/health``, and lost it all when it stopped, the
whole database with it; one whose file was replaced (a backup moved over it by hand) served
the old file while the admin commands changed the new one (a fault review). Every
`CHECK_EVERY_S` the hub checks that its path still names the file it opened. When it does not,
what the hub holds is copied through its own connection to ``sonde.db.lost-<UTC time>`` beside
where it was (the directory made again if it went), and the hub stops, saying so: started
again, it refuses a data directory without its database, and an operator restores that copy
(`sonde hub restore`) or the file that was moved there.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from sonde.hub.db_errors import DatabaseUnusable

if TYPE_CHECKING:
    from sonde.hub.store import Store

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0


class DatabaseFileGone(DatabaseUnusable):
    """The hub's database file was removed or replaced while it ran (the message says what to do)."""


def file_identity(path: Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def what_became_of(path: Path, identity: tuple[int, int]) -> str | None:
    """How ``path`` no longer names the file of ``identity`` ("removed", "replaced"), or None."""
    try:
        now = file_identity(path)
    except FileNotFoundError:
        return "removed"
    except OSError:  # not ours to judge (a permission changed): the store says what it cannot do
        return None
    return None if now == identity else "replaced by another file"


async def watch_database_file(store: Store, every_s: float = CHECK_EVERY_S) -> None:
    """Check ``store``'s file every ``every_s`` until cancelled; raise `DatabaseFileGone` once its
    path no longer names it, what the store holds saved beside it first."""
    path = store.path
    identity = await trio.to_thread.run_sync(file_identity, path)
    while True:
        await trio.sleep(every_s)
        became = await trio.to_thread.run_sync(what_became_of, path, identity)
        if became is not None:
            raise DatabaseFileGone(await lost_words(store, path, became))


async def lost_words(store: Store, path: Path, became: str) -> str:
    """Save what ``store`` holds beside ``path``; what happened and what to do, for the stop."""
    moment = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    saved = path.with_name(f"{path.name}.lost-{moment}")
    log.error(
        "the hub's database %s was %s while the hub ran: saving what it holds as %s", path, became, saved
    )
    try:
        await trio.to_thread.run_sync(lambda: saved.parent.mkdir(mode=0o700, parents=True, exist_ok=True))
        await store.copy_to(saved)
    except Exception as exc:  # said in the stop's words: nothing else can be done
        return (
            f"the hub's database {path} was {became} while the hub ran, and saving what the hub held "
            f"as {saved} failed ({exc}): what it wrote since it started is lost"
        )
    return (
        f"the hub's database {path} was {became} while the hub ran: everything the hub held, to this "
        f"moment, is saved as {saved}. Put it back with `sonde hub restore {saved}` (or put back the "
        "file that was moved there), then start the hub"
    )
