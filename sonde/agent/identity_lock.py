"""One `sonde start` per identity: an exclusive lock on `AGENT_LOCK_FILE` next to its config.

Two agents with one identity (the systemd service, and the same config run by hand to debug)
replace each other's connection at the hub forever, and with different packs the hub flips
the agent between held and not. So `sonde start` holds a `sonde.pid_lock` lock for its life,
with its PID in the file, and a second one exits at once naming the first. `sonde enroll`
takes no lock: it rewrites the config atomically, and a running agent keeps the identity it
read at start (as before).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sonde.agent.config import ConfigError, config_path, load_config
from sonde.hub_url import same_hub
from sonde.pid_lock import LOCK_FILE_MODE, LockHeld, holder_pid, take_lock, write_pid

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


def running_agent(config_path: Path) -> LockHeld | None:
    """The `sonde start` that holds the identity of ``config_path`` now, if one does, found
    without taking its lock (a shared lock tried, and let go)."""
    try:
        fd = os.open(config_path.parent / AGENT_LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return LockHeld(holder_pid(fd))
    except OSError:
        return None  # no locks here: nothing tells
    finally:
        os.close(fd)
    return None


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


def enrolled_as() -> tuple[str | None, str | None]:
    """The name and hub this machine's agent is enrolled with now ((None, None): it is not)."""
    try:
        config = load_config(check_access=False)
    except ConfigError:
        return None, None
    return (config.name, config.hub_url) if config is not None and config.enrolled else (None, None)


def next_step(now: tuple[str | None, str | None], before: tuple[str | None, str | None]) -> str:
    """What to do after enrolling (``now`` and ``before``: the name and hub enrolled with):
    start the agent, unless one runs. One running under the name enrolled again at the same hub
    goes on with the new identity once that hub ends the old one (it ends it for the name);
    under another name, or with another hub, it keeps the old one until restarted."""
    running = running_agent(config_path())
    if running is None:
        return "start the agent with `sonde start` (or `sonde service install` for systemd)"
    pid = f" (PID {running.pid})" if running.pid is not None else ""
    (name, hub), (old_name, old_hub) = now, before
    if name == old_name and hub is not None and old_hub is not None and same_hub(hub, old_hub):
        return f"the agent running on this machine{pid} goes on with the new identity"
    return (
        f"the agent running on this machine{pid} still runs as {old_name} with {old_hub}: restart it to "
        f"run as {name} with {hub} (`systemctl restart sonde-agent` for the service)"
    )
