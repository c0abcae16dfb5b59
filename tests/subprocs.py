"""Running a command a test needs to succeed."""

from __future__ import annotations

import subprocess
from typing import Any


def run_ok(argv: list[str], *, timeout: float = 120, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to the end (text, output captured); it must exit 0, else its output is the failure."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **options)
    assert done.returncode == 0, (
        f"{argv[:4]} exited {done.returncode}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    return done
