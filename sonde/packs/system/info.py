"""Identity of the machine: host name, OS release, kernel, architecture, uptime.

The OS comes from os-release(5), parsed by the pure `parse_os_release`.
"""

from __future__ import annotations

import datetime
import platform
import re
import socket
import time
from pathlib import Path

import psutil

from sonde.packs.base import NoParams, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK

OS_RELEASE_PATHS = ("/etc/os-release", "/usr/lib/os-release")
OS_RELEASE_MAX_BYTES = 64 * 1024
OS_RELEASE_KEY = re.compile(r"[A-Z][A-Z0-9_]*")
OS_RELEASE_ESCAPE = re.compile(r'\\([\\$"`])')


class OperatingSystem(Result):
    name: str
    pretty_name: str
    id: str
    version_id: str | None
    source: str | None  # the os-release file read, None when there is none


class SystemInfo(Result):
    hostname: str
    os: OperatingSystem
    kernel: str
    arch: str
    uptime_seconds: int
    boot_time: str | None  # None for a time no date can say (`iso_utc`)
    cpu_count: int | None


def iso_utc(epoch_s: float) -> str | None:
    """``epoch_s`` (seconds since the epoch) as an ISO 8601 UTC string, to the second; None
    when it is no time a date can say (past year 9999, before year 1, NaN): a file's mtime is
    whatever `touch -d` set, and one such file must not cost the whole listing."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch_s, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.replace(microsecond=0).isoformat()


def _unquote(raw: str) -> str:
    # Shell-like quoting: 'as is', "with \\ \$ \" \` escapes", or bare words.
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1]
    else:  # bare, or with unbalanced quotes: keep the text, drop stray quotes
        raw = raw.strip("\"'")
    return OS_RELEASE_ESCAPE.sub(r"\1", raw)


def parse_os_release(text: str) -> dict[str, str]:
    """The KEY=value pairs of an os-release file; comments and malformed lines are ignored."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        if OS_RELEASE_KEY.fullmatch(key):
            fields[key] = _unquote(raw)
    return fields


def operating_system(fields: dict[str, str], source: str | None) -> OperatingSystem:
    """The OS described by parsed os-release ``fields``, with the defaults os-release(5) gives."""
    name = fields.get("NAME") or "Linux"
    version_id = fields.get("VERSION_ID") or None
    return OperatingSystem(
        name=name,
        pretty_name=fields.get("PRETTY_NAME") or " ".join(filter(None, [name, version_id])),
        id=fields.get("ID") or "linux",
        version_id=version_id,
        source=source,
    )


def _read_os_release() -> OperatingSystem:
    for path in OS_RELEASE_PATHS:
        try:
            with Path(path).open(encoding="utf-8", errors="replace") as file:
                text = file.read(OS_RELEASE_MAX_BYTES)
        except OSError:
            continue
        return operating_system(parse_os_release(text), path)
    return operating_system({}, None)


@PACK.probe(
    "system.info",
    """Who this machine is: host name, OS (name, pretty name, id, version from os-release),
    kernel release, CPU architecture, logical CPU count, boot time (ISO 8601 UTC) and uptime
    in seconds. Use it first to know what kind of machine you are looking at, or to check
    whether it rebooted recently.""",
    timeout_s=5,
)
async def system_info(ctx: ProbeContext, params: NoParams) -> SystemInfo:
    os_info = await ctx.in_quick_thread(_read_os_release)
    boot_epoch_s = psutil.boot_time()
    return SystemInfo(
        hostname=socket.gethostname(),
        os=os_info,
        kernel=platform.release(),
        arch=platform.machine(),
        uptime_seconds=max(0, int(time.time() - boot_epoch_s)),
        boot_time=iso_utc(boot_epoch_s),
        cpu_count=psutil.cpu_count(logical=True),
    )
