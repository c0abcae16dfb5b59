"""The real `sonde login` against a real hub: a URL under which no hub answers (404) is said to be
no hub's base URL, as `sonde enroll` says it, and nothing is saved (exit 1); the hub's own URL, or
its MCP URL, saves the key; a hub that cannot be reached is only warned of (the key is saved)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.procs import SONDE, RunningHub, base_env, running_hub
from tests.ports import free_port
from tests.subprocs import run_any


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    with running_hub(tmp_path_factory.mktemp("login")) as running:
        yield running


def login(home: Path, hub_url: str, key: str) -> subprocess.CompletedProcess[str]:
    return run_any([*SONDE, "login", "--hub", hub_url, "--api-key", key], env=base_env(home), timeout=60)


@pytest.mark.parametrize("path", ["/foo", "/foo/mcp", "/api"])
def test_a_url_under_which_no_hub_answers_is_refused_and_nothing_saved(
    hub: RunningHub, tmp_path: Path, path: str
) -> None:
    done = login(tmp_path, hub.url + path, hub.admin_key)
    base = hub.url + path.removesuffix("/mcp")
    assert done.returncode == 1, done.stderr
    assert (
        f"{base} is not a Sonde hub's base URL: GET {base}/api/v1/agents answered 404 Not Found"
        in done.stderr
    )
    assert "Give the URL `sonde hub` prints as 'listening on'" in done.stderr
    assert "nothing saved" in done.stderr
    assert "saved the hub URL" not in done.stderr
    assert not (tmp_path / ".sonde").exists()


@pytest.mark.parametrize("suffix", ["", "/", "/mcp"])
def test_the_hubs_url_saves_the_key(hub: RunningHub, tmp_path: Path, suffix: str) -> None:
    done = login(tmp_path, hub.url + suffix, hub.admin_key)
    assert done.returncode == 0, done.stderr
    assert "the hub accepted the key" in done.stderr
    saved = json.loads((tmp_path / ".sonde" / "config.json").read_text())
    assert saved == {"hubUrl": hub.url, "apiKey": hub.admin_key}


def test_an_unreachable_hub_is_only_warned_of(tmp_path: Path) -> None:
    port = free_port()  # closed again: nothing listens there
    done = login(tmp_path, f"http://127.0.0.1:{port}", "sonde_abc")
    assert done.returncode == 0, done.stderr
    assert "could not reach" in done.stderr
    assert "saving it anyway" in done.stderr
    assert json.loads((tmp_path / ".sonde" / "config.json").read_text())["apiKey"] == "sonde_abc"


@pytest.mark.parametrize(("hub_url", "key"), [("hub.example:3000", "sonde_x"), ("http://h:1", "a b")])
def test_a_malformed_url_or_key_is_a_usage_error(tmp_path: Path, hub_url: str, key: str) -> None:
    done = login(tmp_path, hub_url, key)
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / ".sonde").exists()
