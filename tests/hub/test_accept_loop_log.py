"""trio's accept loop out of file descriptors: said once a minute, not ten times a second."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import errno, logging
from sonde.hub.logs import configure_logging
configure_logging("text", "INFO")
accept_loop = logging.getLogger("trio.serve_listeners")  # what trio logs each failed accept with
for _ in range(50):
    try:
        raise OSError(errno.EMFILE, "Too many open files")
    except OSError as exc:
        accept_loop.error("accept returned %s (%s); retrying in %s seconds", errno.errorcode[exc.errno], exc, 0.1, exc_info=True)
logging.getLogger("sonde.hub").warning("other loggers are not held back")
"""


def test_failed_accepts_are_said_once_a_minute_without_their_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert [line for line in lines if "accept returned EMFILE" in line] == [lines[0]], done.stderr
    assert "Traceback" not in done.stderr
    assert "other loggers are not held back" in lines[-1]
    assert len(lines) == 2
