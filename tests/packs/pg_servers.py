"""Throwaway PostgreSQL servers of the tests' own, on 127.0.0.1 under /tmp: a lone server, or a
primary with a streaming standby (pg_basebackup -R) or one fed by log shipping alone, each started
by a fixture and stopped after.

Made with the machine's own PostgreSQL binaries (Debian's under /usr/lib/postgresql/*/bin), run as
the ``postgres`` user when the tests run as root (initdb refuses root). Nothing waits unbounded: every
command has a timeout, and the servers are stopped (immediate mode) and their directory removed
however the test ends. A cluster takes about half a second to make, a standby a little more.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import require
from tests.ports import free_port

COMMAND_TIMEOUT_S = 20  # one initdb, pg_basebackup or pg_ctl; each takes well under a second here
# fast and small: no fsync (thrown away after), little shared memory
BASE_SETTINGS = {"fsync": "off", "shared_buffers": "16MB", "listen_addresses": "127.0.0.1"}


def binaries() -> Path | None:
    """The newest PostgreSQL's bin directory on this machine (None: none installed)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda path: int(path.parent.parent.name)
    )
    return found[-1].parent if found else None


def as_owner(argv: Sequence[str]) -> list[str]:
    """``argv`` run as the ``postgres`` user when this is root (initdb and postgres refuse root)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else list(argv)


@dataclass
class Server:
    """One server of the tests' own: its data directory, port and settings."""

    bin: Path
    root: Path
    name: str
    port: int = field(default_factory=free_port)
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.root / self.name

    def run(self, tool: str, *args: str) -> None:
        subprocess.run(
            as_owner([str(self.bin / tool), *args]),
            check=True,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            cwd=self.root,
        )

    def start(self) -> None:
        options = " ".join(
            f"-c {key}={value}"
            for key, value in {**BASE_SETTINGS, **self.settings, "port": str(self.port)}.items()
        )
        options += f" -c unix_socket_directories={self.root}"
        self.run(
            "pg_ctl", "-D", str(self.data), "-w", "-t", "15", "-o", options, "-l", f"{self.data}.log", "start"
        )

    def stop(self, mode: str = "immediate") -> None:
        with suppress(subprocess.SubprocessError):
            self.run("pg_ctl", "-D", str(self.data), "-w", "-t", "15", "-m", mode, "stop")

    def params(self, **more: Any) -> dict[str, Any]:
        """A probe's connection params for this server."""
        return {"host": "127.0.0.1", "port": self.port, "user": "postgres", **more}

    def connect(self, user: str = "postgres", autocommit: bool = True) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=user,
            dbname="postgres",
            connect_timeout=3,
            autocommit=autocommit,
        )

    def sql(self, *statements: str) -> list[Any]:
        """Each statement's first row (None for one that returns none), as the superuser."""
        rows = []
        with self.connect() as connection:
            for statement in statements:
                cursor = connection.execute(statement)  # type: ignore[arg-type]  (the tests' constant SQL)
                rows.append(cursor.fetchone() if cursor.description else None)
        return rows


@contextmanager
def workspace() -> Iterator[tuple[Path, Path]]:
    """A directory under /tmp the ``postgres`` user owns, removed after; and the binaries."""
    found = binaries()
    require(found is not None, "PostgreSQL's server binaries (apt-get install postgresql)")
    assert found is not None
    root = Path(tempfile.mkdtemp(prefix="sonde-pg-"))
    try:
        yield found, owned(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def owned(path: Path) -> Path:
    """``path``, made the ``postgres`` user's when this is root (the servers run as that user)."""
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


def initdb(server: Server, *args: str) -> None:
    server.run(
        "initdb", "-D", str(server.data), "-A", "trust", "-U", "postgres", "-N", "--no-instructions", *args
    )


@contextmanager
def lone_server(settings: dict[str, str], *initdb_args: str) -> Iterator[Server]:
    """A fresh server with ``settings``, stopped and removed after."""
    with workspace() as (bin_dir, root):
        server = Server(bin_dir, root, "lone", settings=settings)
        initdb(server, *initdb_args)
        try:
            server.start()
            yield server
        finally:
            server.stop()


@contextmanager
def primary_and_standby(log_shipping: bool = False) -> Iterator[tuple[Server, Server]]:
    """A primary and a standby streaming from it (made with pg_basebackup -R), stopped and removed after.

    With ``log_shipping`` the standby never streams: the primary archives its WAL into a directory
    (archive_command cp) and the standby, made without -R, replays from there alone (restore_command).
    """
    with workspace() as (bin_dir, root):
        archive = root / "archive"
        primary = Server(bin_dir, root, "primary")
        standby = Server(bin_dir, root, "standby")
        if log_shipping:
            archive.mkdir()
            owned(archive)
            primary.settings |= {"archive_mode": "on", "archive_command": f"'cp %p {archive}/%f'"}
            standby.settings |= {"restore_command": f"'cp {archive}/%f %p'"}
        initdb(primary)
        try:
            primary.start()
            standby.run(
                "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                "-D", str(standby.data), *([] if log_shipping else ["-R"]), "-X", "stream", "-c", "fast",
            )  # fmt: skip
            if log_shipping:
                (standby.data / "standby.signal").touch()
                owned(standby.data / "standby.signal")
            standby.start()
            yield primary, standby
        finally:
            standby.stop()
            primary.stop()
