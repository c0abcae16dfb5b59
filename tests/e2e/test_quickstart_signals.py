"""`sonde up` given a second SIGINT while it stops (an impatient Ctrl-C, or GNU `timeout -s INT`,
which signals the whole process group): it says it is already stopping, and exits as the first
would have it, with no traceback."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.e2e.procs import base_env, spawn, up_url_and_key


@pytest.mark.parametrize("gap", ["at once", "once stopping"])
def test_a_second_sigint_while_stopping_is_said_not_a_traceback(tmp_path: Path, gap: str) -> None:
    data = tmp_path / "data"
    args = ["up", "--bind", "127.0.0.1:0", "--data-dir", str(data), "--allow-root"]
    proc = spawn(args, base_env(tmp_path / "home"))
    try:
        up_url_and_key(proc, data)
        proc.popen.send_signal(signal.SIGINT)
        if gap == "once stopping":
            proc.wait_for(re.compile("sonde up: shutting down"))
        proc.popen.send_signal(signal.SIGINT)
        code = proc.popen.wait(15)
    finally:
        proc.stop()
    assert "Traceback" not in proc.output, proc.output
    assert "KeyboardInterrupt" not in proc.output, proc.output
    assert code == 0, proc.output
    assert proc.lines.count("sonde up: shutting down") == 1, proc.output
    if gap == "once stopping":  # sent at once, the two may be one pending signal: said once
        assert "sonde up: already shutting down: it exits once the hub has stopped" in proc.lines, proc.output
    assert "audit entries were not written" not in proc.output, proc.output
