"""`sonde hub`, `sonde up`, `sonde start` and `sonde mcp-bridge` refuse what they cannot use with one
message naming it (the file, the host, the flag) and a non-zero exit, never a traceback."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from sonde.agent.config import AgentConfig, save_config
from sonde.protocol.signing import new_private_key, private_key_to_text, public_key_to_text
from tests.e2e.mcpclient import initialize_request
from tests.e2e.procs import SONDE, URL_LINE, base_env, first_admin_key, spawn, up_url_and_key, wait_until
from tests.subprocs import run_any, without_file_overrides

LEVEL_REFUSED = "is not a log level: use DEBUG, INFO, WARNING or ERROR"


def sonde(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_any([*SONDE, *args], env={**base_env(tmp_path / "home"), **(env or {})}, timeout=60)


def sonde_without_file_overrides(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_any(without_file_overrides([*SONDE, *args]), env=base_env(tmp_path / "home"), timeout=60)


def assert_one_clear_message(done: subprocess.CompletedProcess[str], code: int, *says: str) -> None:
    assert done.returncode == code, done.stderr
    for text in says:
        assert text in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "listening" not in done.stderr


@contextmanager
def mode(path: Path, bits: int) -> Iterator[Path]:
    """``path`` with mode ``bits`` for the block (given back 0700 after, so pytest can clean up)."""
    path.chmod(bits)
    try:
        yield path
    finally:
        path.chmod(0o700)


# --- the data directory and its database --------------------------------------------------


@pytest.mark.parametrize("command", [["hub"], ["up", "--allow-root"]], ids=["hub", "up"])
def test_a_data_directory_that_cannot_be_made_is_named_not_taken_for_a_port(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "closed").mkdir()
    data_dir = tmp_path / "closed" / "data"
    with mode(tmp_path / "closed", 0o500):
        done = sonde_without_file_overrides(
            tmp_path, *command, "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)
        )
    assert_one_clear_message(
        done,
        1,
        f"cannot use the hub's database {data_dir / 'sonde.db'} (permission denied: {data_dir})",
        f"create, read and write the data directory {data_dir}",
    )
    assert "cannot listen" not in done.stderr
    assert not data_dir.exists()


@pytest.mark.parametrize("command", [["hub"], ["up", "--allow-root"]], ids=["hub", "up"])
def test_a_data_directory_closed_to_this_user_is_named_not_taken_for_a_port(
    tmp_path: Path, command: list[str]
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with mode(data_dir, 0o000):
        done = sonde_without_file_overrides(
            tmp_path, *command, "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)
        )
    assert_one_clear_message(
        done, 1, f"cannot use the hub's database {data_dir / 'sonde.db'} (permission denied"
    )
    assert "cannot listen" not in done.stderr


def test_an_unreadable_database_is_named(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "sonde.db").touch()
    with mode(data_dir / "sonde.db", 0o000):
        done = sonde_without_file_overrides(
            tmp_path, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)
        )
    assert_one_clear_message(
        done, 1, f"cannot use the hub's database {data_dir / 'sonde.db'} (unable to open database file)"
    )


def test_a_database_that_is_not_sqlite_is_named_and_left_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    garbage = bytes(range(256)) * 16
    (data_dir / "sonde.db").write_bytes(garbage)
    done = sonde(tmp_path, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir))
    assert_one_clear_message(
        done, 1, f"the hub's database {data_dir / 'sonde.db'} is not a SQLite database, or it is damaged"
    )
    assert (data_dir / "sonde.db").read_bytes() == garbage


@pytest.mark.parametrize("user_version", [0, 1, 99], ids=["unversioned", "a version of ours", "past ours"])
def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path: Path, user_version: int) -> None:
    """Its own user_version (many programs set one) does not make it ours, nor a newer Sonde's."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with sqlite3.connect(data_dir / "sonde.db") as foreign:
        foreign.execute("CREATE TABLE agents (x)")  # a name the hub's schema has too
        foreign.execute("CREATE TABLE recipes (name TEXT)")
        foreign.execute(f"PRAGMA user_version={user_version}")
    foreign.close()
    done = sonde(tmp_path, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir))
    assert_one_clear_message(
        done, 1, f"{data_dir / 'sonde.db'} is not a hub database: it holds another program's tables"
    )
    assert "nothing was changed" in done.stderr
    with sqlite3.connect(data_dir / "sonde.db") as kept:
        assert kept.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # not switched to WAL
        assert kept.execute("PRAGMA user_version").fetchone() == (user_version,)
        assert kept.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall() == [
            ("agents",),
            ("recipes",),
        ]
    kept.close()


