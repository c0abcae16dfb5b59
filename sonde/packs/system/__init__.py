"""The `system` pack: CPU, memory, disks, network, processes of this machine."""

from __future__ import annotations

from pathlib import Path

from sonde import __version__
from sonde.packs.base import Pack

PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="system",
    version=__version__,
    description="Core readings of any Linux machine: OS, CPU, memory, disks, network, processes.",
    categories=("system",),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.blockdev",
        f"{__name__}.listening",
        f"{__name__}.connections",
        f"{__name__}.cpu",
        f"{__name__}.disk",
        f"{__name__}.info",
        f"{__name__}.files",
        f"{__name__}.fileread",
        f"{__name__}.deleted_files",
        f"{__name__}.hardware",
        f"{__name__}.kernel",
        f"{__name__}.logs",
        f"{__name__}.memory",
        f"{__name__}.network",
        f"{__name__}.processes",
        f"{__name__}.process_info",
        f"{__name__}.reachability",
        f"{__name__}.runbook",
    ),
)
