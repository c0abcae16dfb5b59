"""The `systemd` pack: units, their state, failed units and the journal.

systemd is only asked when it is the init system of this machine (it has
created /run/systemd/system, the test ``sd_booted()`` uses); elsewhere the pack
is not detected and its probes answer "not available on this machine".
"""

from __future__ import annotations

from pathlib import Path

from sonde import __version__
from sonde.packs.base import Detection, Pack, ProbeUnavailable, Requirements

BOOTED_MARKER = Path("/run/systemd/system")
PROC_ROOT = Path("/proc")


def init_name(proc_root: Path = PROC_ROOT) -> str:
    try:
        return (proc_root / "1" / "comm").read_text().strip()
    except OSError:
        return "unknown"


def detect_systemd() -> Detection:
    if BOOTED_MARKER.is_dir():
        return Detection(True, "systemd is the init system")
    return Detection(False, f"systemd is not the init system here (PID 1 is {init_name()!r})")


def require_systemd() -> None:
    """Raise `ProbeUnavailable` unless systemd runs this machine."""
    detection = detect_systemd()
    if not detection.detected:
        raise ProbeUnavailable(f"systemd is not available on this machine: {detection.reason}")


PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="systemd",
    version=__version__,
    description="systemd units (state, restarts, memory), failed units and the journal, audit included.",
    requires=Requirements(commands=("systemctl",)),
    detect=detect_systemd,
    categories=("systemd",),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.units",
        f"{__name__}.journal",
        f"{__name__}.runbook",
    ),
)
