"""The real `sonde login` when the hub does not say whether it accepts the key: rate-limited
(429, after a few mistyped keys, just when one is mistyped again) or failing (a 5xx). Nothing is
saved (exit 1): the hub's 429 words say when to try again, a 5xx says that `--no-check` saves
without checking. Before, both printed "could not check the key" and saved the key (exit 0)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.bridge.test_login_not_a_hub import PAGE, web_server
from tests.e2e.procs import SONDE, base_env, running_hub
from tests.subprocs import run_any

pytestmark = pytest.mark.timeout(90)


def login(home: Path, hub_url: str, key: str) -> subprocess.CompletedProcess[str]:
    return run_any([*SONDE, "login", "--hub", hub_url, "--api-key", key], env=base_env(home), timeout=60)


def nothing_saved(done: subprocess.CompletedProcess[str], home: Path) -> None:
    assert done.returncode == 1, done.stderr
    assert "nothing saved" in done.stderr
    assert "saved the hub URL" not in done.stderr
    assert not (home / ".sonde").exists()


def test_a_rate_limited_check_saves_nothing_and_says_when_to_try_again(tmp_path: Path) -> None:
    with running_hub(tmp_path / "hub") as hub:
        with httpx.Client(base_url=hub.url, timeout=10) as http:
            answers = [
                http.get("/api/v1/agents", headers={"Authorization": f"Bearer sonde_typo{n}"}).status_code
                for n in range(40)
            ]
        assert answers[-1] == 429
        done = login(tmp_path / "home", hub.url, "sonde_typo_again")
        nothing_saved(done, tmp_path / "home")
        assert "too many failed authentications from this address; try again in" in done.stderr
        assert "could not check the key" not in done.stderr
        good = login(tmp_path / "home", hub.url, hub.admin_key)  # a valid key is never held back
        assert good.returncode == 0, good.stderr


@pytest.mark.parametrize(
    ("content_type", "body", "status", "said"),
    [
        (
            "application/json",
            b'{"error": {"code": "busy", "message": "the hub is busy"}}',
            503,
            "the hub is busy",
        ),
        ("text/html", PAGE, 502, "an HTML page titled 'Welcome to nginx!'"),
    ],
)
def test_a_failing_hub_saves_nothing_and_names_no_check(
    tmp_path: Path, content_type: str, body: bytes, status: int, said: str
) -> None:
    with web_server(content_type, body, status) as url:
        done = login(tmp_path, url, "sonde_abc")
    nothing_saved(done, tmp_path)
    assert f"answered {status}" in done.stderr
    assert said in done.stderr
    assert "<html" not in done.stderr.lower()
    assert "`sonde login --no-check` saves" in done.stderr
    checked_off = run_any(
        [*SONDE, "login", "--hub", "http://127.0.0.1:9", "--api-key", "sonde_abc", "--no-check"],
        env=base_env(tmp_path),
        timeout=60,
    )
    assert checked_off.returncode == 0, checked_off.stderr
    assert json.loads((tmp_path / ".sonde" / "config.json").read_text())["apiKey"] == "sonde_abc"
