"""`sonde hub` given a second SIGTERM or SIGINT while it drains (`kill` again, an impatient
supervisor, Ctrl-C twice): it says it is already stopping and exits 0 as the first would have it.

Before, the first signal ended the hub's receiving of signals, so the second took its default
action: SIGTERM ended the draining hub on the spot (exit 143, the audit entries it still held
lost), SIGINT raised KeyboardInterrupt into it. A request whose body is still coming holds the
drain open (up to hypercorn's graceful timeout of 5 s): the second signal lands inside it.
"""

from __future__ import annotations

import re
import signal
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sonde.hub.run import ALREADY_STOPPING
from tests.e2e.procs import running_hub

pytestmark = pytest.mark.e2e

SHUTTING_DOWN = re.compile(r"^sonde hub: shutting down$")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_while_draining_is_said_and_the_hub_exits_0(
    tmp_path: Path, signum: signal.Signals
) -> None:
    with running_hub(tmp_path) as hub:
        where = urlsplit(hub.url)
        with socket.create_connection((where.hostname, where.port), timeout=10) as slow:
            head = f"POST /api/v1/keys HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: application/json\r\n"
            slow.sendall(f"{head}Content-Length: 100\r\n\r\n{{".encode())  # 1 byte of 100
            hub.proc.popen.send_signal(signum)
            hub.proc.wait_for(SHUTTING_DOWN)
            hub.proc.popen.send_signal(signum)
            hub.proc.wait_for(re.compile(re.escape(ALREADY_STOPPING)))
        code = hub.proc.popen.wait(15)
    output = "\n".join(hub.proc.lines)
    assert code == 0, output
    assert "Traceback" not in output, output
    assert "KeyboardInterrupt" not in output, output
    assert hub.proc.lines.count("sonde hub: shutting down") == 1, output
