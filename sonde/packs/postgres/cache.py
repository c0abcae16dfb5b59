"""PostgreSQL's buffer cache hit ratio, in all and per database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import PACK
from sonde.packs.postgres.activity import seconds_since
from sonde.packs.postgres.connection import PostgresParams, one_turn, run_queries

# each database's counts run since its statistics were reset, or (never reset: stats_reset NULL)
# since the server started at least: a clean restart keeps them, a crash loses them
CACHE = """
SELECT datname AS name, blks_hit AS hits, blks_read AS reads, stats_reset::text AS stats_reset_at,
       extract(epoch FROM now() - stats_reset)::float8 AS since_reset_s,
       extract(epoch FROM now() - coalesce(stats_reset, pg_postmaster_start_time()))::float8 AS counted_s
FROM pg_stat_database WHERE datname IS NOT NULL ORDER BY blks_read DESC, datname"""
SERVER_START = """
SELECT pg_postmaster_start_time()::text AS server_started_at,
       extract(epoch FROM now() - pg_postmaster_start_time())::float8 AS since_server_start_s"""


class DatabaseCache(Result):
    name: str
    hits: int
    reads: int
    hit_percent: float | None
    stats_reset_at: str | None  # null: never reset with pg_stat_reset
    since_reset_s: float | None
    counted_s: float  # how long its counts have run: since the reset, or else since the server started


class CountedFrom(Result):
    """How long the totals have been counting, and from what."""

    counted_s: float | None  # the longest of the databases' counted_s; null with no database
    counted_from: Literal["statistics reset", "server start"] | None


class CacheHitRatio(CountedFrom):
    hit_percent: float | None
    hits: int
    reads: int
    databases: list[DatabaseCache]
    truncated: bool
    server_started_at: str
    since_server_start_s: float


class CacheParams(PostgresParams):
    limit: int = Field(
        default=50, ge=1, le=1000, strict=True, description="Databases listed, most disk reads first."
    )


def hit_percent(hits: int | Decimal, reads: int | Decimal) -> float | None:
    total = hits + reads
    return round(float(hits) * 100 / float(total), 2) if total else None


def counted_from(rows: list[dict[str, Any]]) -> CountedFrom:
    """The totals' span: that of the database counting longest, since a reset or the server's start."""
    if not rows:
        return CountedFrom(counted_s=None, counted_from=None)
    longest = max(rows, key=lambda row: row["counted_s"])
    source = "statistics reset" if longest["stats_reset_at"] is not None else "server start"
    return CountedFrom(counted_s=seconds_since(longest["counted_s"]), counted_from=source)


def cache_ratio(rows: list[dict[str, Any]], limit: int, server: dict[str, Any]) -> CacheHitRatio:
    """Totals over every row of ``rows``; the first ``limit`` rows listed per database; ``server``:
    `SERVER_START`'s row."""
    hits = sum(int(row["hits"]) for row in rows)
    reads = sum(int(row["reads"]) for row in rows)
    return CacheHitRatio(
        **counted_from(rows).model_dump(),
        server_started_at=server["server_started_at"],
        since_server_start_s=seconds_since(server["since_server_start_s"]),
        hit_percent=hit_percent(hits, reads),
        hits=hits,
        reads=reads,
        databases=[
            DatabaseCache(
                name=row["name"],
                hits=row["hits"],
                reads=row["reads"],
                hit_percent=hit_percent(row["hits"], row["reads"]),
                stats_reset_at=row.get("stats_reset_at"),
                since_reset_s=row.get("since_reset_s"),
                counted_s=seconds_since(row["counted_s"]),
            )
            for row in rows[:limit]
        ],
        truncated=len(rows) > limit,
    )


@PACK.probe(
    "postgres.cache.hit_ratio",
    """Buffer cache hit ratio since the statistics were last reset: blocks found in shared
    buffers vs read from disk (or the OS cache), in percent, overall and per database, with
    when each database's were reset (`stats_reset_at`, `since_reset_s`; null: never reset
    with pg_stat_reset) and how long its counts have run (`counted_s`: since the reset, or
    when never reset since the server started, `server_started_at` and
    `since_server_start_s`; a clean restart keeps the counts, so they may go back further).
    `counted_s` and `counted_from` ('statistics reset' or 'server start') at the top say the
    same of the totals, from the database counting longest: a ratio over months hides this
    hour's, one over minutes says little. Below about 90 % on a busy server, over hours or
    more, shared_buffers may be too small for the working set.""",
    timeout_s=15,
)
@one_turn
async def cache_hit_ratio(ctx: ProbeContext, params: CacheParams) -> CacheHitRatio:
    rows, [server] = await run_queries(ctx, params, (CACHE, ()), (SERVER_START, ()))
    return cache_ratio(rows, params.limit, server)
