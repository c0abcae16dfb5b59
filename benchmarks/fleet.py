"""Simulated agents from the harness's side: enroll them, run them in worker processes.

`SimulatedFleet` is a directory of agent configs enrolled with one hub data
directory. `ensure_enrolled` tops it up to a size: enrollment tokens are
made on the hub's SQLite file (as `sonde hub token create` does beside a
live hub), then worker processes enroll their share through the real REST
endpoint. `running_agents` runs the first N of them, spread over worker
processes, and stops them when its block ends.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from benchmarks.fleet_worker import agent_name
from benchmarks.hub import RunningHub, Workspace
from benchmarks.procs import Child, open_child, python_module
from sonde.hub.db import open_database, write_transaction
from sonde.hub.enrollment_tokens import create_enrollment_token

TOKEN_TTL_S = 3600.0
ENROLL_PER_WORKER = 2500
EVENT_TIMEOUT_S = 600.0


@dataclass
class SimulatedFleet:
    configs_dir: Path
    # the agents describe the installed packs a real agent here offers besides the bench pack (scale)
    describe_installed: bool = False
    enrolled: int = 0
    enroll_seconds: float = 0.0

    def names(self, count: int) -> list[str]:
        return [agent_name(i) for i in range(count)]


def make_tokens(db_path: Path, count: int) -> list[str]:
    """``count`` single-use enrollment tokens, written in one transaction (runs in a thread)."""
    db = open_database(db_path)
    try:
        with write_transaction(db):
            return [create_enrollment_token(db, TOKEN_TTL_S)[1] for _ in range(count)]
    finally:
        db.close()


def write_spec(workspace: Workspace, name: str, spec: dict[str, Any]) -> Path:
    path = workspace.directory("specs") / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


async def ensure_enrolled(workspace: Workspace, hub: RunningHub, fleet: SimulatedFleet, count: int) -> None:
    """Enroll agents until ``fleet`` holds ``count``; `RuntimeError` if any enrollment failed."""
    missing = count - fleet.enrolled
    if missing <= 0:
        return
    started = trio.current_time()
    tokens = await trio.to_thread.run_sync(make_tokens, hub.data.data_dir / "sonde.db", missing)
    workers = max(1, min(4, math.ceil(missing / ENROLL_PER_WORKER)))
    share = math.ceil(missing / workers)
    failures: list[str] = []
    async with trio.open_nursery() as nursery:
        for w in range(workers):
            chunk = tokens[w * share : (w + 1) * share]
            first = fleet.enrolled + w * share
            spec = {
                "mode": "enroll",
                "hub_url": hub.url,
                "dir": str(fleet.configs_dir),
                "first": first,
                "code_hash": workspace.code_hash,
                "describe_installed": fleet.describe_installed,
            }
            nursery.start_soon(enroll_chunk, workspace, f"enroll-{first}", spec | {"tokens": chunk}, failures)
    if failures:
        raise RuntimeError(f"{len(failures)} enrollments failed, e.g. {failures[:3]}")
    fleet.enrolled = count
    fleet.enroll_seconds += trio.current_time() - started


async def enroll_chunk(workspace: Workspace, name: str, spec: dict[str, Any], failures: list[str]) -> None:
    path = write_spec(workspace, name, spec)
    argv = python_module("benchmarks.fleet_worker", str(path))
    async with open_child(name, argv, env=workspace.env("agents"), log_dir=workspace.log_dir) as child:
        event = await child.read_event(EVENT_TIMEOUT_S)
    if event.get("event") != "enrolled":
        raise RuntimeError(f"{name}: unexpected {event}")
    failures.extend(event["first_errors"] if event["errors"] else [])


@dataclass
class RunningAgents:
    workers: list[Child]
    count: int
    acked: int = 0
    acked_seconds: float = 0.0
    ack_seconds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@asynccontextmanager
async def running_agents(
    workspace: Workspace,
    hub: RunningHub,
    fleet: SimulatedFleet,
    count: int,
    *,
    workers: int = 1,
    hold_s: float = 600.0,
    connect_timeout_s: float = 120.0,
    connect_concurrency: int = 64,
    hang_every: int = 0,
    hang_flag: Path | None = None,
    python_options: Callable[[int], Sequence[str]] = lambda worker: (),
) -> AsyncIterator[RunningAgents]:
    """Run agents 0..count-1 in ``workers`` processes; yields once every worker reported its acks.

    Each worker stops its agents by itself after ``hold_s``, or when the block ends.
    ``python_options(w)`` go between the interpreter and ``-m`` for worker ``w`` (a profiler).
    """
    if count > fleet.enrolled:
        raise ValueError(f"only {fleet.enrolled} agents are enrolled, {count} asked for")
    workers = max(1, min(workers, count))
    share = math.ceil(count / workers)
    async with AsyncExitStack() as stack:
        children: list[Child] = []
        for w in range(workers):
            first, size = w * share, min(share, count - w * share)
            if size <= 0:
                break
            spec = {
                "mode": "run",
                "hub_url": hub.url,
                "dir": str(fleet.configs_dir),
                "first": first,
                "count": size,
                "max_seconds": hold_s + connect_timeout_s,
                "connect_timeout_s": connect_timeout_s,
                "connect_concurrency": connect_concurrency,
                "hang_every": hang_every,
                "hang_flag": str(hang_flag) if hang_flag else None,
                "code_hash": workspace.code_hash,
                "describe_installed": fleet.describe_installed,
            }
            path = write_spec(workspace, f"agents-{first}", spec)
            argv = python_module("benchmarks.fleet_worker", str(path))
            argv[1:1] = python_options(w)
            env = workspace.env("agents")
            child = await stack.enter_async_context(
                open_child(f"agents-{first}", argv, env=env, log_dir=workspace.log_dir)
            )
            children.append(child)
        running = RunningAgents(children, count)
        await collect_acks(running, connect_timeout_s + 30)
        yield running
        await stop_workers(children)


async def collect_acks(running: RunningAgents, timeout_s: float) -> None:
    async def one(child: Child) -> None:
        event = await child.read_event(timeout_s)
        if event.get("event") != "acked":
            raise RuntimeError(f"{child.name}: unexpected {event}")
        running.acked += event["count"]
        running.acked_seconds = max(running.acked_seconds, event["seconds"])
        running.ack_seconds.extend(event["ack_seconds"])
        running.errors.extend(event["errors"])

    async with trio.open_nursery() as nursery:
        for child in running.workers:
            nursery.start_soon(one, child)


async def stop_workers(children: list[Child], timeout_s: float = 20.0) -> None:
    """Close the workers' stdin (they stop their agents, code 1000) and wait for them to exit."""

    async def one(child: Child) -> None:
        await child.close_stdin()
        with trio.move_on_after(timeout_s):
            await child.process.wait()

    async with trio.open_nursery() as nursery:
        for child in children:
            nursery.start_soon(one, child)
