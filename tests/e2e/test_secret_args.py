"""`sonde enroll` takes its token from the environment or stdin, never needing it in argv.

A command line is readable by every local user (``/proc/PID/cmdline``) while the command runs:
one who read an enrollment token there enrolled first, and with a name-reserved token took that
agent's identity. So the token comes from ``SONDE_ENROLL_TOKEN``, else stdin (a hidden prompt on a
terminal, one line from a pipe); ``--token`` still works, with a warning. The real CLI against a
real hub; the argv checks read /proc while enroll waits for its stdin (no timing involved).
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.procs import SONDE, RunningHub, base_env, running_hub
from tests.subprocs import run_any

ARGV_WARNING = (
    "warning: --token put the enrollment token on the command line, where every local user could read it"
)
PROMPT = "enrollment token (input hidden): "
# `sonde ARGS` on the pseudo-terminal of fd 0 as its controlling terminal, as in a login shell:
# getpass opens /dev/tty, which a process without one cannot
ON_ITS_TERMINAL = (
    "import fcntl, os, sys, termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'sonde', *sys.argv[1:]])\n"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    with running_hub(tmp_path_factory.mktemp("secret-args")) as running:
        yield running


def every_command_line() -> list[bytes]:
    """The argv (NUL-separated) of every process this user can see, as any local user reads them."""
    lines = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                lines.append((proc / "cmdline").read_bytes())
            except OSError:  # gone meanwhile, or not ours to read
                pass
    return lines


def argv_of(pid: int, timeout_s: float = 10.0) -> bytes:
    """The argv of process ``pid`` (started, and waiting for its stdin). For a moment after the exec
    it reads empty: the kernel lets the parent go on before it has set the new argv up."""
    deadline = time.monotonic() + timeout_s
    while not (argv := (Path("/proc") / str(pid) / "cmdline").read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return argv


def enrolled_name(home: Path) -> str:
    return str(json.loads((home / ".sonde" / "config.json").read_text())["name"])


def piped_in(argv: list[str], home: Path, secret: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and give it ``secret`` on stdin, once no command line on this machine holds it
    (the command waits for its stdin meanwhile, so it cannot end before)."""
    with subprocess.Popen(  # closing its stdin on the way out ends it, however the test ends
        argv,
        env=base_env(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as running:
        own = argv_of(running.pid)
        assert all(arg.encode() in own for arg in argv[len(SONDE) :]), own  # it is this command's
        assert not any(secret.encode() in line for line in every_command_line())
        out, err = running.communicate(secret + "\n", timeout=60)
    return subprocess.CompletedProcess(argv, running.returncode, out, err)


def enroll_argv(hub: RunningHub, name: str, *extra: str) -> list[str]:
    return [*SONDE, "enroll", "--hub", hub.url, "--name", name, *extra]


def test_the_token_on_stdin_enrolls_and_is_in_no_command_line(hub: RunningHub, tmp_path: Path) -> None:
    token = hub.token("--name", "piped")
    done = piped_in(enroll_argv(hub, "piped"), tmp_path, token)
    assert done.returncode == 0, done.stderr
    assert "enrolled as piped" in done.stderr
    assert "warning" not in done.stderr
    assert token not in done.stdout + done.stderr
    assert enrolled_name(tmp_path) == "piped"
    with hub.client() as http:
        assert http.get("/api/v1/agents/piped").status_code == 200


def test_the_token_in_sonde_enroll_token_enrolls_without_reading_stdin(
    hub: RunningHub, tmp_path: Path
) -> None:
    token = hub.token()
    env = {**base_env(tmp_path), "SONDE_ENROLL_TOKEN": token}
    reading, writing = os.pipe()  # stdin never written nor closed: enroll must not wait for it
    try:
        done = run_any(enroll_argv(hub, "from-env"), env=env, timeout=60, stdin=reading)
    finally:
        os.close(reading)
        os.close(writing)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert enrolled_name(tmp_path) == "from-env"


def test_the_token_as_a_flag_still_enrolls_and_warns_that_others_could_read_it(
    hub: RunningHub, tmp_path: Path
) -> None:
    token = hub.token()
    done = run_any(enroll_argv(hub, "flagged", "--token", token), env=base_env(tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"sonde enroll: {ARGV_WARNING}" in done.stderr
    assert "SONDE_ENROLL_TOKEN" in done.stderr
    assert token not in done.stderr  # the warning names the flag, never the token
    assert enrolled_name(tmp_path) == "flagged"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("", "no enrollment token given"),
        ("\n", "no enrollment token given"),
        ("garbage\n", "the enrollment token is malformed"),
    ],
    ids=["eof", "empty-line", "malformed"],
)
def test_no_token_or_a_malformed_one_on_stdin_is_a_usage_error(
    hub: RunningHub, tmp_path: Path, given: str, says: str
) -> None:
    done = run_any(enroll_argv(hub, "nothing"), env=base_env(tmp_path), timeout=60, input=given)
    assert done.returncode == 2, done.stderr
    assert f"sonde enroll: {says}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".sonde").exists()


def typed_at_the_prompt(args: list[str], home: Path, prompt: str, secret: str) -> str:
    """Run ``sonde ARGS`` on a pseudo-terminal of its own, type ``secret`` at ``prompt`` and
    return all the terminal showed; it must exit 0."""
    controller, terminal = os.openpty()
    running = subprocess.Popen(
        [sys.executable, "-c", ON_ITS_TERMINAL, *args],
        env=base_env(home),
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    try:
        seen = read_terminal(controller, until=re.compile(re.escape(prompt)))
        assert prompt in seen, seen
        os.write(controller, (secret + "\n").encode())
        seen += read_terminal(controller, until=None)  # to the end: EOF once it exits
        assert running.wait(30) == 0, seen
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
        os.close(controller)
    return seen


def test_on_a_terminal_the_token_is_asked_for_and_not_echoed(hub: RunningHub, tmp_path: Path) -> None:
    token = hub.token()
    seen = typed_at_the_prompt(["enroll", "--hub", hub.url, "--name", "typed"], tmp_path, PROMPT, token)
    assert token not in seen  # not echoed
    assert "enrolled as typed" in seen
    assert enrolled_name(tmp_path) == "typed"


def read_terminal(controller: int, until: re.Pattern[str] | None, timeout_s: float = 30.0) -> str:
    """What the terminal shows, up to a match of ``until`` (None: to its end), for at most ``timeout_s``."""
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (until and until.search(seen)):
        ready, _, _ = select.select([controller], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: every process holding the terminal has closed it
            break
        if not chunk:
            break
        seen += chunk.decode(errors="replace")
    return seen
