"""nginx's log formats and `nginx -t` output. Pure: text in, values out.

Access log, the predefined ``combined`` format::

    $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    "$http_referer" "$http_user_agent"

(``common`` is the same without the last two fields.) Error log::

    2024/05/06 10:11:12 [error] 1234#1234: *5 connect() failed (111: ...) while
    connecting to upstream, client: 127.0.0.1, server: _, request: "GET /x HTTP/1.1", ...
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

QUOTED = r'"((?:[^"\\]|\\.)*)"'
ACCESS_LINE = re.compile(
    r"^(?P<addr>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] "
    + QUOTED.replace("(", "(?P<request>", 1)
    + r" (?P<status>\d{3}) (?P<bytes>\d+|-)"
    + r"(?: "
    + QUOTED.replace("(", "(?P<referer>", 1)
    + " "
    + QUOTED.replace("(", "(?P<agent>", 1)
    + ")?"
)
ERROR_LINE = re.compile(
    r"^(?P<time>\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}) \[(?P<level>[a-z]+)\] (?P<pid>\d+)#\d+: (?:\*(?P<conn>\d+) )?(?P<msg>.*)$"
)
ERROR_CONTEXT = re.compile(r', (client|server|request|upstream|host): "?([^",]*)"?')
# "nginx: [emerg] ..." by default; error-log style "2024/05/06 10:11:12 [emerg] 1#1: ..." with -e stderr
TEST_MESSAGE = re.compile(
    r"^(?:nginx: |\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} )\[(?P<level>[a-z]+)\] (?:\d+#\d+: )?"
    r"(?P<text>.*?)(?: in (?P<file>/\S+?):(?P<line>\d+))?$"
)
ERROR_LEVELS = ("debug", "info", "notice", "warn", "error", "crit", "alert", "emerg")
FATAL_LEVELS = ("crit", "alert", "emerg")
# a file nginx could not open for this user: open() "/run/nginx.pid" failed (13: Permission denied),
# cannot load certificate key "/etc/ssl/private/x.key": BIO_new_file() failed (...Permission denied...);
# 30 (EROFS) is the same refusal inside a read-only sandbox such as systemd's ProtectSystem=
# nginx logs every request for a missing static file at [error]: a scanner alone fills the log
MISSING_FILE = re.compile(r'^open\(\) "[^"]*" failed \(2: No such file or directory\)')
UPSTREAM_ERROR = re.compile(
    r"^(?:connect\(\) failed \([^)]*\)|upstream timed out \([^)]*\)|no live upstreams"
    r"|upstream prematurely closed connection|recv\(\) failed \([^)]*\))"
)
UPSTREAM_ERRORS_TOP = 5
REFUSED_FILE = re.compile(r'"(?P<file>/[^"]+)".*?(?:\((?:13|30): [^)]*\)|Permission denied)')
TEXT_MAX_CHARS = 1000


@dataclass(frozen=True)
class AccessEntry:
    address: str
    time: str | None
    method: str | None
    path: str | None
    status: int
    bytes_sent: int
    user_agent: str | None


def parse_time_local(text: str) -> str | None:
    """``06/May/2024:10:11:12 +0200`` as ISO 8601 UTC; None when it is not one, or its UTC time
    falls outside the years 1-9999 (``31/Dec/9999:23:59:59 -0100``): one such line must not fail
    the whole read."""
    try:
        return datetime.datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z").astimezone(datetime.UTC).isoformat()
    except (ValueError, OverflowError):
        return None


def parse_access_line(line: str) -> AccessEntry | None:
    match = ACCESS_LINE.match(line)
    if match is None:
        return None
    parts = match["request"].split(" ")
    method, path = (parts[0], parts[1].split("?", 1)[0]) if len(parts) >= 2 else (None, None)
    return AccessEntry(
        address=match["addr"],
        time=parse_time_local(match["time"]),
        method=method,
        path=path[:TEXT_MAX_CHARS] if path else None,
        status=int(match["status"]),
        bytes_sent=int(match["bytes"]) if match["bytes"].isdigit() else 0,
        user_agent=match["agent"][:TEXT_MAX_CHARS] if match["agent"] else None,
    )


@dataclass(frozen=True)
class AccessSummary:
    lines: int
    requests: int
    unparsed: int
    by_status_class: dict[str, int]
    server_error_percent: float | None
    client_error_percent: float | None
    bytes_sent: int
    first_time: str | None
    last_time: str | None
    top_paths: list[tuple[str, int, int]]  # path, requests, of which 5xx
    top_clients: list[tuple[str, int]]
    old: int  # entries before the window (or of no time), not counted


def in_window(time: str | None, since: datetime.datetime | None) -> bool:
    """Whether an entry's ISO 8601 ``time`` is ``since`` or later (all are without ``since``; one
    without a time is not); both aware (access log) or both naive local times (error log)."""
    return since is None or (time is not None and datetime.datetime.fromisoformat(time) >= since)


def summarize_access(lines: Iterable[str], top: int, since: datetime.datetime | None = None) -> AccessSummary:
    """Requests by status class, 5xx and 4xx share, top paths and clients over the entries of
    ``lines`` logged ``since`` (an aware time; None: all); the time span covers every entry."""
    dated = []
    count = 0
    for line in lines:
        count += 1
        entry = parse_access_line(line)
        if entry is not None:
            dated.append(entry)
    entries = [entry for entry in dated if in_window(entry.time, since)]
    classes = Counter(f"{entry.status // 100}xx" for entry in entries)
    paths = Counter(entry.path or "-" for entry in entries)
    failing = Counter(entry.path or "-" for entry in entries if entry.status >= 500)
    total = len(entries)
    times = [entry.time for entry in dated if entry.time]
    return AccessSummary(
        lines=count,
        requests=total,
        unparsed=count - len(dated),
        by_status_class={name: classes.get(name, 0) for name in ("1xx", "2xx", "3xx", "4xx", "5xx")},
        server_error_percent=round(classes["5xx"] * 100 / total, 2) if total else None,
        client_error_percent=round(classes["4xx"] * 100 / total, 2) if total else None,
        bytes_sent=sum(entry.bytes_sent for entry in entries),
        first_time=min(times) if times else None,
        last_time=max(times) if times else None,
        top_paths=[(path, n, failing.get(path, 0)) for path, n in paths.most_common(top)],
        top_clients=Counter(entry.address for entry in entries).most_common(top),
        old=len(dated) - total,
    )


@dataclass(frozen=True)
class ErrorEntry:
    time: str
    level: str
    pid: int
    connection: int | None
    message: str
    client: str | None
    request: str | None
    upstream: str | None


def parse_error_line(line: str) -> ErrorEntry | None:
    match = ERROR_LINE.match(line)
    if match is None:
        return None
    context = dict(ERROR_CONTEXT.findall(match["msg"]))
    return ErrorEntry(
        time=match["time"].replace("/", "-").replace(" ", "T"),
        level=match["level"],
        pid=int(match["pid"]),
        connection=int(match["conn"]) if match["conn"] else None,
        message=match["msg"][:TEXT_MAX_CHARS],
        client=context.get("client"),
        request=context.get("request"),
        upstream=context.get("upstream"),
    )


@dataclass(frozen=True)
class RecentErrors:
    counts_by_level: dict[str, int]
    missing_files: int  # [error] open() of a file that does not exist: a 404, not nginx failing
    upstream_errors: list[tuple[str, str | None, int]]  # error, upstream, count; most first
    old: int  # entries before the window, not counted
    first_time: str | None
    last_time: str | None


def judge_errors(entries: list[ErrorEntry], since: datetime.datetime | None) -> RecentErrors:
    """Counts by level over the ``entries`` logged ``since`` (a naive local time; None: all), the
    missing files and upstream errors among them; the time span covers every entry."""
    recent = [entry for entry in entries if in_window(entry.time, since)]
    upstream = Counter(
        (found[0], entry.upstream)
        for entry in recent
        if (found := UPSTREAM_ERROR.match(entry.message)) is not None
    )
    times = [entry.time for entry in entries]
    return RecentErrors(
        counts_by_level={level: sum(1 for e in recent if e.level == level) for level in ERROR_LEVELS},
        missing_files=sum(1 for e in recent if e.level == "error" and MISSING_FILE.match(e.message)),
        upstream_errors=[(error, up, n) for (error, up), n in upstream.most_common(UPSTREAM_ERRORS_TOP)],
        old=len(entries) - len(recent),
        first_time=min(times) if times else None,
        last_time=max(times) if times else None,
    )


@dataclass(frozen=True)
class TestMessage:
    level: str
    text: str
    file: str | None
    line: int | None


@dataclass(frozen=True)
class ConfigTest:
    syntax_ok: bool
    successful: bool
    config_file: str | None
    messages: list[TestMessage]


def parse_config_test(output: str) -> ConfigTest:
    """What ``nginx -t`` printed (it writes to stderr)."""
    messages = []
    config_file = None
    for line in output.splitlines():
        found = re.search(r"configuration file (\S+) (?:syntax is|test)", line)
        if found:
            config_file = found[1]
        match = TEST_MESSAGE.match(line.strip())
        if match:
            number = match["line"]
            messages.append(
                TestMessage(
                    match["level"],
                    match["text"][:TEXT_MAX_CHARS],
                    match["file"],
                    int(number) if number else None,
                )
            )
    return ConfigTest(
        syntax_ok="syntax is ok" in output,
        successful="test is successful" in output,
        config_file=config_file,
        messages=messages,
    )


def refused_files(tested: ConfigTest) -> list[str]:
    """The files whose refusal alone failed the test: every fatal message is a file nginx could not
    open as this user (pid or log files to write, or files the config names to read). Empty when the
    test passed or any fatal message is about something else."""
    fatal = [m for m in tested.messages if m.level in FATAL_LEVELS]
    found = [REFUSED_FILE.search(m.text) for m in fatal]
    if tested.successful or not fatal or None in found:
        return []
    return list(dict.fromkeys(match["file"] for match in found if match))
