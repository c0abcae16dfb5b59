"""What `sonde enroll` says to do next, an agent running on the machine or not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sonde.agent.identity_lock import hold_identity, next_step

HUB_A, HUB_B = "http://127.0.0.1:38811", "http://127.0.0.1:38812"


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SONDE_HOME", str(tmp_path))
    return tmp_path / "config.json"


def test_with_no_agent_running_it_says_to_start_one(config_file: Path) -> None:
    assert next_step(("m2", HUB_A), ("m2", HUB_A)).startswith("start the agent with `sonde start`")


def test_a_running_agent_goes_on_only_under_the_same_name_at_the_same_hub(config_file: Path) -> None:
    with hold_identity(config_file):  # as `sonde start` holds it
        pid = os.getpid()
        same = next_step(("m2", HUB_A), ("m2", f"{HUB_A}/"))
        assert same == f"the agent running on this machine (PID {pid}) goes on with the new identity"
        # another hub never ends the old identity: the agent would stay with hub A (a review found
        # it told to go on)
        other_hub = next_step(("m2", HUB_B), ("m2", HUB_A))
        assert other_hub.startswith(
            f"the agent running on this machine (PID {pid}) still runs as m2 with {HUB_A}"
        )
        assert f"restart it to run as m2 with {HUB_B}" in other_hub
        assert "restart it" in next_step(("m3", HUB_A), ("m2", HUB_A))
