"""The hub's settings, built once by the CLI and passed everywhere."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from sonde.hub.proxies import IPNetwork

DEFAULT_BIND = "127.0.0.1:3000"
DEFAULT_HEARTBEAT_INTERVAL_S = 30.0
DEFAULT_PROBE_TIMEOUT_S = 30.0
DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
DEFAULT_SESSION_IDLE_TIMEOUT_S = 30 * 60.0
DEFAULT_MAX_SESSIONS_PER_KEY = 200  # of the SDK's 10,000: one key cannot take them all


def default_data_dir() -> Path:
    return Path(os.environ.get("SONDE_DATA_DIR") or Path.home() / ".local" / "share" / "sonde")


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:3000`` for IPv6) -> (host, port); `ValueError` otherwise."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"bind address {text!r} must look like HOST:PORT, e.g. 127.0.0.1:3000")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0..65535")
    return host.strip("[]"), port


ALLOWED_HOST = re.compile(
    r"(?:\[[0-9A-Fa-f:.]+(?:%25[0-9A-Za-z._~-]+)?\]|[A-Za-z0-9_][A-Za-z0-9_.-]{0,252})(?::(?:[0-9]{1,5}|\*))?"
)


def split_hosts(values: tuple[str, ...]) -> tuple[str, ...]:
    """Host names from ``--allowed-host`` / ``SONDE_ALLOWED_HOSTS`` values, each of which may list
    several separated by commas or spaces (no host name holds either); `ValueError` for one that
    is no Host header's value (a URL, say), which would never match and admit nothing."""
    hosts = tuple(host for value in values for host in value.replace(",", " ").split())
    for host in hosts:
        if ALLOWED_HOST.fullmatch(host) is None:
            netloc = urlsplit(host).netloc.rpartition("@")[2] if "://" in host else ""
            if not netloc and host.count(":") >= 2:  # an IPv6 address: a Host header brackets it
                netloc = f"[{host}]"
            hint = f": give {netloc!r}" if netloc and ALLOWED_HOST.fullmatch(netloc) else ""
            raise ValueError(
                f"--allowed-host {host!r} is no host as a client's Host header names it (a name or "
                f"address, with :PORT or :* or without, e.g. hub.example.com or [::1]:3000){hint}"
            )
    return hosts


@dataclass(frozen=True)
class HubConfig:
    data_dir: Path = field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = 3000
    certfile: Path | None = None
    keyfile: Path | None = None
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"
    allowed_hosts: tuple[str, ...] = ()
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_probes_in_flight_per_agent: int = 64
    session_idle_timeout_s: float = DEFAULT_SESSION_IDLE_TIMEOUT_S
    max_sessions_per_key: int = DEFAULT_MAX_SESSIONS_PER_KEY
    audit_keep_s: float | None = None  # --audit-keep: the hub prunes older audit rows itself
    trusted_proxies: tuple[IPNetwork, ...] = ()  # --trusted-proxy: whose X-Forwarded-For is believed

    @property
    def last_seen_write_every_s(self) -> float:
        """How often the hub stores when each connected agent was last heard from: every two
        heartbeats (60 s by default), so the database is never further behind than that."""
        return 2 * self.heartbeat_interval_s

    @property
    def db_path(self) -> Path:
        return self.data_dir / "sonde.db"

    @property
    def scheme(self) -> str:
        return "https" if self.certfile else "http"
