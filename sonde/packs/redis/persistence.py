"""The `redis.persistence.status` probe: RDB saves and the AOF, and the settings that decide their effect.

A failed background save (or AOF write) is the one persistence state that stops a
healthy server: with ``stop-writes-on-bgsave-error yes`` and save points set, Redis
refuses every write with MISCONF until a save succeeds. The settings come from CONFIG
GET, which the agent's user may not be allowed (ACL ``+config|get``): then they are null, and
the answer's ``visibility`` says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.redis import PACK
from sonde.packs.redis.connection import RedisParams, info_text, one_turn, with_redis
from sonde.packs.redis.info import integer, parse_info
from sonde.packs.system.info import iso_utc

SETTINGS = ("dir", "dbfilename", "appendfilename", "save", "stop-writes-on-bgsave-error")
CONFIG_REFUSED_RETRY_S = 3600.0  # a login refused CONFIG GET is asked again after this long
CONFIG_REFUSED_KEPT = 64
Refusals = dict[tuple[object, ...], float]  # login -> when (monotonic) it was refused CONFIG GET


class Persistence(Result):
    loading: bool | None
    rdb_bgsave_in_progress: bool | None
    rdb_last_bgsave_status: str | None  # ok or err
    rdb_last_bgsave_s: int | None  # how long the last one took; null when none ran
    rdb_changes_since_last_save: int | None
    rdb_last_save_time: str | None
    rdb_last_save_age_s: int | None
    aof_enabled: bool | None
    aof_rewrite_in_progress: bool | None
    aof_last_bgrewrite_status: str | None
    aof_last_write_status: str | None
    aof_rewrite_failures_in_a_row: int | None
    dir: str | None
    dbfilename: str | None
    appendfilename: str | None
    save_points: str | None  # "" when RDB snapshots are off
    stop_writes_on_bgsave_error: bool | None
    visibility: str | None  # why the CONFIG settings are null; null when they were read


CONFIG_HIDDEN = (
    "The agent's Redis user may not run CONFIG GET (ACL '+config|get'), or CONFIG is renamed on this "
    "server: dir, dbfilename, appendfilename, save_points and stop_writes_on_bgsave_error are unknown "
    "(null), so whether a failed save stops writes, and whether Redis persists its data at all, cannot "
    "be told. A login refused is not asked again for an hour. Grant the agent's user '+config|get' to "
    "see them."
)


def flag(info: Mapping[str, str], key: str) -> bool | None:
    value = info.get(key)
    return value == "1" if value is not None else None


def persistence(info: Mapping[str, str], settings: Mapping[str, str]) -> Persistence:
    """INFO's persistence fields with the CONFIG ``settings`` that could be read (the others null)."""
    saved_at, now_us = integer(info, "rdb_last_save_time"), integer(info, "server_time_usec")
    last_bgsave_s = integer(info, "rdb_last_bgsave_time_sec")
    stop_writes = settings.get("stop-writes-on-bgsave-error")
    return Persistence(
        loading=flag(info, "loading"),
        rdb_bgsave_in_progress=flag(info, "rdb_bgsave_in_progress"),
        rdb_last_bgsave_status=info.get("rdb_last_bgsave_status"),
        rdb_last_bgsave_s=last_bgsave_s if last_bgsave_s is not None and last_bgsave_s >= 0 else None,
        rdb_changes_since_last_save=integer(info, "rdb_changes_since_last_save"),
        rdb_last_save_time=iso_utc(saved_at) if saved_at is not None else None,
        rdb_last_save_age_s=max(now_us // 1_000_000 - saved_at, 0)
        if saved_at is not None and now_us is not None
        else None,
        aof_enabled=flag(info, "aof_enabled"),
        aof_rewrite_in_progress=flag(info, "aof_rewrite_in_progress"),
        aof_last_bgrewrite_status=info.get("aof_last_bgrewrite_status"),
        aof_last_write_status=info.get("aof_last_write_status"),
        aof_rewrite_failures_in_a_row=integer(info, "aof_rewrites_consecutive_failures"),
        dir=settings.get("dir"),
        dbfilename=settings.get("dbfilename"),
        appendfilename=settings.get("appendfilename"),
        save_points=settings.get("save"),
        stop_writes_on_bgsave_error=stop_writes == "yes" if stop_writes is not None else None,
        visibility=None if settings else CONFIG_HIDDEN,
    )


def _login(client: Any) -> tuple[object, ...]:
    """Who ``client`` is, where: a refused CONFIG GET is remembered for this."""
    given = client.connection_pool.connection_kwargs
    return given.get("host"), given.get("port"), given.get("path"), given.get("username")


def _info_and_settings(refused: Refusals, client: Any) -> tuple[str, dict[str, str]]:
    """INFO's text, and the CONFIG settings where this login may read them. A refusal is entered
    in the server's ACL LOG, which operators watch: once refused, a login is not asked again for
    `CONFIG_REFUSED_RETRY_S`."""
    import redis  # present: `with_redis` checked

    text = info_text(client)
    login = _login(client)
    refused_at = refused.get(login)
    if refused_at is not None and time.monotonic() - refused_at < CONFIG_REFUSED_RETRY_S:
        return text, {}
    try:
        found = client.config_get(*SETTINGS)
    except redis.exceptions.ResponseError:  # NOPERM (ACL without +config|get), or CONFIG renamed away
        if len(refused) >= CONFIG_REFUSED_KEPT:  # params may name any host: bounded
            refused.clear()
        refused[login] = time.monotonic()
        return text, {}
    refused.pop(login, None)
    return text, {str(k): str(v) for k, v in found.items() if k is not None and v is not None}


@PACK.probe(
    "redis.persistence.status",
    """Redis persistence: whether it is loading its data, the last background save (BGSAVE)
    status (ok/err) and how long it took, changes since the last save and its time and age
    in seconds, whether a save is running; AOF on or off, its last write and last rewrite
    status and rewrites failed in a row. Where the agent's user may run CONFIG GET (ACL
    +config|get), also dir, dbfilename, appendfilename, the save points ("" when snapshots
    are off) and stop-writes-on-bgsave-error; else those are null and `visibility` says
    why (null when they were read). After a failed save,
    with stop-writes-on-bgsave-error yes and save points set, Redis refuses writes (MISCONF).""",
    timeout_s=15,
)
@one_turn
async def redis_persistence(ctx: ProbeContext, params: RedisParams) -> Persistence:
    refused: Refusals = ctx.remembered.get("redis.config_get_refused", dict)
    text, settings = await with_redis(ctx, params, partial(_info_and_settings, refused))
    return persistence(parse_info(text), settings)
