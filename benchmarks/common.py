"""What every scenario gets (`Bench`) and gives back (`ScenarioResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psutil

from benchmarks.hub import Workspace
from benchmarks.sizes import Sizes
from benchmarks.stats import Figure

WARMUP_CALLS = 20


@dataclass
class Bench:
    workspace: Workspace
    sizes: Sizes

    def say(self, text: str) -> None:
        print(f"  {text}", flush=True)


@dataclass
class ScenarioResult:
    name: str
    title: str
    status: str = "ok"  # ok | skipped | error
    params: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    background_cpu_percent: float | None = None

    def skip(self, why: str) -> ScenarioResult:
        self.status = "skipped"
        self.notes.append(f"skipped: {why}")
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "other_processes_cpu_percent": self.background_cpu_percent,
            "params": self.params,
            "figures": self.figures,
            "notes": self.notes,
        }


class SelfMeter:
    """CPU seconds of the harness process itself (the MCP clients run here)."""

    def __init__(self) -> None:
        self.process = psutil.Process()

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system
