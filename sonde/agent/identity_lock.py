"""One `sonde start` per identity: an exclusive lock on `AGENT_LOCK_FILE` next to its config.

Two agents with one identity (the systemd service, and the same config run by hand to debug)
replace each other's connection at the hub forever, and with different packs the hub flips
the agent between held and not. So `sonde start` holds a `sonde.pid_lock` lock for its life,
with its PID in the file, and a second one exits at once naming the first. `sonde enroll`
takes no lock: it rewrites the config atomically, and a running agent keeps the identity it
read at start (as before).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sonde.pid_lock import LOCK_FILE_MODE, LockHeld, take_lock, write_pid

log = logging.getLogger(__name__)

AGENT_LOCK_FILE = "agent.lock"


class AgentRunning(RuntimeError):
    """Another `sonde start` runs with this identity; the message names it and what to do."""


@contextmanager
def hold_identity(config_path: Path) -> Iterator[None]:
    """Hold the identity of ``config_path`` until the block exits.

    Raises `AgentRunning` when another process holds it. A lock file that cannot be made or
    locked (a read-only directory, a file system without locks) is warned of, and the agent runs:
    the lock guards against a mistake, and must not keep a working agent from starting."""
    path = config_path.parent / AGENT_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_FILE_MODE)
    except OSError as exc:
        _warn_unlocked(path, exc.strerror or str(exc))
        yield
        return
    try:
        try:
            unlocked_why = take_lock(fd)
        except LockHeld as held:
            raise AgentRunning(running_message(config_path, held.pid)) from None
        if unlocked_why is None:
            write_pid(fd)
        else:
            _warn_unlocked(path, unlocked_why)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def running_message(config_path: Path, pid: int | None) -> str:
    """Why a second `sonde start` does not run, and what to do."""
    who = f"another sonde start (PID {pid})" if pid is not None else "another sonde start"
    return (
        f"{who} is running with this identity ({config_path}): stop it first (if it is the service: "
        "`systemctl stop sonde-agent`); two agents with one identity would replace each other's "
        "connection at the hub"
    )


def _warn_unlocked(path: Path, why: str) -> None:
    log.warning("cannot lock %s (%s): nothing stops a second `sonde start` with this identity", path, why)
