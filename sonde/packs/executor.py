"""Run one probe by name: validate params, apply the timeout, cap the output.

This is the supervision boundary for probe code: `trio.Cancelled` passes
through; every other failure becomes a `ProbeExecutionError` with a stable
code and a message a person (or a model) can act on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import trio
from pydantic import ValidationError

from sonde.packs.base import OutOfTime, PackLoadError, ProbeUnavailable, ServiceRefused
from sonde.packs.context import PathNotAllowed, ProbeContext, unredacted
from sonde.packs.registry import PackRegistry
from sonde.params_words import describe_params_error
from sonde.protocol.jsontext import valid_text, valid_unicode

log = logging.getLogger(__name__)
DEFAULT_MAX_RESULT_BYTES = 256 * 1024
INLINE_FINISH_BYTES = 64 * 1024  # a bigger result is scrubbed and capped in a worker thread
# Redacts the secrets in a result; returns it and how many there were (the agent's `Scrubber.scrub_result`).
ResultScrubber = Callable[[dict[str, Any]], tuple[dict[str, Any], int]]


class ProbeExecutionError(Exception):
    def __init__(self, code: str, message: str) -> None:
        message = valid_text(message)  # it may quote a file or process name that is not UTF-8
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ProbeOutcome:
    result: dict[str, Any]
    duration_ms: float
    truncated: bool
    output_bytes: int
    redactions: int = 0


class RedactionTally:
    """``ctx.redact`` for one probe run: redacts as the agent's does, and counts (`count`) the
    redactions a probe made itself in text it sends, which the agent's last scrub finds already
    hidden and so cannot count (a log line judged as a line of its credential file). Thread-safe."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self.redact = redact
        self.made = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str:
        return self.redact(text)

    def count(self, redactions: int) -> None:
        with self._lock:
            self.made += redactions


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` stops more than one probe: ``trio.Cancelled``, ``KeyboardInterrupt`` or
    ``GeneratorExit``, alone or in a group."""
    stop = (trio.Cancelled, KeyboardInterrupt, GeneratorExit)
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(stop) is not None
    return isinstance(exc, stop)


async def execute_probe(
    registry: PackRegistry,
    name: str,
    params: Mapping[str, Any],
    ctx: ProbeContext,
    *,
    timeout_s: float | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    scrub: ResultScrubber | None = None,
) -> ProbeOutcome:
    """Run probe ``name``; raises `ProbeExecutionError` with a code on any failure.

    ``scrub`` sees the whole result before it is capped: a secret whose shape needs its
    end (a URL's ``@``, a closing quote or tag) would pass if it were cut first. The probe
    gets ``ctx.redact`` as a `RedactionTally`: the redactions it counts there (made by the
    probe itself, in text the last scrub then finds hidden) are added to the outcome's. A
    result whose ``cut_to_fit`` is True (a probe that stopped its own output at the cap) is
    ``truncated`` as one the cap cut.
    """
    try:
        spec = registry.probe(name)
        if spec is None:
            raise ProbeExecutionError(
                "unknown_probe", f"Unknown probe {name!r}; available: {', '.join(registry.probe_names())}"
            )
    except PackLoadError as exc:
        log.error("probe %s: %s", name, exc, exc_info=exc.__cause__)
        raise ProbeExecutionError("probe_failed", str(exc)) from None
    try:
        parsed = spec.params.model_validate(dict(params))
    except ValidationError as exc:
        raise ProbeExecutionError(
            "invalid_params", f"invalid params for {name}: {describe_params_error(exc, spec.params)}"
        ) from None
    limit_s = min(timeout_s, spec.timeout_s) if timeout_s else spec.timeout_s
    tally = RedactionTally(ctx.redact)
    started = time.perf_counter()
    try:
        with trio.fail_after(limit_s):
            result = await spec.run(ctx if ctx.redact is unredacted else replace(ctx, redact=tally), parsed)
    except trio.TooSlowError:
        raise ProbeExecutionError("timeout", f"probe {name} did not finish within {limit_s:g}s") from None
    except OutOfTime as exc:
        raise ProbeExecutionError(
            "timeout", f"probe {name} did not finish within {limit_s:g}s: {exc}"
        ) from None
    except ServiceRefused as exc:  # the server is down or full: the runbook's finding (its code)
        raise ProbeExecutionError(exc.code, str(exc)) from None
    except ProbeUnavailable as exc:
        raise ProbeExecutionError("unavailable", str(exc)) from None
    except ValidationError as exc:  # the probe built a bad result: our bug, not the caller's
        log.exception("probe %s returned an invalid result", name)
        raise ProbeExecutionError("probe_failed", f"probe {name} produced an invalid result: {exc}") from None
    except (PathNotAllowed, ValueError) as exc:
        raise ProbeExecutionError("refused", str(exc)) from None
    except PermissionError as exc:
        raise ProbeExecutionError("permission_denied", f"permission denied: {exc.filename or exc}") from None
    except BaseException as exc:  # the boundary for one probe's code: a SystemExit in it is its own failure
        if is_cancellation(exc):
            raise
        log.error("probe %s failed", name, exc_info=exc)
        raise ProbeExecutionError(
            "probe_failed", f"probe {name} failed: {type(exc).__name__}: {exc}"
        ) from None
    duration_ms = (time.perf_counter() - started) * 1000
    data = result.model_dump(mode="json")
    finish = partial(
        finish_result, scrub=scrub, limit=max_result_bytes, keep_end=result.lists_keeping_their_end
    )
    if json_size_over(data, INLINE_FINISH_BYTES):  # megabytes to scrub: not on the event loop
        data, redactions, truncated, size = await trio.to_thread.run_sync(finish, data)
    else:
        data, redactions, truncated, size = finish(data)
    cut_to_fit = getattr(result, "cut_to_fit", False) is True  # the probe stopped at the cap itself
    return ProbeOutcome(data, duration_ms, truncated or cut_to_fit, size, redactions + tally.made)


def finish_result(
    data: dict[str, Any], *, scrub: ResultScrubber | None, limit: int, keep_end: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], int, bool, int]:
    """Scrub the whole result, then cap it: (result, redactions, truncated, bytes)."""
    redactions = 0
    if scrub is not None:
        data, redactions = scrub(data)
    data, truncated, size = cap_result(data, limit, keep_end)
    return data, redactions, truncated, size


def json_size_over(value: Any, limit: int) -> bool:
    """Whether ``value`` is more than ``limit`` bytes of JSON (text that is not valid Unicode counts as over)."""
    try:
        return json_size(value) > limit
    except UnicodeEncodeError:
        return True


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def cap_result(
    data: dict[str, Any], limit: int, keep_end: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], bool, int]:
    """Cut the largest list or string (by its bytes of JSON) until ``data`` fits in ``limit`` bytes.

    Each cut takes about what is over the limit, in one step: a list loses items from its
    end, except a top-level one named in ``keep_end`` ("the last N" lines or entries,
    oldest first), which loses them from its start; a string keeps its start and ends
    with ``…[truncated]``. A shortened result carries ``"truncated": true`` at its top
    level. A result holding text that is not valid Unicode is made so first
    (`valid_unicode`). A few passes over the result, whatever its shape: cutting a
    thousand long lines one halving at a time took minutes.
    """
    try:
        size = json_size(data)
    except UnicodeEncodeError:  # rare: the common case costs nothing more
        data = valid_unicode(data)
        size = json_size(data)
    if size <= limit:
        return data, False, size
    data = json.loads(json.dumps(data))  # a private copy to cut
    data["truncated"] = True
    size = json_size(data)
    while size > limit:
        if not _cut_largest(data, keep_end, size - limit + CUT_MARGIN_BYTES):
            data = {"truncated": True, "note": f"result of {size} bytes exceeds the {limit} byte cap"}
            size = json_size(data)
            break
        size = json_size(data)
    return data, True, size


CUT_MARGIN_BYTES = 64  # cut a little more than the excess: the marker, commas, rounding
TRUNCATED_MARK = "…[truncated]"


def _cut_largest(root: dict[str, Any], keep_end: frozenset[str], excess: int) -> bool:
    """Take about ``excess`` bytes of JSON out of the largest list or string under ``root``."""
    largest = _largest(root)
    if largest is None:
        return False
    parent, key, value, size = largest
    if isinstance(value, str):
        keep = max(min(len(value) * (size - excess) // size, len(value) - 1), 0)
        parent[key] = value[:keep] + TRUNCATED_MARK
        return True
    from_start = parent is root and key in keep_end
    dropped, count = 0, 0
    for item in reversed(value) if not from_start else value:
        if dropped >= excess or count == len(value) - 1:
            break
        dropped += json_size(item) + 1  # its comma
        count += 1
    parent[key] = value[count:] if from_start else value[: len(value) - count]
    return True


def _largest(root: dict[str, Any]) -> tuple[Any, Any, Any, int] | None:
    """The list or string under ``root`` (of more than one item or character) that is the most
    bytes of JSON: (its parent, its key there, it, its size); None if there is none."""
    best: tuple[Any, Any, Any, int] | None = None
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in children:
            if isinstance(value, list | str) and len(value) > 1:
                size = json_size(value)
                if best is None or size > best[3]:
                    best = (node, key, value, size)
            if isinstance(value, dict | list):
                stack.append(value)
    return best
