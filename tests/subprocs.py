"""Running a command a test needs to succeed."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import require


def run_any(argv: list[str], *, timeout: float = 120, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to the end (text, output captured), however it exits."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **options)


def run_ok(argv: list[str], *, timeout: float = 120, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to the end (text, output captured); it must exit 0, else its output is the failure."""
    done = run_any(argv, timeout=timeout, **options)
    assert done.returncode == 0, (
        f"{argv[:4]} exited {done.returncode}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    return done


NOT_UTF8_NAME = b"\xff\xfesleeper"
NOT_UTF8_SHOWN = "\\xff\\xfesleeper"  # how a probe shows it: the bytes, escaped


@contextmanager
def process_named_not_utf8(directory: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep`` whose process name and argv[0] are bytes that are not UTF-8 (killed on exit).

    Python keeps such bytes (from /proc, a directory) as lone surrogates, which
    no UTF-8 encoder takes: the agent and `sonde serve --json` died of them.
    """
    sleep = shutil.which("sleep")
    assert sleep is not None
    link = os.fsencode(directory) + b"/" + NOT_UTF8_NAME
    os.symlink(os.fsencode(sleep), link)
    process = subprocess.Popen([link, b"300"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def without_file_overrides(argv: list[str]) -> list[str]:
    """``argv`` run so that file modes bind it: as root, without the capabilities that override them."""
    if os.geteuid() != 0:
        return argv
    require(
        shutil.which("setpriv") is not None, "setpriv (util-linux) drops root's file-override capabilities"
    )
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", *argv]
