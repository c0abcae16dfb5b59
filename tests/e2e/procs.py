"""Real processes for end-to-end tests: a `sonde hub` and `sonde start` agents.

Everything binds 127.0.0.1 port 0; every wait has a deadline; every process
is killed when its context ends.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.subprocs import run_ok

SONDE = [sys.executable, "-m", "sonde"]
URL_LINE = re.compile(r"sonde hub listening on (\S+)")
KEY_LINE = re.compile(r"^\s+(sonde_[A-Za-z0-9_-]+)\s*$")
KEY_FILE_LINE = re.compile(r"it is in (.+?), readable by this user only\.")  # a text line, or JSON's message


def first_admin_key(proc: Proc, data_dir: Path) -> str:
    """The admin key a hub made at its first start: with stderr a pipe, in a file, never in its log."""
    path = Path(proc.wait_for(KEY_FILE_LINE).group(1))
    assert path == data_dir / "first-admin-key"
    assert path.stat().st_mode & 0o777 == 0o600
    return path.read_text().strip()


# `sonde up`'s connection line with stderr a pipe: the key is not printed, quickstart.json holds it
UP_LINE = re.compile(
    r'claude mcp add --transport http sonde (http://127\.0\.0\.1:\d+)/mcp --header "Authorization: Bearer <the API key>"'
)


def up_url_and_key(proc: Proc, data_dir: Path) -> tuple[str, str]:
    """The URL `sonde up` printed, and its key, read from quickstart.json (never from its output)."""
    (url,) = proc.wait_for(UP_LINE, timeout=30).groups()
    key = json.loads((data_dir / "quickstart.json").read_text())["apiKey"]
    assert isinstance(key, str)
    assert not any(key in line for line in proc.lines), "the key was printed to a pipe"
    return url, key


@dataclass
class Proc:
    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    pumper: threading.Thread | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def pump(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 20.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    match = pattern.search(line)
                    if match:
                        return match
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and seen == len(self.lines)):
                    raise AssertionError(
                        f"no line matching {pattern.pattern!r} within {timeout}s; stderr:\n"
                        + "\n".join(self.lines)
                    )
                self._changed.wait(min(left, 0.2))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.pumper is not None:
            self.pumper.join(5)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        return self.popen.returncode

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def spawn(args: list[str], env: dict[str, str], stdout: int = subprocess.DEVNULL) -> Proc:
    return watch([*SONDE, *args], env, stdout)


def watch(argv: list[str], env: dict[str, str], stdout: int = subprocess.DEVNULL) -> Proc:
    """Start ``argv`` with its stderr read line by line into the returned `Proc`."""
    popen = subprocess.Popen(
        argv, env=env, stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    proc = Proc(popen)
    proc.pumper = threading.Thread(target=proc.pump, daemon=True)
    proc.pumper.start()
    STARTED.append(proc)
    return proc


# Every process `watch` started: what a failing test left running is stopped when the session ends
# (tests/conftest.py), not left behind on the machine.
STARTED: list[Proc] = []


def stop_leftovers() -> int:
    """Stop every started process still running; how many there were."""
    left = [proc for proc in STARTED if proc.popen.poll() is None]
    for proc in left:
        proc.stop(timeout=5)
    return len(left)


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONDE_")}
    env["HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class RunningHub:
    proc: Proc
    url: str
    admin_key: str
    data_dir: Path
    env: dict[str, str]

    def cli(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*SONDE, *args, "--data-dir", str(self.data_dir)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def statuses(self) -> dict[str, str]:
        """Each enrolled agent's status, by name, as `GET /api/v1/agents` gives it."""
        with self.client() as http:
            return {a["name"]: a["status"] for a in http.get("/api/v1/agents").json()["agents"]}

    def token(self, *extra: str) -> str:
        done = self.cli("hub", "token", "create", *extra)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key or self.admin_key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


@contextmanager
def running_hub(tmp: Path, *extra: str, site: Path | None = None) -> Iterator[RunningHub]:
    """A `sonde hub` on port 0; ``site`` goes on its PYTHONPATH (test-only packs)."""
    data_dir = tmp / "hubdata"
    env = with_site(base_env(tmp / "hubhome"), site)
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir), *extra], env)
    try:
        key = first_admin_key(proc, data_dir)
        # the banner's example command names the data directory (not the default one)
        proc.wait_for(re.compile(re.escape(f"`sonde hub key create --name NAME --data-dir {data_dir}`")))
        url = proc.wait_for(URL_LINE).group(1)
        assert not any(KEY_LINE.search(line) or key in line for line in proc.lines)  # not in its log
        yield RunningHub(proc, url, key, data_dir, env)
    finally:
        proc.stop()


@dataclass
class EnrolledAgent:
    name: str
    home: Path
    env: dict[str, str]
    proc: Proc | None = None

    def start(self, *extra: str) -> Proc:
        self.proc = spawn(["start", "--allow-root", *extra], self.env)
        return self.proc

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        return self.proc.stop(sig)

    def clone(self, home: Path) -> EnrolledAgent:
        """This identity under another HOME, as a config copied to another machine: a `sonde start`
        there is not refused by this one's lock (`sonde.agent.identity_lock`)."""
        shutil.copytree(self.home / ".sonde", home / ".sonde", ignore=shutil.ignore_patterns("agent.lock"))
        return EnrolledAgent(self.name, home, {**self.env, "HOME": str(home)})


def with_site(env: dict[str, str], site: Path | None) -> dict[str, str]:
    if site is not None:
        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)}
    return env


def enroll_agent(
    hub: RunningHub, tmp: Path, name: str, site: Path | None = None, extra_env: dict[str, str] | None = None
) -> EnrolledAgent:
    """Enroll ``name`` with its own HOME; ``site`` and ``extra_env`` stay with it for `start`."""
    home = tmp / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    env = {**with_site(base_env(home), site), **(extra_env or {})}
    token = hub.token()
    run_ok([*SONDE, "enroll", "--hub", hub.url, "--token", token, "--name", name], env=env, timeout=30)
    return EnrolledAgent(name, home, env)


def wait_until(predicate: object, timeout: float = 15.0, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


@contextmanager
def on_a_terminal(args: list[str], env: dict[str, str], until: re.Pattern[str]) -> Iterator[str]:
    """Run ``sonde ARGS`` with its stderr on a pseudo-terminal; yield what it wrote up to the first
    match of ``until`` (at most 30 s), while it runs; it is stopped after the block."""
    controller, terminal = pty.openpty()
    popen = subprocess.Popen(
        [*SONDE, *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal
    )
    os.close(terminal)
    seen = ""
    try:
        deadline = time.monotonic() + 30
        while not until.search(seen) and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                seen += os.read(controller, 4096).decode(errors="replace")
        yield seen
    finally:
        popen.terminate()
        popen.wait(10)
        os.close(controller)