def test_an_empty_database_file_still_becomes_the_hubs(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "sonde.db").touch()
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)], base_env(tmp_path / "home"))
    try:
        proc.wait_for(URL_LINE, timeout=30)
    finally:
        assert proc.stop() == 0
    assert (data_dir / "sonde.db").stat().st_size > 0


# --- the address ------------------------------------------------------------------------


def test_a_bind_host_that_does_not_resolve_is_named(tmp_path: Path) -> None:
    done = sonde(tmp_path, "hub", "--bind", "no-such-host.invalid:0", "--data-dir", str(tmp_path / "data"))
    assert_one_clear_message(
        done,
        1,
        "cannot listen on no-such-host.invalid:0: the host name 'no-such-host.invalid' does not resolve here",
        "give --bind an address of this machine",
    )


# --- --log-level ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        (["hub", "--log-level", "BOGUS"], {}, "'BOGUS'"),
        (["hub"], {"SONDE_LOG_LEVEL": "loud"}, "'loud'"),
        (["up", "--log-level", "verbose", "--allow-root"], {}, "'verbose'"),
    ],
)
def test_a_bad_log_level_is_refused_with_the_choices(
    tmp_path: Path, args: list[str], env: dict[str, str], shown: str
) -> None:
    data_dir = tmp_path / "data"
    done = sonde(tmp_path, *args, "--bind", "127.0.0.1:0", "--data-dir", str(data_dir), env=env)
    assert_one_clear_message(done, 2, f"--log-level (or SONDE_LOG_LEVEL) {shown} {LEVEL_REFUSED}")
    assert not data_dir.exists()


def test_the_bridge_refuses_a_bad_log_level(tmp_path: Path) -> None:
    hub = {"SONDE_HUB_URL": "http://127.0.0.1:1", "SONDE_API_KEY": "sonde_x"}  # never reached
    done = sonde(tmp_path, "mcp-bridge", "--log-level", "BOGUS", env=hub)
    assert_one_clear_message(
        done, 2, f"sonde mcp-bridge: --log-level (or SONDE_LOG_LEVEL) 'BOGUS' {LEVEL_REFUSED}"
    )


