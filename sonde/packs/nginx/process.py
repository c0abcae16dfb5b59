"""Whether nginx runs: its master process, workers, start time and listening sockets.

A master is a process named ``nginx`` whose command line (nginx rewrites it) starts with
``nginx: master process``. The configured nginx's master is the one its pid file names (the
``pid`` directive of the config file, else Debian's ``/run/nginx.pid``), or the one started
with ``-c`` on the configured config file. When the agent names no config, any master counts:
the agent cannot tell which nginx is meant. Only the ``pid`` directive is taken from the
config file and only a number from the pid file: neither is sent.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import Field

from sonde.packs.base import NoParams, Result
from sonde.packs.context import ProbeContext
from sonde.packs.nginx import PACK
from sonde.packs.system.info import iso_utc
from sonde.packs.system.privileges import agent_user, capability_grant

DEFAULT_CONFIG = "/etc/nginx/nginx.conf"
DEFAULT_PID_FILE = "/run/nginx.pid"  # Debian's --pid-path
MASTER_PREFIX = "nginx: master process"
WORKER_PREFIX = "nginx: worker process"
CONFIG_READ_MAX_BYTES = 1 << 20
PID_FILE_MAX_BYTES = 64
PID_DIRECTIVE = re.compile(rb"^\s*pid\s+([^;\s]+)\s*;", re.MULTILINE)


class ListeningAddress(Result):
    address: str
    port: int


class NginxMaster(Result):
    pid: int
    config: str | None  # the -c it was started with; None: nginx's built-in default
    started: str | None  # ISO 8601 UTC, to the second (`iso_utc`)
    workers: int
    listening: list[ListeningAddress] | None  # None: not visible to the agent (listening_note)
    listening_note: str | None


class NginxProcess(Result):
    running: bool
    master: NginxMaster | None
    other_masters: list[int]
    config: str
    pid_file: str
    pid_file_pid: int | None
    pid_file_note: str | None
    enabled_at_boot: bool = Field(
        description="Whether systemd or the init scripts start nginx at boot: a machine meant to serve with it."
    )


# systemd's links of an enabled nginx.service, and SysV init's start links
BOOT_LINKS = ("/etc/systemd/system/*.target.wants/nginx.service", "/etc/rc[2-5].d/S[0-9][0-9]nginx")


def enabled_at_boot() -> bool:
    """Whether nginx is started at boot (an enabled unit, or a SysV start link)."""
    return any(glob.glob(pattern) for pattern in BOOT_LINKS)


@dataclass(frozen=True)
class PidFile:
    path: str
    pid: int | None
    note: str | None


def _read_head(path: str, limit: int) -> bytes:
    with open(path, "rb") as file:
        return file.read(limit)


def pid_file_of(config: str) -> tuple[str, str | None]:
    """The pid file the config names (else the default), and why the config was not read."""
    try:
        found = PID_DIRECTIVE.search(_read_head(config, CONFIG_READ_MAX_BYTES))
    except OSError as exc:
        return DEFAULT_PID_FILE, f"could not read {config} ({exc.strerror}): assumed {DEFAULT_PID_FILE}"
    return (os.fsdecode(found[1]) if found else DEFAULT_PID_FILE), None


def read_pid_file(config: str) -> PidFile:
    path, note = pid_file_of(config)
    try:
        text = _read_head(path, PID_FILE_MAX_BYTES).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return PidFile(path, None, note or f"{path} does not exist (nginx removes it when it stops)")
    except OSError as exc:
        return PidFile(path, None, note or f"could not read {path} ({exc.strerror})")
    if not text.isdigit():
        return PidFile(path, None, note or f"{path} holds no PID")
    return PidFile(path, int(text), note)


def started_with(cmdline: str) -> str | None:
    """The ``-c`` config file of a master's command line (None when it has none)."""
    words = cmdline.split()
    return next((words[i + 1] for i, word in enumerate(words[:-1]) if word == "-c"), None)


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def launched_as(master: psutil.Process) -> str:
    """A master's command line, as `nginx_masters` read it (empty when it may not be read)."""
    return " ".join(master.info["cmdline"] or [])


