"""Keep a stdio protocol's stdin and stdout to itself.

`sonde serve --json` (and any other command speaking a line protocol on
stdin/stdout) runs code it does not control in the same process: packs come
from entry points, and a probe may `print` or start a child process that
writes to fd 1 or reads fd 0. `claim_stdio` takes private copies of fds 0
and 1 for the protocol, then points fd 1 and `sys.stdout` at stderr (a stray
print lands in the log, not between protocol lines) and fd 0 at /dev/null
(nothing else reads the requests).
"""

from __future__ import annotations

import os
import sys


def claim_stdio() -> tuple[int, int]:
    """Return private duplicates of fds 0 and 1 (stdin, stdout) for the protocol alone.

    Afterwards fd 1 and `sys.stdout` write to stderr and fd 0 reads /dev/null,
    for this process and the children it starts. Call it once, before any
    third-party code runs.
    """
    stdin_fd, stdout_fd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    return stdin_fd, stdout_fd
