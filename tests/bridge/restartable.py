"""A real `sonde hub` that a test stops, freezes and starts again on the same port.

The port is picked from `PORT_RANGE` (free a moment before), so the bridge can
be pointed at the hub before it first answers, and find it again after a restart.
"""

from __future__ import annotations

import random
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.procs import URL_LINE, Proc, base_env, first_admin_key, spawn

PORT_RANGE = (23000, 23999)


def free_port_in_range(low: int = PORT_RANGE[0], high: int = PORT_RANGE[1]) -> int:
    """A port in ``low..high`` on 127.0.0.1 that nothing listened on a moment ago."""
    for port in random.sample(range(low, high + 1), 50):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {low}-{high}")


@dataclass
class RestartableHub:
    data_dir: Path
    env: dict[str, str]
    port: int
    extra: tuple[str, ...] = ()  # more `sonde hub` flags
    admin_key: str = ""
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the hub (again) and return once it listens."""
        args = ["hub", "--bind", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir), *self.extra]
        self.proc = spawn(args, self.env)
        if not self.admin_key:
            self.admin_key = first_admin_key(self.proc, self.data_dir)
        assert self.proc.wait_for(URL_LINE, timeout=30).group(1) == self.url

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            self.proc.stop(sig)
            self.proc = None

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.popen.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.popen.send_signal(signal.SIGCONT)


@contextmanager
def restartable_hub(root: Path, *extra: str) -> Iterator[RestartableHub]:
    """A hub under ``root`` (``extra``: more flags), started, its admin key known; stopped at the end."""
    hub = RestartableHub(root / "hubdata", base_env(root / "hubhome"), free_port_in_range(), extra)
    hub.start()
    try:
        yield hub
    finally:
        if hub.proc is not None:
            hub.thaw()
        hub.stop()