def nginx_masters() -> list[psutil.Process]:
    """The nginx master processes, each with its name and command line read once (``info``)."""
    return [
        process
        for process in psutil.process_iter(["name", "cmdline"])
        if process.info["name"] == "nginx" and launched_as(process).startswith(MASTER_PREFIX)
    ]


def _same_file(one: str | None, other: str) -> bool:
    return one is not None and os.path.isabs(one) and os.path.realpath(one) == os.path.realpath(other)


def configured_master(
    masters: list[psutil.Process], pid: int | None, config: str, named: bool
) -> psutil.Process | None:
    """The master of the configured nginx: the pid file's, else one started on ``config`` (any
    when the agent ``named`` no config, or one with no ``-c`` when it is the default)."""
    for master in masters:
        if master.pid == pid:
            return master
    for master in masters:
        started = started_with(launched_as(master))
        if _same_file(started, config) or (started is None and _same_file(DEFAULT_CONFIG, config)):
            return master
    return masters[0] if masters and not named else None


def listening_of(master: psutil.Process) -> tuple[list[ListeningAddress] | None, str | None]:
    try:
        sockets = master.net_connections(kind="inet")
    except psutil.AccessDenied:
        return None, (
            f"the sockets of nginx's master (PID {master.pid}) are not visible to user '{agent_user()}': "
            f"to see them, {capability_grant('CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH')}"
        )
    bound = {(s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN and s.laddr}
    return [ListeningAddress(address=a, port=p) for a, p in sorted(bound)], None


def describe_master(master: psutil.Process) -> NginxMaster:
    workers = [child for child in master.children() if _cmdline(child).startswith(WORKER_PREFIX)]
    listening, note = listening_of(master)
    return NginxMaster(
        pid=master.pid,
        config=started_with(launched_as(master)),
        started=iso_utc(master.create_time()),
        workers=len(workers),
        listening=listening,
        listening_note=note,
    )


def read_process(config: str, named: bool) -> NginxProcess:
    """What runs of the nginx ``config`` names (``named``: the agent's config names it)."""
    pid_file = read_pid_file(config)
    masters = nginx_masters()
    master = configured_master(masters, pid_file.pid, config, named)
    note = pid_file.note
    if pid_file.pid is not None and pid_file.pid not in {m.pid for m in masters}:
        note = f"{pid_file.path} names PID {pid_file.pid}, which is no nginx master: a stale pid file"
    try:
        described = describe_master(master) if master is not None else None
    except psutil.NoSuchProcess:  # it stopped meanwhile
        described = None
    return NginxProcess(
        running=described is not None,
        master=described,
        other_masters=sorted(m.pid for m in masters if m is not master),
        config=config,
        pid_file=pid_file.path,
        pid_file_pid=pid_file.pid,
        pid_file_note=note,
        enabled_at_boot=enabled_at_boot(),
    )


@PACK.probe(
    "nginx.process.status",
    """Whether nginx runs: `running` and its master process (PID, the -c config it was
    started with, start time in UTC, worker count and the addresses it listens on, or
    `listening_note` when the agent may not see them). The master is the one named by the
    pid file (the config's `pid` directive, else /run/nginx.pid), or one started on the
    configured config; `other_masters` lists nginx masters of other configs, and
    `pid_file_note` says when the pid file is missing or stale; `enabled_at_boot` whether
    systemd or the init scripts start it at boot.""",
    timeout_s=15,
)
async def process_status(ctx: ProbeContext, params: NoParams) -> NginxProcess:
    named = ctx.settings.for_pack("nginx").get("config")
    config = str(Path(str(named))) if named else DEFAULT_CONFIG
    return await ctx.in_thread(read_process, config, bool(named))