def test_a_good_log_level_in_any_case_is_taken(tmp_path: Path) -> None:
    proc = spawn(
        ["hub", "--log-level", "debug", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
        base_env(tmp_path / "home"),
    )
    try:
        proc.wait_for(URL_LINE, timeout=30)
    finally:
        assert proc.stop() == 0


@pytest.mark.parametrize("how", ["flag", "env"])
def test_sonde_start_refuses_a_bad_log_level(tmp_path: Path, how: str) -> None:
    agent_key, hub_key = new_private_key(), new_private_key()
    save_config(
        AgentConfig(
            hub_url="http://127.0.0.1:1",  # never reached: the flag is refused first
            agent_id="agent-1",
            name="web-1",
            private_key=private_key_to_text(agent_key),
            hub_public_key=public_key_to_text(hub_key.public_key()),
        ),
        tmp_path / "home" / ".sonde" / "config.json",
    )
    if how == "flag":
        done = sonde(tmp_path, "start", "--allow-root", "--log-level", "BOGUS")
    else:
        done = sonde(tmp_path, "start", "--allow-root", env={"SONDE_LOG_LEVEL": "BOGUS"})
    assert_one_clear_message(
        done, 2, f"sonde start: --log-level (or SONDE_LOG_LEVEL) 'BOGUS' {LEVEL_REFUSED}"
    )


# --- SONDE_ALLOWED_HOSTS ------------------------------------------------------------------


def host_answer(url: str, key: str, host: str) -> int:
    """The status of an MCP initialize sent with ``Host: host``."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Host": host,
    }
    answer = httpx.post(
        f"{url}/mcp", json=initialize_request("2025-06-18", request_id=1), headers=headers, timeout=10
    )
    return answer.status_code


@pytest.mark.parametrize("hosts", ["a.example,b.example", "a.example, b.example", "a.example b.example"])
def test_allowed_hosts_may_be_separated_by_commas_or_spaces(tmp_path: Path, hosts: str) -> None:
    env = {**base_env(tmp_path / "home"), "SONDE_ALLOWED_HOSTS": hosts}
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")], env)
    try:
        key = first_admin_key(proc, tmp_path / "data")
        url = proc.wait_for(URL_LINE, timeout=30).group(1)
        assert host_answer(url, key, "a.example") == 200
        assert host_answer(url, key, "b.example") == 200
        assert host_answer(url, key, "c.example") == 421
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("https://hub.example.com/mcp", ": give 'hub.example.com'"),  # a URL pasted: it never matched a Host
        ("hub.example.com:8443/", ""),
        ("host!", ""),
        ("::1", ": give '[::1]'"),  # a Host header brackets an IPv6 address
    ],
)
def test_an_allowed_host_that_no_host_header_names_is_refused(tmp_path: Path, given: str, says: str) -> None:
    data_dir = tmp_path / "data"
    done = sonde(
        tmp_path, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir), "--allowed-host", given
    )
    assert_one_clear_message(
        done,
        2,
        f"sonde hub: --allowed-host {given!r} is no host as a client's Host header names it (a name or address, "
        f"with :PORT or :* or without, e.g. hub.example.com or [::1]:3000){says}",
    )
    assert not data_dir.exists()


# --- the local agent of `sonde up` ------------------------------------------------------


def test_the_local_agent_removed_from_its_hub_is_told_to_restart_sonde_up(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = base_env(tmp_path / "home")
    args = ["up", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir), "--allow-root"]
    proc = spawn(args, env)
    try:
        url, key = up_url_and_key(proc, data_dir)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:
            (agent,) = http.get("/api/v1/agents").json()["agents"]
            assert http.delete(f"/api/v1/agents/{agent['id']}").status_code == 200
        proc.wait_for(re.compile(r"unknown to / was revoked by the hub .*restart `sonde up`"), timeout=30)
        assert "sonde enroll" not in proc.output
    finally:
        assert proc.stop() == 0
    # and what it says is what works: the next run enrolls the local agent again
    proc = spawn(args, env)
    try:
        url, key = up_url_and_key(proc, data_dir)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:

            def back_online() -> bool:
                agents = http.get("/api/v1/agents").json()["agents"]
                return [(a["name"], a["status"]) for a in agents] == [(agent["name"], "online")]

            wait_until(back_online)
    finally:
        assert proc.stop() == 0


@pytest.mark.parametrize("command", [["hub"], ["up", "--allow-root"]])
def test_a_data_dir_that_is_a_file_is_said_to_be_one(tmp_path: Path, command: list[str]) -> None:
    """It named `FILE/hub.lock`, with advice on permissions (an operator-day review)."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    done = sonde(tmp_path, *command, "--bind", "127.0.0.1:0", "--data-dir", str(afile))
    assert done.returncode == 1, done.stderr
    assert f"the data directory {afile} is a file, not a directory" in done.stderr, done.stderr
    assert "hub.lock" not in done.stderr
    assert afile.read_text() == "x"
