"""Every probe that runs a command answers, when the command is missing, with the package to install.

The README's "Optional commands" promises it; `sonde.packs.packages.DEBIAN_PACKAGES` keeps it.
Each probe of the packs that run commands is run for real with an empty PATH.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.packages import DEBIAN_PACKAGES
from sonde.packs.registry import load_packs

REGISTRY = load_packs()
COMMAND_PACKS = ("system", "systemd", "nginx")  # the others talk to sockets, never to a command
NEEDED_PARAMS: dict[str, dict[str, Any]] = {
    "system.network.ping": {"host": "127.0.0.1"},
    "system.network.traceroute": {"host": "127.0.0.1"},
    "system.process.info": {"pid": os.getpid()},
    "systemd.unit.status": {"unit": "ssh.service"},
    **{f"system.{area}": {"path": "/var/log"} for area in ("files.list", "files.directories")},
    **{f"system.{area}": {"path": "/etc/hostname"} for area in ("files.read", "logs.tail", "logs.head")},
}
NAMES = [name for pack in COMMAND_PACKS for name in REGISTRY.packs[pack].probes]
MISSING = "' is not installed on this machine"


def test_every_declared_command_has_its_package() -> None:
    declared = {
        command
        for pack in REGISTRY.packs.values()
        for requires in (pack.requires, *(spec.requires for spec in pack.probes.values()))
        for command in requires.commands
    }
    assert declared >= {"ping", "traceroute", "lsblk", "dmesg", "nginx", "systemctl", "journalctl"}
    assert declared <= set(DEBIAN_PACKAGES)


async def refusal_of(name: str) -> ProbeExecutionError | None:
    """How probe ``name`` refused to answer, or None when it answered."""
    try:
        await execute_probe(REGISTRY, name, NEEDED_PARAMS.get(name, {}), ProbeContext())
    except ProbeExecutionError as error:
        return error
    return None


@pytest.mark.parametrize("name", NAMES)
async def test_a_missing_command_is_named_with_its_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    error = await refusal_of(name)
    assert error is None or error.code != "invalid_params", error
    if error is not None and MISSING in error.message:
        command = error.message.split("'")[1]
        assert error.message.endswith(f"(Debian and Ubuntu: apt install {DEBIAN_PACKAGES[command]})")


@pytest.mark.parametrize("pack", ["nginx", "systemd"])
def test_a_pack_not_detected_for_a_missing_command_names_its_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pack: str
) -> None:
    """`sonde packs list` says why a pack does not apply: the package to install, as a probe's refusal does."""
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    found = REGISTRY.packs[pack].detection()
    assert not found.detected
    command = REGISTRY.packs[pack].requires.commands[0]
    assert f"command {command!r} (Debian and Ubuntu: apt install {DEBIAN_PACKAGES[command]})" in found.reason
