"""What a probe gets to work with: settings, worker threads, a command runner.

Blocking probe work runs in worker threads (`ProbeThreads`): at most
``THREAD_LIMIT`` at once. A probe cancelled at its deadline abandons its thread
(trio cannot interrupt a blocking call) and gives its slot back at once, so a
call that never returns (a hung file system, a server that stops answering)
cannot take the slots of every later probe. Such a thread is counted as stuck
until it returns, and logged; while ``MAX_STUCK_THREADS`` are stuck, new thread
work is refused with an error saying so, so the number of threads stays bounded.
Clients of a network service also cut their socket when their probe ends
(`sonde.packs.services.Hangup`), so their threads return.

A probe waits for a thread within its own deadline: one that gets none before it ends as a
timed-out probe does, saying it waited for a thread held by other probes (`NoThreadBeforeDeadline`),
not that it ran and was slow. Work that reads one small file (`ProbeThreads.run_quick`) has
`QUICK_THREAD_LIMIT` threads of its own, so slow probes holding every slot do not make it wait.

Probes of the database packs also take a turn at their server (`server_turns`): at most
two of them talk to one server at once (`sonde.packs.server_turns`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from sonde.packs.base import OutOfTime, ProbeUnavailable
from sonde.packs.process import DEFAULT_MAX_OUTPUT_BYTES, CommandOutput, run_command
from sonde.packs.server_turns import GIVE_UP_BEFORE_DEADLINE_S, ServerKey, ServerTurns

T = TypeVar("T")
log = logging.getLogger(__name__)
DEFAULT_ALLOWED_PATHS = ("/var/log",)
THREAD_LIMIT = 8  # blocking probe calls running at once
QUICK_THREAD_LIMIT = 2  # more of them for quick work (one small file), beside the 8 slow probes can hold
MAX_STUCK_THREADS = 16  # threads still running past their probe's deadline before thread work is refused
STUCK_WARNING_AFTER_S = 5  # a thread abandoned longer ago is stuck (a cut connection returns at once)
STUCK_WARNING_INTERVAL_S = 60  # at most one warning about stuck threads a minute


class PathNotAllowed(ValueError):
    """A path parameter resolves outside the allow-list."""


class NoThreadBeforeDeadline(OutOfTime):
    """A probe's deadline came while other probes held every worker thread: it ends as a
    timed-out probe does (code ``timeout``), saying it waited rather than ran."""


DEFAULT_CONFIG = "~/.sonde/config.json, or $SONDE_HOME's"  # `sonde.agent.config.config_path`


@dataclass
class ProbeSettings:
    """Agent-side settings probes consult (from the agent config)."""

    allowed_paths: tuple[str, ...] = DEFAULT_ALLOWED_PATHS
    packs: dict[str, dict[str, Any]] = field(default_factory=dict)
    config_file: str | None = None  # the agent config they come from, named in a refusal

    def for_pack(self, name: str) -> dict[str, Any]:
        return self.packs.get(name, {})


def unredacted(text: str) -> str:
    """The identity `ProbeContext.redact`: outside an agent nothing is scrubbed."""
    return text


class _Job:
    """One call in a worker thread; its fields change under `ProbeThreads._lock`."""

    __slots__ = ("abandoned_at", "done", "name", "started")

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = self.done = False
        self.abandoned_at: float | None = None  # time.monotonic() when its probe gave up on it


class ProbeThreads:
    """Worker threads for blocking probe calls: ``slots`` at once, ``max_stuck`` abandoned ones at most.

    One per agent (it outlives hub connections); thread-safe where it must be.
    """

    def __init__(
        self,
        slots: int = THREAD_LIMIT,
        max_stuck: int = MAX_STUCK_THREADS,
        quick_slots: int = QUICK_THREAD_LIMIT,
    ) -> None:
        self.slots = trio.CapacityLimiter(slots)  # held by the waiting probe, not by its thread
        self.quick_slots = trio.CapacityLimiter(quick_slots)  # the same, for quick work only
        self.max_stuck = max_stuck
        # trio holds this one until the thread itself returns: a hard cap on the threads we own,
        # and not trio's default limiter, which other thread work (getaddrinfo) shares
        self._threads = trio.CapacityLimiter(slots + quick_slots + max_stuck)
        self._lock = threading.Lock()
        self._stuck: set[_Job] = set()  # abandoned, still running
        self._warned_at = -math.inf

    @property
    def stuck(self) -> int:
        """How many threads are still running past their probe's deadline."""
        return len(self._stuck)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread; raises `ProbeUnavailable` while too many are stuck.

        A probe that gets no slot before its deadline raises `NoThreadBeforeDeadline`.
        Cancellation returns at once: the thread is abandoned, its slot freed, and it
        counts as stuck until it returns.
        """
        return await self._run_holding(self.slots, function, args)

    async def run_quick(self, function: Callable[..., T], *args: Any) -> T:
        """`run`, on the threads kept for quick work (reading one small file): slow probes
        holding every slot of `run` do not make it wait."""
        return await self._run_holding(self.quick_slots, function, args)

    async def _run_holding(
        self, slots: trio.CapacityLimiter, function: Callable[..., T], args: tuple[Any, ...]
    ) -> T:
        self._check_stuck(function)
        job = _Job(getattr(function, "__qualname__", repr(function)))
        await self._wait_for(slots)
        try:
            return await trio.to_thread.run_sync(
                self._call, job, function, args, limiter=self._threads, abandon_on_cancel=True
            )
        finally:
            slots.release()
            self._settle(job)

    async def _wait_for(self, slots: trio.CapacityLimiter) -> None:
        """Take a slot, or raise `NoThreadBeforeDeadline` just before the task's deadline."""
        try:
            slots.acquire_nowait()  # a free slot is taken, however near the deadline
            return
        except trio.WouldBlock:
            pass
        started = trio.current_time()
        with trio.move_on_at(trio.current_effective_deadline() - GIVE_UP_BEFORE_DEADLINE_S) as waiting:
            await slots.acquire()
        if waiting.cancelled_caught:
            raise NoThreadBeforeDeadline(
                f"the probe waited {round(trio.current_time() - started, 2):g}s for one of the agent's "
                f"{round(slots.total_tokens)} probe threads and got none before its deadline: other probes "
                f"held all of them ({slots.statistics().tasks_waiting} more wait). It did not start; "
                "try again when they are done, or with a longer timeout"
            )

    def _check_stuck(self, function: Callable[..., Any]) -> None:
        """Warn (once a minute) while threads are stuck; refuse while ``max_stuck`` are."""
        now = time.monotonic()
        with self._lock:
            stuck = sorted(self._stuck, key=lambda job: job.abandoned_at or now)
        refuse = len(stuck) >= self.max_stuck
        long_stuck = any(now - (job.abandoned_at or now) >= STUCK_WARNING_AFTER_S for job in stuck)
        if (refuse or long_stuck) and now - self._warned_at >= STUCK_WARNING_INTERVAL_S:
            self._warned_at = now
            log.warning(
                "%d probe threads are stuck past their probes' deadlines (%s)%s",
                len(stuck),
                ", ".join(f"{job.name} for {now - (job.abandoned_at or now):.0f}s" for job in stuck[:5]),
                f"; thread work is refused (first: {function!r}) until some return" if refuse else "",
            )
        if refuse:
            raise ProbeUnavailable(
                f"{len(stuck)} probe threads are stuck (still running past their probes' deadlines), so "
                "this agent runs no more blocking probe work until some return; the agent's log names "
                "them (a hung file system or service?), restarting the agent clears them"
            )

    def _call(self, job: _Job, function: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            if job.abandoned_at is not None:  # its probe ended before the thread got to it
                raise RuntimeError(f"{job.name} was abandoned before it started")  # nobody reads it
            job.started = True
        try:
            return function(*args)
        finally:
            self._finish(job)

    def _finish(self, job: _Job) -> None:
        with self._lock:
            job.done = True
            late = job in self._stuck
            self._stuck.discard(job)
            stuck = len(self._stuck)
        if late:
            assert job.abandoned_at is not None
            log.info(
                "a probe thread (%s) returned %.1fs after its probe's deadline; %d still running past theirs",
                job.name,
                time.monotonic() - job.abandoned_at,
                stuck,
            )

    def _settle(self, job: _Job) -> None:
        """After the call: a thread still running (its probe was cancelled) is abandoned."""
        with self._lock:
            if job.done or job.abandoned_at is not None:
                return
            job.abandoned_at = time.monotonic()
            if not job.started:
                return  # `_call` will not run it
            self._stuck.add(job)
            stuck = len(self._stuck)
        log.info(
            "a probe thread (%s) runs on past its probe's deadline; %d do (thread work is refused at %d)",
            job.name,
            stuck,
            self.max_stuck,
        )


class Remembered:
    """What probes keep between their calls on one agent, by name (the last reading of the kernel
    log's OOM kills, a login refused a command): owned by the agent's context, never a module's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # probes run in threads too
        self._kept: dict[str, Any] = {}

    def get(self, name: str, make: Callable[[], T]) -> T:
        """What is kept as ``name``, made by ``make`` the first time."""
        with self._lock:
            if name not in self._kept:
                self._kept[name] = make()
            kept: T = self._kept[name]
            return kept


@dataclass
class ProbeContext:
    """``redact`` gives a text as the agent will send it, its secrets redacted (thread-safe).

    A probe that filters text for the caller (a ``contains`` or ``grep``) must only
    keep what still matches once redacted: a filter matched on the raw text tells
    the caller whether a secret it cannot see starts with what it guessed.

    ``server_turns`` is the agent's, like ``threads``; ``turns_held`` names the turns the
    probe running with this context holds (`sonde.packs.server_turns.takes_turns`).
    """

    settings: ProbeSettings = field(default_factory=ProbeSettings)
    threads: ProbeThreads = field(default_factory=ProbeThreads)
    redact: Callable[[str], str] = unredacted
    remembered: Remembered = field(default_factory=Remembered)
    server_turns: ServerTurns = field(default_factory=ServerTurns)
    turns_held: frozenset[ServerKey] = frozenset()

    async def run(
        self, argv: Sequence[str], *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    ) -> CommandOutput:
        return await run_command(argv, max_output_bytes=max_output_bytes)

    async def in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """Run blocking ``function`` in a worker thread (`ProbeThreads.run`: it may refuse)."""
        return await self.threads.run(function, *args)

    async def in_quick_thread(self, function: Callable[..., T], *args: Any) -> T:
        """`in_thread` for quick work, one small file read (`ProbeThreads.run_quick`)."""
        return await self.threads.run_quick(function, *args)

    def allowed_path(self, raw: str) -> Path:
        """Resolve ``raw`` (symlinks followed) and refuse it unless it lies in the allow-list.

        A path that changes while it is resolved (a link swapped meanwhile) is refused too."""
        try:
            resolved = Path(os.path.realpath(raw))
            bases = [Path(os.path.realpath(root)) for root in self.settings.allowed_paths]
        except OSError as exc:  # readlink on a link replaced between lstat and readlink
            raise PathNotAllowed(f"path {raw!r} changed while being resolved ({exc.strerror})") from None
        for base in bases:
            if resolved == base or base in resolved.parents:
                return resolved
        allowed = ", ".join(self.settings.allowed_paths) or "(none)"
        raise PathNotAllowed(
            f"path {raw!r} is outside the allowed paths ({allowed}); to read there, an operator can "
            f"add a directory to allowedPaths in the agent's config ({self.settings.config_file or DEFAULT_CONFIG}) "
            "and restart it"
        )

    @staticmethod
    def unavailable(reason: str) -> ProbeUnavailable:
        return ProbeUnavailable(reason)
