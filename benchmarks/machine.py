"""What the numbers were measured on: CPU, cores, RAM, kernel, Python, package versions."""

from __future__ import annotations

import datetime
import os
import platform
import resource
import sys
from importlib import metadata
from typing import Any

import psutil

PACKAGES = (
    "sonde",
    "trio",
    "trio-websocket",
    "hypercorn",
    "quart-trio",
    "quart",
    "mcp",
    "pydantic",
    "pydantic-core",
    "pynacl",
    "httpx2",
    "psutil",
)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def describe_machine() -> dict[str, Any]:
    """The machine and software the run happened on, as JSON-ready values."""
    memory = psutil.virtual_memory()
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_bytes": memory.total,
        "ram_gib": round(memory.total / 2**30, 1),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def raise_open_file_limit() -> dict[str, Any]:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit (children inherit it); says what it did."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    new_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"before_soft": soft, "hard": hard, "soft": new_soft}
