"""A fault no Python code survives is said on the hub's stderr, with every thread's stack.

SQLite maps its -shm file into memory: when the kernel will not let the hub write it (the file
made immutable, its file system remounted read-only), the next write ends the hub with SIGBUS,
and a review found its log said nothing at all. The fault is sent here as the kernel would send it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.procs import running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def test_a_bus_error_is_said_with_the_stacks(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        code = hub.proc.stop(signal.SIGBUS)
        said = hub.proc.output
    assert code == -signal.SIGBUS
    assert "Fatal Python error: Bus error" in said, said
    assert "Current thread" in said or "Thread 0x" in said, said
