"""The `docker` category: containers restarting, unhealthy, OOM-killed or exited with an error."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.docker import PACK
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check

THRESHOLDS: dict[str, Threshold] = {
    "restart_count": Threshold(warning=3, critical=10),
}
PROBE = "docker.containers.list"


def _container_findings(thresholds: Mapping[str, Threshold], row: Reading) -> list[Finding]:
    name = row["name"]
    found: list[Finding] = []
    if row["state"] == "restarting":
        found.append(
            Finding(
                "critical",
                f"Container {name} is restarting",
                f"{name} ({row['image']}) is in a restart loop: {row['status']}; "
                f"see docker.container.logs container={name}.",
                PROBE,
            )
        )
    else:
        found += check(
            thresholds["restart_count"],
            row.get("restart_count"),
            PROBE,
            f"Container {name} has restarted {{value}} times",
            f"{name} ({row['image']}): {row['status']}; see docker.container.logs container={name}.",
        )
    if row.get("health") == "unhealthy":
        found.append(
            Finding(
                "critical",
                f"Container {name} is unhealthy",
                f"Its health check fails: see docker.container.inspect container={name} for the last outputs.",
                PROBE,
            )
        )
    if row["state"] in {"exited", "dead"} and row.get("oom_killed"):
        found.append(
            Finding("critical", f"Container {name} was killed for lack of memory", "OOMKilled is set.", PROBE)
        )
    elif row["state"] in {"exited", "dead"} and row.get("exit_code"):
        found.append(
            Finding(
                "warning",
                f"Container {name} exited with code {row['exit_code']}",
                f"{name} ({row['image']}) stopped with an error: {row['status']}.",
                PROBE,
            )
        )
    return found


def container_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    return [f for row in reading.get("containers", []) for f in _container_findings(thresholds, row)]


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="docker",
        description="Containers that restart, fail their health check, or exited with an error or OOM.",
        steps=(RunbookStep(PROBE, partial(container_findings, thresholds), {"all": True, "limit": 200}),),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK
