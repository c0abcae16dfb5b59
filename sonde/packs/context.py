"""What a probe gets to work with: settings, a thread limiter, a command runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from sonde.packs.base import ProbeUnavailable
from sonde.packs.process import DEFAULT_MAX_OUTPUT_BYTES, CommandOutput, run_command

T = TypeVar("T")
DEFAULT_ALLOWED_PATHS = ("/var/log",)
THREAD_LIMIT = 8


class PathNotAllowed(ValueError):
    """A path parameter resolves outside the allow-list."""


@dataclass
class ProbeSettings:
    """Agent-side settings probes consult (from the agent config)."""

    allowed_paths: tuple[str, ...] = DEFAULT_ALLOWED_PATHS
    packs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def for_pack(self, name: str) -> dict[str, Any]:
        return self.packs.get(name, {})


def unredacted(text: str) -> str:
    """The identity `ProbeContext.redact`: outside an agent nothing is scrubbed."""
    return text


@dataclass
class ProbeContext:
    """``redact`` gives a text as the agent will send it, its secrets redacted (thread-safe).

    A probe that filters text for the caller (a ``contains`` or ``grep``) must only
    keep what still matches once redacted: a filter matched on the raw text tells
    the caller whether a secret it cannot see starts with what it guessed.
    """

    settings: ProbeSettings = field(default_factory=ProbeSettings)
    limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(THREAD_LIMIT))
    redact: Callable[[str], str] = unredacted

    async def run(
        self, argv: Sequence[str], *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    ) -> CommandOutput:
        return await run_command(argv, max_output_bytes=max_output_bytes)

    async def in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """Run blocking ``function`` in a worker thread under the limiter."""
        return await trio.to_thread.run_sync(function, *args, limiter=self.limiter, abandon_on_cancel=True)

    def allowed_path(self, raw: str) -> Path:
        """Resolve ``raw`` (symlinks followed) and refuse it unless it lies in the allow-list."""
        resolved = Path(os.path.realpath(raw))
        for root in self.settings.allowed_paths:
            base = Path(os.path.realpath(root))
            if resolved == base or base in resolved.parents:
                return resolved
        allowed = ", ".join(self.settings.allowed_paths) or "(none)"
        raise PathNotAllowed(f"path {raw!r} is outside the allowed paths ({allowed})")

    @staticmethod
    def unavailable(reason: str) -> ProbeUnavailable:
        return ProbeUnavailable(reason)
