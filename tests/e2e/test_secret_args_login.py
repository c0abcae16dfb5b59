"""`sonde login` takes its API key from the environment or stdin, and `sonde mcp-bridge --api-key`
warns that a command line is readable by every local user (an admin key there was read and reused).

The real CLI against a real hub, as `tests/e2e/test_secret_args.py` does for `sonde enroll`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.procs import SONDE, RunningHub, base_env, running_hub
from tests.e2e.test_secret_args import piped_in, typed_at_the_prompt
from tests.subprocs import run_any

ARGV_WARNING = "warning: --api-key put the API key on the command line, where every local user could read it"
BRIDGE_WARNING = "warning: --api-key puts the API key on the command line, where every local user can read it"
PROMPT = "API key (input hidden): "
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    with running_hub(tmp_path_factory.mktemp("secret-login")) as running:
        yield running


def saved_key(home: Path) -> str | None:
    path = home / ".sonde" / "config.json"
    return json.loads(path.read_text()).get("apiKey") if path.exists() else None


def test_the_key_on_stdin_is_saved_and_is_in_no_command_line(hub: RunningHub, tmp_path: Path) -> None:
    done = piped_in([*SONDE, "login", "--hub", hub.url], tmp_path, hub.admin_key)
    assert done.returncode == 0, done.stderr
    assert "the hub accepted the key" in done.stderr
    assert "warning" not in done.stderr
    assert hub.admin_key not in done.stdout + done.stderr
    assert saved_key(tmp_path) == hub.admin_key


def test_the_key_in_sonde_api_key_is_saved_without_reading_stdin(hub: RunningHub, tmp_path: Path) -> None:
    env = {**base_env(tmp_path), "SONDE_API_KEY": hub.admin_key}
    reading, writing = os.pipe()  # stdin never written nor closed: login must not wait for it
    try:
        done = run_any([*SONDE, "login", "--hub", hub.url], env=env, timeout=60, stdin=reading)
    finally:
        os.close(reading)
        os.close(writing)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert saved_key(tmp_path) == hub.admin_key


def test_the_key_as_a_flag_is_still_saved_with_a_warning(hub: RunningHub, tmp_path: Path) -> None:
    done = run_any([*SONDE, "login", "--hub", hub.url, "--api-key", hub.admin_key], env=base_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"sonde login: {ARGV_WARNING}" in done.stderr
    assert "SONDE_API_KEY" in done.stderr
    assert hub.admin_key not in done.stderr
    assert saved_key(tmp_path) == hub.admin_key


@pytest.mark.parametrize("given", ["", "\n", "  \n"], ids=["eof", "empty-line", "blank-line"])
def test_no_key_on_stdin_is_a_usage_error_and_nothing_is_saved(
    hub: RunningHub, tmp_path: Path, given: str
) -> None:
    done = run_any([*SONDE, "login", "--hub", hub.url], env=base_env(tmp_path), timeout=60, input=given)
    assert done.returncode == 2, done.stderr
    assert "sonde login: no API key given" in done.stderr
    assert "SONDE_API_KEY" in done.stderr
    assert saved_key(tmp_path) is None


def test_on_a_terminal_the_key_is_asked_for_and_not_echoed(hub: RunningHub, tmp_path: Path) -> None:
    seen = typed_at_the_prompt(["login", "--hub", hub.url], tmp_path, PROMPT, hub.admin_key)
    assert hub.admin_key not in seen
    assert saved_key(tmp_path) == hub.admin_key


def test_the_bridge_warns_of_a_key_flag_on_stderr_only(hub: RunningHub, tmp_path: Path) -> None:
    line = json.dumps(INITIALIZE) + "\n"
    flagged = run_any(
        [*SONDE, "mcp-bridge", "--hub", hub.url, "--api-key", hub.admin_key],
        env=base_env(tmp_path),
        input=line,
        timeout=60,
    )
    assert flagged.returncode == 0, flagged.stderr
    assert f"sonde mcp-bridge: {BRIDGE_WARNING}" in flagged.stderr
    assert "`sonde login --hub URL` once" in flagged.stderr
    assert "SONDE_API_KEY in the MCP client's env config" in flagged.stderr
    assert hub.admin_key not in flagged.stderr
    answers = [json.loads(text) for text in flagged.stdout.splitlines()]  # stdout: JSON-RPC only
    assert [answer["id"] for answer in answers] == [1]
    assert "serverInfo" in answers[0]["result"]
    from_env = run_any(
        [*SONDE, "mcp-bridge", "--hub", hub.url],
        env={**base_env(tmp_path), "SONDE_API_KEY": hub.admin_key},
        input=line,
        timeout=60,
    )
    assert from_env.returncode == 0, from_env.stderr
    assert "warning" not in from_env.stderr
