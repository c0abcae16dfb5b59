"""The `docker` pack: containers, logs, images, daemon info and stats, read-only.

Everything goes through the Docker Engine API on its unix socket with GET
requests only (`sonde.packs.docker.engine`); no docker CLI is needed. The socket
is /var/run/docker.sock unless the agent config says otherwise
(``packs: {docker: {socket: ...}}``). Access to it needs the 'docker' group,
which is root-equivalent on most hosts: grant it knowingly.
"""

from __future__ import annotations

from pathlib import Path

from sonde import __version__
from sonde.packs.base import Detection, Pack, Requirements

DEFAULT_SOCKET = Path("/var/run/docker.sock")


def detect_docker() -> Detection:
    if DEFAULT_SOCKET.exists():
        return Detection(True, f"Docker Engine API socket at {DEFAULT_SOCKET}")
    return Detection(False, f"no Docker Engine API socket at {DEFAULT_SOCKET} (dockerd is not running)")


PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="docker",
    version=__version__,
    description="Docker containers (state, health, restarts, ports), logs, images, stats and daemon info.",
    requires=Requirements(groups=("docker",)),
    detect=detect_docker,
    categories=("docker",),
    settings=("socket",),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.stats",
        f"{__name__}.probes",
        f"{__name__}.runbook",
    ),
)
