"""One hub per data directory: a second `sonde hub` or `sonde up` on it refuses at start, naming
the first; the admin commands work beside it; the lock dies with its holder. And a data
directory others may enter is reported, never changed."""

from __future__ import annotations

import re
import signal
import stat
from pathlib import Path

from sonde.hub.data_dir import LOCK_FILE
from tests.e2e.procs import SONDE, URL_LINE, RunningHub, base_env, running_hub, spawn
from tests.subprocs import run_any

MODE_WARNING = "has mode 755; it holds the hub's database and signing key, run `chmod 700"


def second_start(hub: RunningHub, *command: str) -> tuple[int, str]:
    done = run_any([*SONDE, *command, "--data-dir", str(hub.data_dir)], env=hub.env, timeout=30)
    return done.returncode, done.stderr


def test_a_second_hub_on_the_data_dir_refuses_naming_the_first(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        code, stderr = second_start(hub, "hub", "--bind", "127.0.0.1:0")
        assert code == 1, stderr
        assert (
            f"another hub (PID {hub.proc.popen.pid}) is serving the data directory {hub.data_dir}" in stderr
        )
        assert "Stop that hub first, or give this one another --data-dir" in stderr
        assert "listening on" not in stderr  # refused before it bound anything
        assert "Traceback" not in stderr

        code, stderr = second_start(hub, "up", "--bind", "127.0.0.1:0", "--allow-root")
        assert code == 1, stderr
        assert f"another hub (PID {hub.proc.popen.pid})" in stderr
        assert not (hub.data_dir / "quickstart.json").exists()  # it wrote no key of its own there

        listed = hub.cli("hub", "key", "list")  # the admin commands run beside a hub by design
        assert listed.returncode == 0, listed.stderr
        with hub.client() as http:  # the first hub serves on, untouched
            assert http.get("/api/v1/agents").status_code == 200
        assert (hub.data_dir / LOCK_FILE).read_text().strip() == str(hub.proc.popen.pid)


def test_the_lock_goes_with_its_holder_however_it_ends(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        hub.proc.stop(signal.SIGKILL)  # no cleanup ran: the system let the lock go
        again = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir)], hub.env)
        try:
            again.wait_for(URL_LINE)
            assert (hub.data_dir / LOCK_FILE).read_text().strip() == str(again.popen.pid)
        finally:
            assert again.stop() == 0


def test_a_data_dir_open_to_others_is_reported_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    data_dir.mkdir()
    data_dir.chmod(0o755)  # as `mkdir` leaves it under the usual umask
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], base_env(tmp_path))
    try:
        warning = proc.wait_for(re.compile(re.escape(MODE_WARNING)))
        assert f"WARNING sonde.hub.data_dir: data directory {data_dir} " in warning.string
        assert warning.string.endswith(f"run `chmod 700 {data_dir}`")
        proc.wait_for(URL_LINE)
    finally:
        assert proc.stop() == 0
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o755  # the operator's directory, the operator's mode


def test_a_data_dir_the_hub_makes_is_private_and_not_reported(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        assert stat.S_IMODE(hub.data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((hub.data_dir / LOCK_FILE).stat().st_mode) == 0o600
        assert not any("chmod 700" in line for line in hub.proc.lines)
