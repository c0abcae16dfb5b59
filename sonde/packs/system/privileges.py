"""Who the agent runs as: its user, its groups, its effective capabilities.

Probes use these to explain a refusal truthfully (which group or capability
would help) instead of guessing. The readers here are cheap and never raise.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
CAP_SYS_PTRACE = 19
CAP_SYSLOG = 34
PROC_SELF_STATUS = Path("/proc/self/status")
UNIT_NAME = "sonde-agent"  # the unit `sonde service install` writes


def agent_user() -> str:
    """The name of the effective user (its number when it has no name)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def agent_groups() -> frozenset[int]:
    """Every group the process holds: the effective one and the supplementary ones."""
    return frozenset(os.getgroups()) | {os.getegid()}


def parse_effective_capabilities(status: str) -> int:
    """The ``CapEff`` bit mask of a /proc/PID/status text (0 when it is missing)."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split(":", 1)[1].strip(), 16)
    return 0


def effective_capabilities() -> int:
    try:
        return parse_effective_capabilities(PROC_SELF_STATUS.read_text())
    except OSError:
        return 0


def has_capability(mask: int, capability: int) -> bool:
    return bool(mask >> capability & 1)


def sees_every_process(mask: int) -> bool:
    """Whether capabilities ``mask`` open every process's /proc/PID/fd: listing another user's
    (mode 0500) needs CAP_DAC_READ_SEARCH or CAP_DAC_OVERRIDE, reading its links CAP_SYS_PTRACE."""
    may_list = has_capability(mask, CAP_DAC_READ_SEARCH) or has_capability(mask, CAP_DAC_OVERRIDE)
    return may_list and has_capability(mask, CAP_SYS_PTRACE)


def capability_grant(*capabilities: str) -> str:
    """How to give the agent's systemd unit ``capabilities`` (its bounding set starts empty)."""
    names = " ".join(capabilities)
    return (
        f"add {names} to both CapabilityBoundingSet= and AmbientCapabilities= of the agent's unit "
        f"(`systemctl edit {UNIT_NAME}`, then restart it; the unit sonde installs empties "
        "CapabilityBoundingSet=, so an ambient capability alone is dropped)"
    )


def other_users_fds_grant() -> str:
    """The end of a note on a /proc/PID/fd the agent may not read: who may, and how to let the agent."""
    return (
        "which another user's process opens only to root or to a process with CAP_SYS_PTRACE and "
        f"CAP_DAC_READ_SEARCH; to see them, {capability_grant('CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH')}. "
        "CAP_SYS_PTRACE also lets the agent read any process's memory"
    )
