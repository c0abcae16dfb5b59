"""The busiest processes, by CPU or by memory.

CPU percent needs two readings: every process is primed with ``cpu_percent()``,
the probe waits `CPU_SAMPLE_S` with `trio.sleep`, then reads again. Fields the OS
refuses to show come back as null.

A scan of every process costs much (some 12,000 processes on a busy machine), so calls
that arrive while one runs wait for it and rank its readings (`TopScans`: one scan at a
time per agent); none is kept once it is done, so every answer is from a fresh sample.
The walks stop when the probe running them gives up (`sonde.packs.system.abandon`); the
calls that waited for it then scan again.

The agent's own process is left out of the CPU ranking: the sampling itself
costs it CPU, and an operator must not be told Sonde is the busiest process
because it was measuring. It stays in the memory ranking and the count.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil
import trio
from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.abandon import StopCheck, in_thread_until_given_up
from sonde.packs.system.info import iso_utc

PROC_ROOT = Path("/proc")  # a directory per process: /proc/PID
CPU_SAMPLE_S = 0.2
CMDLINE_MAX_CHARS = 512
SUMMARY_ATTRS = ["name", "username", "memory_info", "status", "cmdline", "create_time"]


class TopParams(Params):
    sort_by: Literal["cpu", "memory"] = "cpu"
    limit: int = Field(default=10, ge=1, le=100, strict=True, description="How many processes to return.")


class ProcessSummary(Result):
    pid: int
    name: str | None
    username: str | None
    cpu_percent: float | None
    memory_percent: float | None
    rss_bytes: int | None
    status: str | None
    cmdline: str | None
    create_time: str | None


class TopProcesses(Result):
    sort_by: Literal["cpu", "memory"]
    sample_s: float
    process_count: int
    processes: list[ProcessSummary]


def join_cmdline(args: list[str] | None, max_chars: int = CMDLINE_MAX_CHARS) -> str | None:
    """``args`` joined by spaces, cut to ``max_chars`` (the last one then an ellipsis)."""
    if args is None:
        return None
    line = " ".join(args)
    return line if len(line) <= max_chars else line[: max_chars - 1] + "…"


def summarize(pid: int, cpu: float | None, memory: float | None, values: dict[str, Any]) -> ProcessSummary:
    """A `ProcessSummary` from ``Process.as_dict(SUMMARY_ATTRS, ad_value=None)`` output."""
    memory_info = values.get("memory_info")
    create_time = values.get("create_time")
    return ProcessSummary(
        pid=pid,
        name=values.get("name"),
        username=values.get("username"),
        cpu_percent=None if cpu is None else round(cpu, 1),
        memory_percent=None if memory is None else round(memory, 2),
        rss_bytes=memory_info.rss if memory_info is not None else None,
        status=values.get("status"),
        cmdline=join_cmdline(values.get("cmdline")),
        create_time=iso_utc(create_time) if create_time is not None else None,
    )


@dataclass(frozen=True)
class ProcessLabel:
    """What names a process to a reader: its name and, when asked for, its user."""

    name: str | None
    user: str | None = None


def process_labels(pids: Iterable[int], with_user: bool = False) -> dict[int, ProcessLabel]:
    """PID -> its name (and user, ``with_user``), each None where the process exited or hides it."""
    attrs = ["name", "username"] if with_user else ["name"]
    labels: dict[int, ProcessLabel] = {}
    for pid in pids:
        try:
            values = psutil.Process(pid).as_dict(attrs, ad_value=None)
        except psutil.Error:  # exited meanwhile
            values = {}
        labels[pid] = ProcessLabel(values.get("name"), values.get("username"))
    return labels


@dataclass(frozen=True)
class Reading:
    process: psutil.Process
    cpu_percent: float | None
    memory_percent: float | None

    def rank(self, sort_by: str) -> tuple[float, int]:
        value = self.cpu_percent if sort_by == "cpu" else self.memory_percent
        return (value if value is not None else -1.0, -self.process.pid)


def _unless_denied(read: Callable[[], float]) -> float | None:
    try:
        return read()
    except psutil.AccessDenied:
        return None


def _prime_all(stop: threading.Event | None = None) -> list[psutil.Process]:
    check, primed = StopCheck(stop), []
    for pid in psutil.pids():
        check.step()
        try:
            process = psutil.Process(pid)
            _unless_denied(process.cpu_percent)
        except psutil.NoSuchProcess:  # exited meanwhile
            continue
        primed.append(process)
    return primed


def _read_all(processes: list[psutil.Process], stop: threading.Event | None = None) -> list[Reading]:
    check, readings = StopCheck(stop), []
    for process in processes:
        check.step()
        try:
            cpu = _unless_denied(process.cpu_percent)
            memory = _unless_denied(process.memory_percent)
        except psutil.NoSuchProcess:
            continue
        readings.append(Reading(process, cpu, memory))
    return readings


def _top(
    readings: list[Reading], sort_by: str, limit: int, stop: threading.Event | None = None
) -> list[ProcessSummary]:
    if sort_by == "cpu":
        own = os.getpid()
        readings = [reading for reading in readings if reading.process.pid != own]
    ranked = sorted(readings, key=lambda reading: reading.rank(sort_by), reverse=True)
    check, top = StopCheck(stop), []
    for reading in ranked:
        check.step()
        try:
            values = reading.process.as_dict(SUMMARY_ATTRS, ad_value=None)
        except psutil.NoSuchProcess:
            continue
        top.append(summarize(reading.process.pid, reading.cpu_percent, reading.memory_percent, values))
        if len(top) == limit:
            break
    return top


@dataclass(frozen=True)
class Sample:
    """Every process, primed and read again `CPU_SAMPLE_S` later: how many were primed, and their readings."""

    process_count: int
    readings: list[Reading]


async def _sample(ctx: ProbeContext) -> Sample:
    processes = await in_thread_until_given_up(ctx, _prime_all)
    await trio.sleep(CPU_SAMPLE_S)
    return Sample(len(processes), await in_thread_until_given_up(ctx, _read_all, processes))


class _Scan:
    """A scan running, and the end the calls sharing it wait for."""

    def __init__(self) -> None:
        self.finished = trio.Event()
        self.sample: Sample | None = None  # None once finished: the call running it gave up or failed


class TopScans:
    """The scan of every process running now for system.processes.top, if one is (one per agent,
    in `ProbeContext.remembered`): a call arriving meanwhile waits for it and shares its sample.
    Nothing is kept once it is done. Used on the agent's trio thread only."""

    def __init__(self) -> None:
        self.running: _Scan | None = None
        self.scans = 0  # how many were started

    async def sample(self, ctx: ProbeContext) -> Sample:
        """A sample of every process, from the scan running now or a new one."""
        while True:
            scan = self.running
            if scan is None:
                return await self._run(ctx)
            await scan.finished.wait()
            if scan.sample is not None:
                return scan.sample
            # the call running it gave up or failed: this one scans again, or waits for who does

    async def _run(self, ctx: ProbeContext) -> Sample:
        scan = self.running = _Scan()
        self.scans += 1
        try:
            scan.sample = await _sample(ctx)
            return scan.sample
        finally:
            self.running = None
            scan.finished.set()


@PACK.probe(
    "system.processes.top",
    """The busiest processes, sorted by CPU (percent of one CPU over a 0.2 s sample, so a
    multi-threaded process can exceed 100) or by memory (percent of RAM): pid, name, user,
    cpu and memory percent, resident memory in bytes, status, command line (cut to 512
    characters) and start time (ISO 8601 UTC), plus the total process count. The agent's own
    process is left out of the CPU ranking (sampling is what makes it busy). Fields the OS
    hides from this agent are null. Use it to find what is eating CPU or memory.""",
    timeout_s=15,
)
async def processes_top(ctx: ProbeContext, params: TopParams) -> TopProcesses:
    sample = await ctx.remembered.get("system.processes.top", TopScans).sample(ctx)
    top = await in_thread_until_given_up(ctx, _top, sample.readings, params.sort_by, params.limit)
    return TopProcesses(
        sort_by=params.sort_by, sample_s=CPU_SAMPLE_S, process_count=sample.process_count, processes=top
    )
