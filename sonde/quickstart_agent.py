"""`sonde up`'s local agent: enrolled once, under a name no other agent holds.

Its identity lives in the data directory (``local-agent/config.json``), and its id is kept in
`sonde.quickstart_dir.STATE_FILE` too. When it must enroll (a first run, or the hub no longer
knows it) it asks for a name-reserved token, which re-enrolls whatever agent holds that name:
so it takes this machine's hostname only when no agent holds it or the one that does is its
own (by id). An agent enrolled by `sonde enroll` under the hostname (a real agent on this
machine) is never replaced: the local agent takes `<hostname>-local` instead, and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

from sqlite_utils import Database

from sonde.agent.config import AgentConfig, load_config, save_config
from sonde.agent.enroll import enroll
from sonde.agent.identity import MAX_NAME_CHARS, default_agent_name
from sonde.hub.agent_records import find_agent_by_name, get_agent
from sonde.hub.db import open_database
from sonde.hub.enrollment_tokens import create_enrollment_token
from sonde.quickstart_dir import read_state, write_state

log = logging.getLogger(__name__)

LOCAL_AGENT_CONFIG = Path("local-agent") / "config.json"
LOCAL_SUFFIX = "-local"
MAX_NAME_TRIES = 100
ENROLL_TOKEN_TTL_S = 600.0


def local_agent(data_dir: Path, url: str) -> AgentConfig:
    """The local agent's config, enrolled against ``url`` if it is not yet (blocking: run in a thread).

    Raises RuntimeError when every name it could take is another agent's."""
    path = data_dir / LOCAL_AGENT_CONFIG
    config = load_config(path)
    if config is not None and config.enrolled and known_agent(data_dir, config.agent_id):
        if config.hub_url != url:
            config = save_config(AgentConfig(hub_url=url), path)
        if (read_state(data_dir) or {}).get("localAgentId") != config.agent_id:  # one made before it was kept
            write_state(data_dir, localAgentId=config.agent_id or "")
        return config
    own = {config.agent_id if config is not None else None, (read_state(data_dir) or {}).get("localAgentId")}
    db = open_database(data_dir / "sonde.db")
    try:
        name = free_name(db, default_agent_name(), {i for i in own if isinstance(i, str)})
        _, token = create_enrollment_token(db, ENROLL_TOKEN_TTL_S, name)
    finally:
        db.close()
    config = enroll(url, token, name, config_path=path)
    if config.agent_id is not None:
        write_state(data_dir, localAgentId=config.agent_id)
    return config


def free_name(db: Database, hostname: str, own_ids: Collection[str]) -> str:
    """``hostname``, or the first of ``<hostname>-local``, ``<hostname>-local-2``, ... that no
    agent holds but the local agent itself (one of ``own_ids``); logs a warning when it is not
    ``hostname``. Raises RuntimeError when all `MAX_NAME_TRIES` are others'."""
    for tried in range(MAX_NAME_TRIES):
        suffix = "" if tried == 0 else LOCAL_SUFFIX if tried == 1 else f"{LOCAL_SUFFIX}-{tried}"
        name = hostname[: MAX_NAME_CHARS - len(suffix)] + suffix
        holder = find_agent_by_name(db, name)
        if holder is None or holder.id in own_ids:
            if tried:
                log.warning(
                    "the local agent is enrolled as %s: the name %s is another agent's (enrolled "
                    "with `sonde enroll`, not by this quick start), which a quick start never replaces",
                    name,
                    hostname,
                )
            return name
    raise RuntimeError(
        f"cannot name the local agent: {hostname}, {hostname}{LOCAL_SUFFIX} and "
        f"{MAX_NAME_TRIES - 2} more are other agents'; remove one (`sonde hub agent remove NAME`)"
    )


def known_agent(data_dir: Path, agent_id: str | None) -> bool:
    db = open_database(data_dir / "sonde.db")
    try:
        return agent_id is not None and get_agent(db, agent_id) is not None
    finally:
        db.close()
