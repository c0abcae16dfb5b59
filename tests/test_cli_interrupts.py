"""Ctrl-C (SIGINT) and `sonde`: while a command starts up it exits 130 quietly, never with a
traceback; once its work is done and said, it exits 0 (an enrollment made and saved, a backup
written, are not undone by a late Ctrl-C, and must not be reported as failed).

The SIGINT is sent by the process to itself at a chosen moment, so the tests do not race it:
`TRIPWIRE` runs the real `sonde` entry point (`sonde.cli.main`, what the console script runs) after
arming a trap that sends it when a module is first imported, or when a line is written to stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sonde.agent.config import load_config
from sonde.hub.db import open_database
from tests.e2e.procs import base_env, running_hub
from tests.subprocs import run_any

TRIPWIRE = """
import os, signal, sys

signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell leaves it for a command
when, what = sys.argv[1], sys.argv[2]
sys.argv = ["sonde", *sys.argv[3:]]


def interrupt():
    os.kill(os.getpid(), signal.SIGINT)


class OnImport:
    def find_spec(self, name, path=None, target=None):
        if name == what:
            interrupt()
        return None


class OnStderr:
    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        written = self.stream.write(text)
        if what in text:
            self.stream.flush()
            interrupt()
        return written

    def __getattr__(self, name):
        return getattr(self.stream, name)


if when == "import":
    sys.meta_path.insert(0, OnImport())
else:
    sys.stderr = OnStderr(sys.stderr)
from sonde.cli import main

main()
"""


def sonde_interrupted(
    tmp_path: Path, when: str, what: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`sonde ARGS`, sent SIGINT when module ``what`` is first imported (``when="import"``) or when
    stderr is given text holding ``what`` (``when="stderr"``)."""
    argv = [sys.executable, "-c", TRIPWIRE, when, what, *args]
    return run_any(argv, env=env or base_env(tmp_path / "home"), timeout=60)


@pytest.mark.parametrize(
    ("args", "module"),
    [
        (["hub", "--help"], "cyclopts"),
        (["hub", "key", "list"], "sonde.commands"),
        (["enroll", "--hub", "http://127.0.0.1:9", "--token", "enr_" + "Q" * 32], "sonde.commands_hub"),
        (["start"], "sonde.agent.config"),
    ],
    ids=" ".join,
)
def test_ctrl_c_while_a_command_starts_exits_130_quietly(
    tmp_path: Path, args: list[str], module: str
) -> None:
    done = sonde_interrupted(tmp_path, "import", module, *args)
    assert done.returncode == 130, done.stderr
    assert done.stderr == ""
    assert done.stdout == ""


def test_ctrl_c_after_a_backup_is_made_and_said_exits_0(tmp_path: Path) -> None:
    open_database(tmp_path / "data" / "sonde.db").close()
    copy = tmp_path / "copy.db"
    done = sonde_interrupted(
        tmp_path, "stderr", "backed up ", "hub", "backup", str(copy), "--data-dir", str(tmp_path / "data")
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"to {copy} in " in done.stderr
    assert copy.is_file()


def test_ctrl_c_after_enrolling_is_made_and_said_exits_0(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        token = hub.token()
        done = sonde_interrupted(
            tmp_path,
            "stderr",
            "enrolled as ",
            "enroll",
            "--hub",
            hub.url,
            "--token",
            token,
            "--name",
            "web-9",
        )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "enrolled as web-9" in done.stderr
    config = load_config(tmp_path / "home" / ".sonde" / "config.json")
    assert config is not None
    assert config.enrolled
    assert config.name == "web-9"
