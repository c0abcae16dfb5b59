"""A stats snapshot per container: CPU %, memory, network and block I/O, PIDs.

``GET /containers/{id}/stats?stream=false`` answers one sample that carries the
previous one (``precpu_stats``), about a second earlier. CPU % is the
container's share of the host's CPU time between the two, times the number of
CPUs (so 200 % is two full CPUs), as ``docker stats`` shows it. Memory "used"
leaves out the page cache the kernel can reclaim (``inactive_file`` on cgroup
v2, ``total_inactive_file`` on v1), again as ``docker stats`` does. Network and
block I/O byte counts have no previous reading: they are totals since the
container started, as ``docker stats`` shows them.
"""

from __future__ import annotations

from typing import Annotated, Any

import trio
from pydantic import Field

from sonde.packs.base import Params, ProbeUnavailable, Result
from sonde.packs.context import ProbeContext
from sonde.packs.docker import PACK
from sonde.packs.docker.engine import get_json
from sonde.protocol.names import worded

CONTAINER_PATTERN = worded(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
    "1 to 128 letters, digits, '_', '.' or '-', the first a letter or digit",
)
ContainerRef = Annotated[
    str, Field(pattern=CONTAINER_PATTERN, strict=True, description="Container name or ID.")
]


class StatsParams(Params):
    container: ContainerRef | None = Field(
        default=None, description="One container; default every running one."
    )
    limit: int = Field(default=10, ge=1, le=50, strict=True, description="At most this many containers.")


class ContainerStats(Result):
    id: str
    name: str
    cpu_percent: float | None
    memory_used_bytes: int | None
    memory_limit_bytes: int | None
    memory_percent: float | None
    network_rx_bytes: int = Field(description="Bytes received since the container started.")
    network_tx_bytes: int = Field(description="Bytes sent since the container started.")
    block_read_bytes: int = Field(description="Bytes read from block devices since the container started.")
    block_write_bytes: int = Field(description="Bytes written to block devices since the container started.")
    pids: int | None


class StatsSnapshot(Result):
    containers: list[ContainerStats]
    truncated: bool


def cpu_percent(stats: dict[str, Any]) -> float | None:
    now, before = stats.get("cpu_stats") or {}, stats.get("precpu_stats") or {}
    cpu_delta = now.get("cpu_usage", {}).get("total_usage", 0) - before.get("cpu_usage", {}).get(
        "total_usage", 0
    )
    system_delta = now.get("system_cpu_usage", 0) - before.get("system_cpu_usage", 0)
    if not before.get("system_cpu_usage") or system_delta <= 0 or cpu_delta < 0:
        return None
    cpus = now.get("online_cpus") or len(now.get("cpu_usage", {}).get("percpu_usage") or []) or 1
    return round(float(cpu_delta / system_delta * cpus * 100), 2)


def memory_used(memory: dict[str, Any]) -> int | None:
    usage = memory.get("usage")
    if usage is None:
        return None
    detail = memory.get("stats") or {}
    cache = detail.get("inactive_file", detail.get("total_inactive_file", 0))
    return int(max(usage - cache, 0) if cache < usage else usage)


def _block_io(blkio: dict[str, Any]) -> tuple[int, int]:
    read = write = 0
    for entry in blkio.get("io_service_bytes_recursive") or []:
        operation = str(entry.get("op", "")).lower()
        if operation == "read":
            read += entry.get("value", 0)
        elif operation == "write":
            write += entry.get("value", 0)
    return read, write


def container_stats(stats: dict[str, Any]) -> ContainerStats:
    memory = stats.get("memory_stats") or {}
    used = memory_used(memory)
    limit = memory.get("limit")
    networks = (stats.get("networks") or {}).values()
    read, write = _block_io(stats.get("blkio_stats") or {})
    return ContainerStats(
        id=str(stats.get("id", ""))[:12],
        name=str(stats.get("name", "")).lstrip("/"),
        cpu_percent=cpu_percent(stats),
        memory_used_bytes=used,
        memory_limit_bytes=limit,
        memory_percent=round(used * 100 / limit, 2) if used is not None and limit else None,
        network_rx_bytes=sum(n.get("rx_bytes", 0) for n in networks),
        network_tx_bytes=sum(n.get("tx_bytes", 0) for n in networks),
        block_read_bytes=read,
        block_write_bytes=write,
        pids=(stats.get("pids_stats") or {}).get("current"),
    )


@PACK.probe(
    "docker.containers.stats",
    """A stats snapshot of one container or of every running one (at most `limit`): CPU
    percent over about the last second (100 = one full CPU), memory used without reclaimable
    cache, memory limit and percent of it, and PIDs, as they are now; network received/sent
    and block read/written bytes are totals since the container started, not rates. Use it
    for 'which container eats CPU or memory'.""",
    timeout_s=20,
)
async def containers_stats(ctx: ProbeContext, params: StatsParams) -> StatsSnapshot:
    if params.container is not None:  # an unknown name is the caller's ValueError, not a nursery's group
        return StatsSnapshot(containers=[await sample_stats(ctx, params.container)], truncated=False)
    listed = await get_json(ctx, "/containers/json")
    ids = [row["Id"] for row in listed[: params.limit]]
    found: dict[str, ContainerStats] = {}
    failures: list[ProbeUnavailable | PermissionError] = []

    async def sample(ref: str) -> None:
        try:
            found[ref] = await sample_stats(ctx, ref)
        except ValueError:  # removed between the list and the stats
            pass
        except (ProbeUnavailable, PermissionError) as exc:  # raised below as itself, not in a group
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for ref in ids:
            nursery.start_soon(sample, ref)
    if failures:
        raise failures[0]
    return StatsSnapshot(
        containers=[found[ref] for ref in ids if ref in found], truncated=len(listed) > len(ids)
    )


async def sample_stats(ctx: ProbeContext, ref: str) -> ContainerStats:
    """One container's stats now; a ValueError when the Engine knows no such container."""
    return container_stats(await get_json(ctx, f"/containers/{ref}/stats", {"stream": "false"}))
