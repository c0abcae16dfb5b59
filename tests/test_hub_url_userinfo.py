"""A hub URL with a user name or password in it is refused as malformed (exit 2), without saying
the URL back: httpx sent it as Basic auth in place of the API key (the hub answered 401), enroll
looked up "user:pw@host" as a host name, and every message repeated the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonde.hub_url import normalize_hub_url
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any

URL = "http://someone:hunter2secret@127.0.0.1:9"
KEY = "sonde_" + "k" * 43


@pytest.mark.parametrize(
    "command",
    [
        ["enroll", "--hub", URL, "--name", "web-1"],
        ["login", "--hub", URL],
        ["mcp-bridge", "--hub", URL],
    ],
    ids=["enroll", "login", "mcp-bridge"],
)
def test_a_hub_url_with_a_password_is_refused_unsaid(tmp_path: Path, command: list[str]) -> None:
    env = {**base_env(tmp_path / "home"), "SONDE_API_KEY": KEY, "SONDE_ENROLL_TOKEN": "enr_" + "t" * 32}
    done = run_any([*SONDE, *command], env=env, input="", timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "must not hold a user name or password" in done.stderr
    assert "hunter2secret" not in done.stderr + done.stdout
    assert not (tmp_path / "home" / ".sonde" / "config.json").exists()


@pytest.mark.parametrize("url", [URL, "https://someone@hub.example", "http://:pw@hub.example:3000/mcp"])
def test_every_client_refuses_the_userinfo(url: str) -> None:
    with pytest.raises(ValueError, match="must not hold a user name or password") as refused:
        normalize_hub_url(url)
    assert url not in str(refused.value)
