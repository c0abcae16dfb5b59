"""The `nginx` pack: whether it runs, config test, error and access logs, and a status summary from the access log.

Log paths come from the probe's ``path`` param, else the agent config
(``packs: {nginx: {access_log: ..., error_log: ..., config: ...}}``), else
Debian's defaults; every path must lie inside the agent's allowed paths.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sonde import __version__
from sonde.packs.base import Detection, Pack, Requirements


def detect_nginx() -> Detection:
    return Detection(True, f"nginx is installed at {shutil.which('nginx')}")


PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="nginx",
    version=__version__,
    description="Whether nginx runs, its config test, error and access log tails, and requests by status from the access log.",
    requires=Requirements(commands=("nginx",), groups=("adm",)),
    detect=detect_nginx,
    categories=("nginx",),
    settings=("access_log", "error_log", "config"),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.configtest",
        f"{__name__}.probes",
        f"{__name__}.process",
        f"{__name__}.runbook",
    ),
)
