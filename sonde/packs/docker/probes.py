"""Containers, one container's details, its logs, images and daemon info."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from sonde.packs.base import NoParams, Params, ProbeUnavailable, Result
from sonde.packs.context import ProbeContext, unredacted
from sonde.packs.docker import PACK
from sonde.packs.docker.engine import EngineError, demultiplex, engine_get, get_json, socket_path, target
from sonde.packs.docker.logtail import FrameTail, RawTail
from sonde.packs.docker.parsers import (
    Container,
    ContainerDetails,
    DaemonInfo,
    Image,
    container,
    daemon_info,
    details,
    image,
)
from sonde.packs.docker.stats import ContainerRef
from sonde.packs.system.linescrub import CUT_MARK, CutLine, decode_line, redact_lines

LOGS_MAX_BYTES = 4 * 1024 * 1024


class ContainersParams(Params):
    all: bool = Field(default=True, strict=True, description="Include stopped containers.")
    limit: int = Field(default=50, ge=1, le=200, strict=True, description="At most this many containers.")


class Containers(Result):
    total: int
    counts_by_state: dict[str, int]
    containers: list[Container]
    truncated: bool


@PACK.probe(
    "docker.containers.list",
    """Docker containers (stopped ones too unless all=false): short ID, name, image, state
    (running, restarting, exited, ...), status text, health (healthy/unhealthy/starting),
    restart count, exit code, whether it was OOM-killed, created/started/finished times
    (ISO 8601 UTC) and published ports; with counts per state. Use it for 'what runs here'
    and 'which container keeps restarting or is unhealthy'.""",
    timeout_s=20,
)
async def containers_list(ctx: ProbeContext, params: ContainersParams) -> Containers:
    listed: list[dict[str, Any]] = await get_json(ctx, "/containers/json", {"all": int(params.all)})
    shown = []
    for summary in listed[: params.limit]:
        try:
            inspected = await get_json(ctx, f"/containers/{summary['Id']}/json")
        except ValueError:  # removed between the list and the inspect
            inspected = None
        shown.append(container(summary, inspected))
    return Containers(
        total=len(listed),
        counts_by_state=dict(sorted(Counter(row.get("State", "") for row in listed).items())),
        containers=shown,
        truncated=len(listed) > len(shown),
    )


class ContainerParams(Params):
    container: ContainerRef


@PACK.probe(
    "docker.container.inspect",
    """One container in detail: image, state flags (running, restarting, paused, OOM-killed,
    dead), PID, exit code and error, start/finish times, health status with failing streak
    and the last three health-check outputs, restart count and policy, command, memory and
    CPU limits, mounts, networks with IPs, exposed ports and compose project/service.
    Environment variable values are never returned (only their count).""",
    timeout_s=10,
)
async def container_inspect(ctx: ProbeContext, params: ContainerParams) -> ContainerDetails:
    return details(await get_json(ctx, f"/containers/{params.container}/json"))


class LogsParams(Params):
    container: ContainerRef
    lines: int = Field(default=100, ge=1, le=1000, strict=True, description="The last N lines.")
    stream: Literal["both", "stdout", "stderr"] = "both"


class LogLine(Result):
    stream: str
    time: str | None
    text: str


class ContainerLogs(Result):
    container: str
    lines: list[LogLine]
    truncated: bool


def log_lines(payload: bytes, multiplexed: bool, redact: Callable[[str], str] = unredacted) -> list[LogLine]:
    """Log lines from a logs body requested with ``timestamps=1``, as they will be sent.

    Each stream's texts are scrubbed as one text (`redact_lines`), so a key block or a
    YAML block scalar logged over several lines is hidden on each of them.
    """
    frames = demultiplex(payload) if multiplexed else [("stdout", payload)]
    lines: list[tuple[str, str | None, str]] = []
    omitted: list[int] = []  # of each line cut at `LINE_MAX_CHARS`: the characters left out
    for stream, data in frames:
        for raw in data.split(b"\n"):
            if not raw:
                continue
            decoded = decode_line(raw)
            omitted.append(decoded.omitted if isinstance(decoded, CutLine) else 0)
            stamp, _, text = decoded.partition(" ")
            has_time = len(stamp) >= 20 and stamp[4] == "-" and stamp[10] == "T"
            lines.append((stream, stamp if has_time else None, text if has_time else stamp + " " + text))
    texts = [text for _, _, text in lines]
    for stream in {stream for stream, _, _ in lines}:
        indexes = [index for index, (name, _, _) in enumerate(lines) if name == stream]
        for index, text in zip(indexes, redact_lines([texts[i] for i in indexes], redact), strict=True):
            texts[index] = text
    return [
        LogLine(stream=stream, time=time, text=text + (CUT_MARK.format(cut) if cut else ""))
        for (stream, time, _), text, cut in zip(lines, texts, omitted, strict=True)
    ]


@PACK.probe(
    "docker.container.logs",
    """The last `lines` log lines (at most 1000) of one container from stdout, stderr or
    both, oldest first, each with its stream and the Docker timestamp (RFC 3339). When those
    lines exceed 4 MiB the newest that fit are returned and `truncated` is true; a line
    longer than 4096 characters is cut and ends with "[line cut: N more characters]". Use it
    to see why a container exits or restarts.""",
    timeout_s=15,
)
async def container_logs(ctx: ProbeContext, params: LogsParams) -> ContainerLogs:
    inspected = await get_json(ctx, f"/containers/{params.container}/json")
    query: dict[str, str | int] = {
        "stdout": int(params.stream != "stderr"),
        "stderr": int(params.stream != "stdout"),
        "tail": params.lines,
        "timestamps": 1,
    }
    path = target(f"/containers/{params.container}/logs", query)
    tty = bool(inspected.get("Config", {}).get("Tty"))
    newest = RawTail(LOGS_MAX_BYTES) if tty else FrameTail(LOGS_MAX_BYTES)
    try:
        response = await engine_get(socket_path(ctx), path, newest)
    except EngineError as exc:
        raise ProbeUnavailable(str(exc)) from None
    lines = log_lines(response.body, multiplexed=not tty, redact=ctx.redact)
    return ContainerLogs(
        container=params.container, lines=lines[-params.lines :], truncated=response.truncated
    ).newest_last("lines")


class ImagesParams(Params):
    limit: int = Field(default=100, ge=1, le=500, strict=True, description="At most this many images.")


class Images(Result):
    total: int
    total_size_bytes: int
    images: list[Image]
    truncated: bool


@PACK.probe(
    "docker.images.list",
    """Docker images, largest first: short ID, repository tags, size in bytes, creation time
    and the number of containers using it where the daemon knows; with the total size.
    Use it when Docker fills the disk.""",
    timeout_s=15,
)
async def images_list(ctx: ProbeContext, params: ImagesParams) -> Images:
    every = sorted((image(raw) for raw in await get_json(ctx, "/images/json")), key=lambda i: -i.size_bytes)
    return Images(
        total=len(every),
        total_size_bytes=sum(i.size_bytes for i in every),
        images=every[: params.limit],
        truncated=len(every) > params.limit,
    )


@PACK.probe(
    "docker.daemon.info",
    """The Docker daemon: server and API version, OS, kernel, storage and cgroup driver,
    cgroup version, container counts (total/running/paused/stopped), images, CPUs, memory,
    data root and the daemon's own warnings.""",
    timeout_s=10,
)
async def daemon_info_probe(ctx: ProbeContext, params: NoParams) -> DaemonInfo:
    return daemon_info(await get_json(ctx, "/info"), await get_json(ctx, "/version"))
