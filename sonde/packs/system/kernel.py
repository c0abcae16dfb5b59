"""The kernel ring buffer (dmesg), filtered by level.

``dmesg --json -x`` (util-linux 2.38+) gives ``{"dmesg": [{"fac", "pri", "time", "msg"}]}``
with the facility and level by name. Without ``-x`` its ``pri`` is a number, and util-linux
2.38 writes the facility or the level there, not both: a daemon's info message read as the
kernel's debug one. It writes neither for facilities 12 and up (local0-7 among them): their
level and facility are then null, not guessed. Older dmesg has no --json; then ``dmesg -x``
text is parsed instead: ``kern  :err   : [   12.345678] message``.
Reading the buffer needs CAP_SYSLOG when ``kernel.dmesg_restrict`` is 1 (the
default on most distributions).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil
from pydantic import Field

from sonde.packs.base import Params, ProbeUnavailable, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.access import why_refused
from sonde.packs.system.info import iso_utc
from sonde.packs.system.privileges import agent_user, capability_grant

Level = Literal["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"]
LEVELS: tuple[Level, ...] = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
FACILITIES = (
    "kern",
    "user",
    "mail",
    "daemon",
    "auth",
    "syslog",
    "lpr",
    "news",
    "uucp",
    "cron",
    "authpriv",
    "ftp",
    "ntp",
    "security",
    "console",
    "solaris-cron",
    *(f"local{n}" for n in range(8)),
)
TEXT_LINE = re.compile(
    r"^(?P<facility>[a-z0-9]+)\s*:(?P<level>[a-z]+)\s*: \[\s*(?P<time>\d+\.\d+)\] ?(?P<msg>.*)$"
)
MESSAGE_MAX_CHARS = 2000
UNKNOWN = "unknown"  # the level of a message dmesg gave none for
DMESG_MAX_BYTES = 32 * 1024 * 1024  # the largest log_buf_len is 32 MiB
KERN_LOG = Path("/var/log/kern.log")  # where rsyslog keeps kernel messages, if it runs


class KernelParams(Params):
    max_level: Level = Field(default="warn", description="Keep messages of this level and more severe.")
    limit: int = Field(default=100, ge=1, le=2000, strict=True, description="The last N matching messages.")


class KernelMessage(Result):
    level: Level | None = Field(description="Null where dmesg did not say (facilities 12 and up, local0-7).")
    facility: str | None = Field(description="Null where dmesg did not say.")
    seconds_since_boot: float
    time: str | None  # None for a time no date can say (`iso_utc`)
    message: str


class KernelMessages(Result):
    max_level: Level
    counts_by_level: dict[str, int]
    messages: list[KernelMessage]
    truncated: bool
    source: Literal["json", "text"]


def _message(
    level: Level | None, facility: str | None, seconds: float, text: str, boot_time: float
) -> KernelMessage:
    cut = text if len(text) <= MESSAGE_MAX_CHARS else text[: MESSAGE_MAX_CHARS - 1] + "…"
    return KernelMessage(
        level=level,
        facility=facility,
        seconds_since_boot=seconds,
        time=iso_utc(boot_time + seconds),
        message=cut,
    )


def parse_dmesg_json(text: str, boot_time: float) -> list[KernelMessage]:
    entries: list[dict[str, Any]] = json.loads(text).get("dmesg", []) if text.strip() else []
    messages = []
    for entry in entries:
        level, facility = level_and_facility(entry.get("pri"), entry.get("fac"))
        messages.append(
            _message(level, facility, float(entry.get("time", 0.0)), str(entry.get("msg", "")), boot_time)
        )
    return messages


def level_and_facility(pri: Any, fac: Any) -> tuple[Level | None, str | None]:
    """An entry's level and facility: by name (``-x``), from a number (facility * 8 + level),
    or None for what the entry does not say."""
    if isinstance(pri, str):
        level = next((known for known in LEVELS if known == pri), None)
        return level, fac if isinstance(fac, str) else None
    if isinstance(pri, int) and pri >= 0:
        index = pri >> 3
        return LEVELS[pri & 7], FACILITIES[index] if index < len(FACILITIES) else None
    return None, None


def parse_dmesg_text(text: str, boot_time: float) -> list[KernelMessage]:
    """``dmesg -x`` output; continuation lines are appended to the message before them."""
    messages: list[KernelMessage] = []
    for line in text.splitlines():
        match = TEXT_LINE.match(line)
        level, facility = level_and_facility(match["level"], match["facility"]) if match else (None, None)
        if match and level is not None:
            messages.append(_message(level, facility, float(match["time"]), match["msg"], boot_time))
        elif messages and line.strip():
            last = messages[-1]
            messages[-1] = last.model_copy(
                update={"message": (last.message + "\n" + line)[:MESSAGE_MAX_CHARS]}
            )
    return messages


def select(
    messages: list[KernelMessage], max_level: Level, limit: int
) -> tuple[list[KernelMessage], dict[str, int]]:
    """The last ``limit`` messages at ``max_level`` or more severe, and counts per level of all
    (``unknown``: messages whose level dmesg did not say, kept only at ``debug``)."""
    counts: dict[str, int] = {level: 0 for level in LEVELS}
    for message in messages:
        level = message.level or UNKNOWN
        counts[level] = counts.get(level, 0) + 1
    ceiling = LEVELS.index(max_level)
    kept = [
        m
        for m in messages
        if (LEVELS.index(m.level) <= ceiling if m.level is not None else max_level == "debug")
    ]
    return kept[-limit:], counts


def restricted_hint(user: str, kern_log: str | None) -> str:
    """What to do when dmesg is refused; ``kern_log`` is advice on /var/log/kern.log, None when it is absent."""
    hint = (
        "reading the kernel ring buffer is restricted (kernel.dmesg_restrict=1) to processes with "
        f"CAP_SYSLOG, which user '{user}' lacks: {capability_grant('CAP_SYSLOG')}"
    )
    return f"{hint}; or read {KERN_LOG} through system.logs.tail ({kern_log})" if kern_log else hint


def kern_log_advice(path: Path = KERN_LOG) -> str | None:
    """Whether the agent may read ``path`` and if not why; None when there is no such file."""
    if not path.is_file():
        return None
    return "the agent may read it" if os.access(path, os.R_OK) else why_refused(path)


def _refusal(stderr: str) -> Exception:
    if "Operation not permitted" in stderr or "Permission denied" in stderr:
        return PermissionError(restricted_hint(agent_user(), kern_log_advice()))
    return ProbeUnavailable(f"dmesg failed: {stderr.strip()[:300]}")


@dataclass(frozen=True)
class KernelLog:
    messages: list[KernelMessage]
    source: Literal["json", "text"]
    truncated: bool  # the output cap cut it


async def read_kernel_log(ctx: ProbeContext, levels: tuple[Level, ...] = ()) -> KernelLog:
    """The kernel ring buffer, only ``levels`` when given (``dmesg --level``).

    Raises PermissionError (with what to grant) where the buffer is restricted,
    `ProbeUnavailable` when dmesg is missing or fails otherwise.
    """
    boot_time = psutil.boot_time()
    only = [f"--level={','.join(levels)}"] if levels else []
    output = await ctx.run(["dmesg", "--json", "-x", *only], max_output_bytes=DMESG_MAX_BYTES)
    source: Literal["json", "text"] = "json"
    if output.returncode != 0 and (
        "unrecognized option" in output.stderr or "invalid option" in output.stderr
    ):
        output = await ctx.run(["dmesg", "-x", *only], max_output_bytes=DMESG_MAX_BYTES)
        source = "text"
    if output.returncode != 0:
        raise _refusal(output.stderr)
    parse = parse_dmesg_json if source == "json" else parse_dmesg_text
    return KernelLog(parse(output.stdout, boot_time), source, output.truncated)


@PACK.probe(
    "system.kernel.messages",
    """Kernel ring buffer (dmesg) messages at `max_level` or more severe (default warn:
    emerg, alert, crit, err, warn), the last `limit` of them, each with level, facility,
    seconds since boot, an ISO 8601 UTC time and the message; plus counts per level over
    the whole buffer. Needs CAP_SYSLOG where kernel.dmesg_restrict=1. Use it for disk, OOM,
    hardware or driver errors.""",
    timeout_s=10,
    requires=Requirements(commands=("dmesg",)),
)
async def kernel_messages(ctx: ProbeContext, params: KernelParams) -> KernelMessages:
    log = await read_kernel_log(ctx)
    kept, counts = select(log.messages, params.max_level, params.limit)
    matching = sum(counts[level] for level in LEVELS[: LEVELS.index(params.max_level) + 1])
    if params.max_level == "debug":
        matching += counts.get(UNKNOWN, 0)
    return KernelMessages(
        max_level=params.max_level,
        counts_by_level=counts,
        messages=kept,
        truncated=matching > len(kept) or log.truncated,
        source=log.source,
    ).newest_last("messages")  # cut to fit, the newest are the ones kept
