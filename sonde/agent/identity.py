"""Facts about this machine and this agent, as sent at enrollment and on register.

The attestation names the OS, the agent version, a hash of the installed
``sonde`` code and the pack list; the hub compares it to the baseline it
recorded and holds a changed agent for an admin.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
import re
import socket
from pathlib import Path
from typing import Any

import psutil

import sonde
from sonde.agent.manifest import pack_detection
from sonde.packs.registry import PackRegistry
from sonde.protocol.messages import Attestation, RegisterPayload
from sonde.protocol.names import NAME_PATTERN

log = logging.getLogger(__name__)

OS_RELEASE_PATH = Path("/etc/os-release")
FALLBACK_AGENT_NAME = "agent"
MAX_NAME_CHARS = 63


def read_os_release(path: Path = OS_RELEASE_PATH) -> str:
    """``PRETTY_NAME`` from an os-release file, or "" when absent or unreadable."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PRETTY_NAME":
            return value.strip().strip("\"'")
    return ""


def machine_facts() -> dict[str, Any]:
    """hostname, os, os_version, kernel, arch and boot_time (epoch seconds) of this machine."""
    return {
        "hostname": socket.gethostname(),
        "os": platform.system().lower() or "linux",
        "os_version": read_os_release(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "boot_time": psutil.boot_time(),
    }


def hash_tree(root: Path) -> str:
    """SHA-256 over the sorted relative paths and contents of every ``.py`` file under ``root``.

    Each file contributes its POSIX relative path, a NUL and the SHA-256 of its
    bytes, so renaming, editing, adding or removing a file changes the hash.
    """
    digest = hashlib.sha256()
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*.py") if p.is_file())
    for relative, path in files:
        digest.update(relative.encode())
        digest.update(b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + digest.hexdigest()


@functools.cache
def code_hash() -> str:
    """`hash_tree` of the installed ``sonde`` package, computed once per process."""
    return hash_tree(Path(sonde.__file__).resolve().parent)


def attestation(registry: PackRegistry, facts: dict[str, Any] | None = None) -> Attestation:
    """What this agent says about itself: OS, kernel, version, code hash, packs."""
    facts = facts or machine_facts()
    return Attestation(
        os=f"{facts['os']} {facts['os_version']}".strip(),
        kernel=facts["kernel"],
        agent_version=sonde.__version__,
        code_hash=code_hash(),
        packs={name: pack.version for name, pack in sorted(registry.packs.items())},
    )


def sanitize_agent_name(raw: str) -> str:
    """``raw`` turned into a valid agent name (`NAME_PATTERN`), or ``"agent"``."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name)[:MAX_NAME_CHARS]
    return name if re.fullmatch(NAME_PATTERN, name) else FALLBACK_AGENT_NAME


def default_agent_name() -> str:
    """This machine's hostname as a valid agent name."""
    return sanitize_agent_name(socket.gethostname())


def active_packs(registry: PackRegistry, enabled: list[str] | None) -> PackRegistry:
    """The packs this agent offers: ``enabled`` by name, or every pack detected here when None."""
    if enabled is not None:
        unknown = sorted(set(enabled) - set(registry.packs))
        if unknown:
            log.warning("enabledPacks names packs that are not installed: %s", ", ".join(unknown))
        return registry.only(enabled)
    return PackRegistry({n: p for n, p in registry.packs.items() if pack_detection(p).detected})


def register_payload(name: str, registry: PackRegistry) -> RegisterPayload:
    """The ``agent.register`` payload for this machine, offering the packs in ``registry``."""
    facts = machine_facts()
    return RegisterPayload(
        name=name,
        hostname=facts["hostname"],
        os=facts["os"],
        os_version=facts["os_version"],
        kernel=facts["kernel"],
        arch=facts["arch"],
        agent_version=sonde.__version__,
        boot_time=facts["boot_time"],
        packs=tuple(pack.descriptor() for pack in registry.packs.values()),
        attestation=attestation(registry, facts),
    )
