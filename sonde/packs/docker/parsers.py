"""Engine API JSON -> typed results. Pure: documents in, models out.

Shapes (API 1.41-1.47): ``GET /containers/json`` gives ``Names: ["/web"]``,
``State: "running"``, ``Status: "Up 2 hours (healthy)"`` and ``Ports``;
``GET /containers/{id}/json`` adds ``RestartCount``, ``State.Health`` and
``State.ExitCode``; times are RFC 3339 with nanoseconds, and
``0001-01-01T00:00:00Z`` means never.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from sonde.packs.base import Result
from sonde.packs.system.info import iso_utc

NEVER = "0001-01-01T00:00:00Z"
HEALTH_IN_STATUS = re.compile(r"\((healthy|unhealthy|health: starting)\)")
ARG_MAX_CHARS = 200
HEALTH_OUTPUT_MAX_CHARS = 500


class Port(Result):
    ip: str | None
    private_port: int
    public_port: int | None
    type: str


class Container(Result):
    id: str
    name: str
    image: str
    state: str
    status: str
    health: str | None
    restart_count: int | None
    exit_code: int | None
    oom_killed: bool | None
    created: str | None  # None for a time past the year 9999 (`iso_utc`): whatever the API says
    started_at: str | None
    finished_at: str | None
    ports: list[Port]


def rfc3339(text: str | None) -> str | None:
    """Docker's RFC 3339 time (nanoseconds, 'Z') as ISO 8601 UTC seconds; the zero time is None,
    and so is one whose UTC time falls outside the years 1-9999."""
    if not text or text.startswith("0001-01-01"):
        return None
    main = re.sub(r"\.\d+", "", text).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(main).astimezone(datetime.UTC).isoformat()
    except OverflowError:
        return None


def health_from_status(status: str) -> str | None:
    match = HEALTH_IN_STATUS.search(status)
    return match[1].replace("health: ", "") if match else None


def ports(raw: list[dict[str, Any]] | None) -> list[Port]:
    return [
        Port(
            ip=p.get("IP"),
            private_port=p["PrivatePort"],
            public_port=p.get("PublicPort"),
            type=p.get("Type", "tcp"),
        )
        for p in raw or []
    ]


def container(summary: dict[str, Any], inspect: dict[str, Any] | None) -> Container:
    """One row of ``/containers/json``, completed from its ``/containers/{id}/json`` when given."""
    state = (inspect or {}).get("State", {})
    health = state.get("Health", {}).get("Status") if state.get("Health") else None
    names = summary.get("Names") or [""]
    return Container(
        id=summary["Id"][:12],
        name=names[0].lstrip("/"),
        image=summary.get("Image", ""),
        state=summary.get("State", ""),
        status=summary.get("Status", ""),
        health=health or health_from_status(summary.get("Status", "")),
        restart_count=inspect.get("RestartCount") if inspect else None,
        exit_code=state.get("ExitCode") if inspect else None,
        oom_killed=state.get("OOMKilled") if inspect else None,
        created=iso_utc(summary.get("Created", 0)),
        started_at=rfc3339(state.get("StartedAt")),
        finished_at=rfc3339(state.get("FinishedAt")),
        ports=ports(summary.get("Ports")),
    )


class HealthCheck(Result):
    started: str | None
    exit_code: int | None
    output: str


class Mount(Result):
    type: str
    source: str | None
    destination: str
    read_write: bool


class ContainerDetails(Result):
    id: str
    name: str
    image: str
    image_id: str
    created: str | None
    status: str
    running: bool
    restarting: bool
    paused: bool
    oom_killed: bool
    dead: bool
    pid: int | None
    exit_code: int | None
    error: str | None
    started_at: str | None
    finished_at: str | None
    health: str | None
    failing_streak: int | None
    health_log: list[HealthCheck]
    restart_count: int
    restart_policy: str | None
    max_retries: int | None
    command: list[str]
    tty: bool
    env_var_count: int
    memory_limit_bytes: int | None
    cpu_limit: float | None
    mounts: list[Mount]
    networks: dict[str, str | None]
    ports: list[str]
    compose_project: str | None
    compose_service: str | None


def _args(values: list[str] | str | None) -> list[str]:
    if values is None:
        return []
    items = [values] if isinstance(values, str) else values
    return [item[:ARG_MAX_CHARS] for item in items[:50]]


def details(inspect: dict[str, Any]) -> ContainerDetails:
    """A summary of ``/containers/{id}/json``. Environment values are never copied (secrets)."""
    state = inspect.get("State", {})
    config = inspect.get("Config", {})
    host = inspect.get("HostConfig", {})
    health = state.get("Health") or {}
    labels = config.get("Labels") or {}
    policy = host.get("RestartPolicy") or {}
    nano_cpus = host.get("NanoCpus") or 0
    return ContainerDetails(
        id=inspect["Id"][:12],
        name=inspect.get("Name", "").lstrip("/"),
        image=config.get("Image", ""),
        image_id=inspect.get("Image", ""),
        created=rfc3339(inspect.get("Created")),
        status=state.get("Status", ""),
        running=bool(state.get("Running")),
        restarting=bool(state.get("Restarting")),
        paused=bool(state.get("Paused")),
        oom_killed=bool(state.get("OOMKilled")),
        dead=bool(state.get("Dead")),
        pid=state.get("Pid") or None,
        exit_code=state.get("ExitCode"),
        error=state.get("Error") or None,
        started_at=rfc3339(state.get("StartedAt")),
        finished_at=rfc3339(state.get("FinishedAt")),
        health=health.get("Status"),
        failing_streak=health.get("FailingStreak"),
        health_log=[
            HealthCheck(
                started=rfc3339(entry.get("Start")),
                exit_code=entry.get("ExitCode"),
                output=str(entry.get("Output", ""))[:HEALTH_OUTPUT_MAX_CHARS],
            )
            for entry in (health.get("Log") or [])[-3:]
        ],
        restart_count=inspect.get("RestartCount", 0),
        restart_policy=policy.get("Name") or None,
        max_retries=policy.get("MaximumRetryCount"),
        command=_args(config.get("Entrypoint")) + _args(config.get("Cmd")),
        tty=bool(config.get("Tty")),
        env_var_count=len(config.get("Env") or []),
        memory_limit_bytes=host.get("Memory") or None,
        cpu_limit=nano_cpus / 1e9 if nano_cpus else None,
        mounts=[
            Mount(
                type=m.get("Type", ""),
                source=m.get("Source"),
                destination=m.get("Destination", ""),
                read_write=bool(m.get("RW")),
            )
            for m in inspect.get("Mounts") or []
        ],
        networks={
            name: (net or {}).get("IPAddress") or None
            for name, net in (inspect.get("NetworkSettings", {}).get("Networks") or {}).items()
        },
        ports=sorted((inspect.get("NetworkSettings", {}).get("Ports") or {}).keys()),
        compose_project=labels.get("com.docker.compose.project"),
        compose_service=labels.get("com.docker.compose.service"),
    )


class Image(Result):
    id: str
    tags: list[str]
    size_bytes: int
    created: str | None  # None for a time past the year 9999: an image's builder sets it
    containers: int | None


def image(raw: dict[str, Any]) -> Image:
    containers = raw.get("Containers")
    return Image(
        id=raw["Id"].removeprefix("sha256:")[:12],
        tags=[tag for tag in raw.get("RepoTags") or [] if tag != "<none>:<none>"],
        size_bytes=raw.get("Size", 0),
        created=iso_utc(raw.get("Created", 0)),
        containers=containers if isinstance(containers, int) and containers >= 0 else None,
    )


class DaemonInfo(Result):
    server_version: str | None
    api_version: str | None
    operating_system: str | None
    kernel_version: str | None
    storage_driver: str | None
    cgroup_driver: str | None
    cgroup_version: str | None
    containers: int
    running: int
    paused: int
    stopped: int
    images: int
    cpus: int | None
    memory_bytes: int | None
    root_dir: str | None
    warnings: list[str]


def daemon_info(info: dict[str, Any], version: dict[str, Any]) -> DaemonInfo:
    return DaemonInfo(
        server_version=info.get("ServerVersion") or version.get("Version"),
        api_version=version.get("ApiVersion"),
        operating_system=info.get("OperatingSystem"),
        kernel_version=info.get("KernelVersion"),
        storage_driver=info.get("Driver"),
        cgroup_driver=info.get("CgroupDriver"),
        cgroup_version=info.get("CgroupVersion"),
        containers=info.get("Containers", 0),
        running=info.get("ContainersRunning", 0),
        paused=info.get("ContainersPaused", 0),
        stopped=info.get("ContainersStopped", 0),
        images=info.get("Images", 0),
        cpus=info.get("NCPU"),
        memory_bytes=info.get("MemTotal"),
        root_dir=info.get("DockerRootDir"),
        warnings=[str(w)[:300] for w in (info.get("Warnings") or [])[:20]],
    )
