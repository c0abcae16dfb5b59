"""The `system` pack: CPU, memory, disks, network, processes of this machine."""

from __future__ import annotations

from sonde import __version__
from sonde.packs.base import Pack

PACK = Pack(
    name="system",
    version=__version__,
    description="Core readings of any Linux machine: OS, CPU, memory, disks, network, processes.",
    categories=("system",),
)

# Importing the probe modules declares their probes on PACK.
from sonde.packs.system import (  # noqa: E402,F401
    blockdev,
    connections,
    cpu,
    disk,
    files,
    hardware,
    info,
    kernel,
    listening,
    logs,
    memory,
    network,
    process_info,
    processes,
    reachability,
    runbook,
)
