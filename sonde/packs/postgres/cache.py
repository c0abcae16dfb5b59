"""PostgreSQL's buffer cache hit ratio, in all and per database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import PACK
from sonde.packs.postgres.connection import PostgresParams, one_turn, run_queries

CACHE = """
SELECT datname AS name, blks_hit AS hits, blks_read AS reads, stats_reset::text AS stats_reset_at,
       extract(epoch FROM now() - stats_reset)::float8 AS since_reset_s
FROM pg_stat_database WHERE datname IS NOT NULL ORDER BY blks_read DESC, datname"""


class DatabaseCache(Result):
    name: str
    hits: int
    reads: int
    hit_percent: float | None
    stats_reset_at: str | None  # null: never reset with pg_stat_reset
    since_reset_s: float | None


class CacheHitRatio(Result):
    hit_percent: float | None
    hits: int
    reads: int
    databases: list[DatabaseCache]
    truncated: bool


class CacheParams(PostgresParams):
    limit: int = Field(
        default=50, ge=1, le=1000, strict=True, description="Databases listed, most disk reads first."
    )


def hit_percent(hits: int | Decimal, reads: int | Decimal) -> float | None:
    total = hits + reads
    return round(float(hits) * 100 / float(total), 2) if total else None


def cache_ratio(rows: list[dict[str, Any]], limit: int) -> CacheHitRatio:
    """Totals over every row of ``rows``; the first ``limit`` rows listed per database."""
    hits = sum(int(row["hits"]) for row in rows)
    reads = sum(int(row["reads"]) for row in rows)
    return CacheHitRatio(
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
    with pg_stat_reset): a ratio over months hides this hour's. Below about 90 % on a busy server, shared_buffers may be too small for the working set.""",
    timeout_s=15,
)
@one_turn
async def cache_hit_ratio(ctx: ProbeContext, params: CacheParams) -> CacheHitRatio:
    [rows] = await run_queries(ctx, params, (CACHE, ()))
    return cache_ratio(rows, params.limit)
