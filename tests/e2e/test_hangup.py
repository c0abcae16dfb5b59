"""SIGHUP: a `sonde hub` says it and keeps serving; `sonde up`, a terminal's command, stops as on Ctrl-C.

SIGHUP's default action ended the hub on the spot: its agents saw 1006, a call in flight got
no answer and was never audited, and systemd counts that signal a clean exit (no restart).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

from tests.e2e.procs import (
    SONDE,
    URL_LINE,
    base_env,
    enroll_agent,
    running_hub,
    spawn,
    up_url_and_key,
    wait_until,
)


def online(hub_client: object, name: str) -> bool:
    agents = hub_client.get("/api/v1/agents").json()["agents"]  # type: ignore[attr-defined]
    return any(a["name"] == name and a["status"] == "online" for a in agents)


def test_hub_ignores_sighup_and_keeps_its_agents(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        agent = enroll_agent(hub, tmp_path, "hup-agent")
        agent.start()
        try:
            with hub.client() as client:
                wait_until(lambda: online(client, "hup-agent"))
                hub.proc.popen.send_signal(signal.SIGHUP)
                hub.proc.wait_for(re.compile(r"SIGHUP received: ignored \(the hub has nothing to reload"))
                time.sleep(0.5)  # what the default action did at once
                assert hub.proc.popen.poll() is None
                assert client.get("/api/v1/health").status_code == 200
                assert online(client, "hup-agent")
        finally:
            agent.stop()
        assert hub.proc.stop(signal.SIGTERM) == 0  # SIGTERM still stops it, cleanly
        assert any("sonde hub: shutting down" in line for line in hub.proc.lines)


def test_up_stops_cleanly_on_hangup(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = spawn(
        ["up", "--bind", "127.0.0.1:0", "--data-dir", str(data), "--allow-root"], base_env(tmp_path / "home")
    )
    try:
        up_url_and_key(proc, data)
        proc.popen.send_signal(signal.SIGHUP)
        assert proc.popen.wait(15) == 0
        assert "sonde up: shutting down" in proc.lines
    finally:
        proc.stop()


def test_hub_still_starting_ignores_sighup(tmp_path: Path) -> None:
    # its first line (the open-file limit) comes before its imports and its signal receiver:
    # SIGHUP's default action ended it there, with nothing said
    proc = spawn(
        ["hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")], base_env(tmp_path / "home")
    )
    try:
        proc.wait_for(re.compile(r"open-file limit"))
        proc.popen.send_signal(signal.SIGHUP)
        proc.wait_for(URL_LINE)  # it came up all the same
        assert proc.popen.poll() is None
    finally:
        assert proc.stop(signal.SIGTERM) == 0


def test_a_hub_whose_log_reader_went_away_still_stops_cleanly(tmp_path: Path) -> None:
    """Its stderr a pipe nobody reads any more (a log shipper that died, `| tee` stopped): saying
    "shutting down" raised, and SIGTERM ended the hub at once with 141, nothing drained."""
    popen = subprocess.Popen(
        [*SONDE, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
        env=base_env(tmp_path / "home"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert popen.stderr is not None
        for line in popen.stderr:
            if b"sonde hub listening on" in line:
                break
        else:
            raise AssertionError(f"the hub ended before it listened: {popen.wait()}")
        popen.stderr.close()  # the reader goes
        popen.send_signal(signal.SIGTERM)
        assert popen.wait(timeout=30) == 0
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()
