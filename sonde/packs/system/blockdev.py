"""Block devices from ``lsblk -J -b``, with per-disk I/O counters.

lsblk nests partitions (and LVM/crypt children) under ``children``;
`flatten_lsblk` walks the tree into rows that name their parent. Older lsblk
versions print numbers and booleans as strings ("8589934592", "0"/"1"), newer
ones as JSON numbers and booleans: `_as_int` and `_as_bool` accept both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import psutil
from pydantic import Field

from sonde.packs.base import Params, ProbeUnavailable, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK

LSBLK_COLUMNS = "NAME,KNAME,PATH,TYPE,SIZE,RO,RM,ROTA,MODEL,FSTYPE,LABEL,UUID,MOUNTPOINT"
LSBLK_ARGV = ("lsblk", "-J", "-b", "-o", LSBLK_COLUMNS)


class BlockParams(Params):
    limit: int = Field(default=200, ge=1, le=1000, strict=True, description="At most this many devices.")


class IoCounters(Result):
    read_bytes: int
    write_bytes: int
    read_count: int
    write_count: int


class BlockDevice(Result):
    name: str
    path: str | None
    type: str | None
    parent: str | None
    size_bytes: int | None
    read_only: bool | None
    removable: bool | None
    rotational: bool | None
    model: str | None
    fstype: str | None
    label: str | None
    uuid: str | None
    mountpoint: str | None
    io: IoCounters | None


class BlockDevices(Result):
    devices: list[BlockDevice]
    truncated: bool


def _as_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    return str(value).strip() in {"1", "true"}


def _text(value: Any) -> str | None:
    return str(value).strip() or None if value is not None else None


def flatten_lsblk(devices: Iterable[dict[str, Any]], parent: str | None = None) -> list[BlockDevice]:
    """lsblk's device tree as a flat list, parents before their children."""
    rows: list[BlockDevice] = []
    for device in devices:
        name = str(device.get("name", ""))
        rows.append(
            BlockDevice(
                name=name,
                path=_text(device.get("path")),
                type=_text(device.get("type")),
                parent=parent,
                size_bytes=_as_int(device.get("size")),
                read_only=_as_bool(device.get("ro")),
                removable=_as_bool(device.get("rm")),
                rotational=_as_bool(device.get("rota")),
                model=_text(device.get("model")),
                fstype=_text(device.get("fstype")),
                label=_text(device.get("label")),
                uuid=_text(device.get("uuid")),
                mountpoint=_text(device.get("mountpoint")),
                io=None,
            )
        )
        rows += flatten_lsblk(device.get("children", []), name)
    return rows


def with_io(rows: list[BlockDevice], counters: dict[str, Any]) -> list[BlockDevice]:
    """``rows`` with I/O counters from ``psutil.disk_io_counters(perdisk=True)`` by kernel name."""
    out = []
    for row in rows:
        kname = (row.path or row.name).rsplit("/", 1)[-1]
        stats = counters.get(kname) or counters.get(row.name)
        io = (
            IoCounters(
                read_bytes=stats.read_bytes,
                write_bytes=stats.write_bytes,
                read_count=stats.read_count,
                write_count=stats.write_count,
            )
            if stats is not None
            else None
        )
        out.append(row.model_copy(update={"io": io}))
    return out


@PACK.probe(
    "system.block.devices",
    """Block devices (disks, partitions, LVM, RAID, loop) from lsblk: name, path, type,
    parent device, size in bytes, read-only/removable/rotational flags, model, filesystem
    type, label, UUID and mount point, with read/write bytes and operation counts since
    boot per device. Use it for 'which disks does this machine have' or 'where is sdb1
    mounted'.""",
    timeout_s=10,
    requires=Requirements(commands=("lsblk",)),
)
async def block_devices(ctx: ProbeContext, params: BlockParams) -> BlockDevices:
    output = await ctx.run(list(LSBLK_ARGV))
    if output.returncode != 0:
        raise ProbeUnavailable(f"lsblk failed: {output.stderr.strip()[:300]}")
    rows = flatten_lsblk(json.loads(output.stdout).get("blockdevices", []))
    counters: dict[str, Any] = await ctx.in_thread(psutil.disk_io_counters, True) or {}
    rows = with_io(rows, counters)
    return BlockDevices(devices=rows[: params.limit], truncated=len(rows) > params.limit)
