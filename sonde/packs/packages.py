"""The package that brings each optional command a probe or pack needs (README: "Optional commands")."""

from __future__ import annotations

DEBIAN_PACKAGES = {
    "ping": "iputils-ping",
    "traceroute": "traceroute",
    "lsblk": "util-linux",
    "lscpu": "util-linux",
    "dmesg": "util-linux",
    "nginx": "nginx",
    "systemctl": "systemd",
    "journalctl": "systemd",
}


def install_hint(command: str) -> str:
    """`` (Debian and Ubuntu: apt install PACKAGE)`` for a known command, else nothing."""
    package = DEBIAN_PACKAGES.get(command)
    return f" (Debian and Ubuntu: apt install {package})" if package else ""
