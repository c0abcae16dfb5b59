"""Everything visible about one process, by PID.

The OS may refuse some fields (another user's cwd, exe or open files): those come
back as null and are named in ``denied``; the probe itself still succeeds.

psutil's open files are those with a path still: a file deleted while the process holds it
(a log rotated away under its writer) is left out, so a process holding 15,000 of them showed
2 open files beside 15,005 descriptors. Those are counted apart, from the links in
/proc/PID/fd (`sonde.packs.system.deleted_files.deleted_file`), at most `FDS_LOOKED_MAX`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import psutil
import trio
from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.deleted_files import deleted_file
from sonde.packs.system.info import iso_utc
from sonde.packs.system.processes import CMDLINE_MAX_CHARS, CPU_SAMPLE_S, PROC_ROOT

PID_MAX = 4_194_304  # the largest pid_max Linux allows
CMDLINE_MAX_ARGS = 256
DENIED = object()  # marks a field the OS refused, in Process.as_dict output
FDS_LOOKED_MAX = 100_000  # descriptors looked at for deleted files held open
INFO_ATTRS = [
    "ppid",
    "name",
    "exe",
    "cmdline",
    "username",
    "status",
    "create_time",
    "cpu_percent",
    "memory_info",
    "num_threads",
    "open_files",
    "num_fds",
    "cwd",
]


class ProcessInfoParams(Params):
    pid: int = Field(ge=1, le=PID_MAX, strict=True, description="Process ID.")


class ProcessInfo(Result):
    pid: int
    ppid: int | None
    name: str | None
    exe: str | None
    cmdline: list[str] | None
    username: str | None
    status: str | None
    create_time: str | None
    cpu_percent: float | None
    memory_rss_bytes: int | None
    memory_vms_bytes: int | None
    num_threads: int | None
    open_files_count: int | None = Field(
        description="Regular files open that still have a path; files deleted while open are "
        "not among them (see `deleted_open_files_count`), nor are sockets, pipes and devices."
    )
    deleted_open_files_count: int | None = Field(
        description="Regular files deleted while the process holds them open: their space stays "
        "in use until it closes them (system.files.deleted_open lists them). Null when the OS "
        "refuses this agent the process's descriptors (as for `num_fds`)."
    )
    deleted_open_files_complete: bool = Field(
        description=f"False when the count is a lower bound: only the first {FDS_LOOKED_MAX:,} "
        "descriptors were looked at, or none could be (then the count is null)."
    )
    num_fds: int | None = Field(
        description="Every descriptor the process holds open: files (deleted or not), sockets, "
        "pipes, devices and the like."
    )
    cwd: str | None
    denied: list[str]


@dataclass(frozen=True)
class DeletedHeld:
    """How many files deleted while open a process holds: None when its descriptors are not ours to
    see; ``complete`` False when only `FDS_LOOKED_MAX` of them were looked at (or none)."""

    count: int | None = None
    complete: bool = False


def count_deleted_open(pid: int) -> DeletedHeld:
    """The files deleted while open that process ``pid`` holds, from its /proc/PID/fd links."""
    count = 0
    try:
        with os.scandir(PROC_ROOT / str(pid) / "fd") as descriptors:
            for looked, descriptor in enumerate(descriptors):
                if looked >= FDS_LOOKED_MAX:
                    return DeletedHeld(count, complete=False)
                try:
                    count += deleted_file(pid, descriptor.path, int(descriptor.name)) is not None
                except (FileNotFoundError, ProcessLookupError):  # closed meanwhile
                    continue
    except PermissionError:  # another user's process
        return DeletedHeld()
    except (FileNotFoundError, ProcessLookupError):  # it exited meanwhile
        return DeletedHeld()
    return DeletedHeld(count, complete=True)


def _cut_cmdline(args: list[str]) -> list[str]:
    """At most `CMDLINE_MAX_ARGS` arguments of at most `CMDLINE_MAX_CHARS` each; an argument
    cut ends in "…", and a last "… N more arguments" says how many were left out."""
    cut = [
        arg if len(arg) <= CMDLINE_MAX_CHARS else arg[: CMDLINE_MAX_CHARS - 1] + "…"
        for arg in args[:CMDLINE_MAX_ARGS]
    ]
    if len(args) > CMDLINE_MAX_ARGS:
        cut.append(f"… {len(args) - CMDLINE_MAX_ARGS} more arguments")
    return cut


def process_info_from(pid: int, values: dict[str, Any], deleted: DeletedHeld = DeletedHeld()) -> ProcessInfo:
    """A `ProcessInfo` from ``Process.as_dict(INFO_ATTRS, ad_value=DENIED)`` output and the count
    of the files deleted while open it holds."""
    seen = {key: (None if value is DENIED else value) for key, value in values.items()}
    memory = seen.get("memory_info")
    open_files = seen.get("open_files")
    create_time = seen.get("create_time")
    cmdline = seen.get("cmdline")
    cpu_percent = seen.get("cpu_percent")
    return ProcessInfo(
        pid=pid,
        ppid=seen.get("ppid"),
        name=seen.get("name"),
        exe=seen.get("exe") or None,  # kernel threads have no executable
        cmdline=_cut_cmdline(cmdline) if cmdline is not None else None,
        username=seen.get("username"),
        status=seen.get("status"),
        create_time=iso_utc(create_time) if create_time is not None else None,
        cpu_percent=round(cpu_percent, 1) if cpu_percent is not None else None,
        memory_rss_bytes=memory.rss if memory is not None else None,
        memory_vms_bytes=memory.vms if memory is not None else None,
        num_threads=seen.get("num_threads"),
        open_files_count=len(open_files) if open_files is not None else None,
        deleted_open_files_count=deleted.count,
        deleted_open_files_complete=deleted.complete,
        num_fds=seen.get("num_fds"),
        cwd=seen.get("cwd") or None,
        denied=sorted(
            key for key, value in values.items() if value is DENIED and not gone_with_zombie(seen, key)
        ),
    )


def gone_with_zombie(seen: dict[str, Any], key: str) -> bool:
    """A zombie has no command line, working directory or executable left to show: refused
    for it, they are not withheld (its memory and threads are gone too)."""
    return seen.get("status") == "zombie" and key in ("cmdline", "cwd", "exe")


def _no_such_process(pid: int) -> ValueError:
    return ValueError(f"no process with PID {pid}")


def _open_primed(pid: int) -> psutil.Process:
    try:
        process = psutil.Process(pid)
        with contextlib.suppress(psutil.AccessDenied, psutil.ZombieProcess):
            process.cpu_percent(None)
    except psutil.NoSuchProcess:
        raise _no_such_process(pid) from None
    return process


def _read_info(process: psutil.Process) -> ProcessInfo:
    try:
        values = process.as_dict(INFO_ATTRS, ad_value=DENIED)
    except psutil.NoSuchProcess:  # it exited during the CPU sample
        raise _no_such_process(process.pid) from None
    return process_info_from(process.pid, values, count_deleted_open(process.pid))


@PACK.probe(
    "system.process.info",
    """Details of one process by PID: parent PID, name, executable, command line, user,
    status, start time (ISO 8601 UTC), CPU percent over a 0.2 s sample, resident and
    virtual memory in bytes, thread count, and working directory; of its descriptors (`num_fds`,
    all of them), how many are files open with a path (`open_files_count`) and how many files
    deleted while open it holds (`deleted_open_files_count`: their space is not freed until it
    closes them). Fields the OS refuses to show are null and listed in `denied` (a zombie's
    command line, executable and working directory are null and not listed: it has none
    left); a command line is cut to 256 arguments of 512 characters, a cut ending in "…". Use it after
    system.processes.top or system.network.listening to look closer at one process.""",
    timeout_s=5,
)
async def process_info(ctx: ProbeContext, params: ProcessInfoParams) -> ProcessInfo:
    process = await ctx.in_thread(_open_primed, params.pid)
    await trio.sleep(CPU_SAMPLE_S)
    return await ctx.in_thread(_read_info, process)
