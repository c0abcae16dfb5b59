"""query_logs maps each source to a real probe with parameters that probe accepts."""

from __future__ import annotations

import pytest

from sonde.hub.errors import HubError
from sonde.hub.tools.logs import QueryLogsInput, journal_since, log_probe
from sonde.packs.registry import load_packs

CASES = [
    {
        "source": "systemd",
        "agent": "a",
        "unit": "nginx.service",
        "priority": "err",
        "since": "15m",
        "grep": "x",
    },
    {"source": "systemd", "agent": "a", "since": "2026-11-22T02:00:00Z", "lines": 5},
    {"source": "docker", "agent": "a", "container": "web", "lines": 50},
    {"source": "nginx", "agent": "a", "kind": "access", "path": "/var/log/nginx/access.log"},
    {"source": "nginx", "agent": "a"},
    {"source": "system", "agent": "a", "path": "/var/log/syslog", "grep": "error"},
]


@pytest.mark.parametrize("arguments", CASES)
def test_each_source_builds_params_its_probe_accepts(arguments: dict[str, object]) -> None:
    probe, params = log_probe(QueryLogsInput.model_validate(arguments))
    spec = load_packs().probe(probe)
    assert spec is not None, probe
    spec.params.model_validate({k: v for k, v in params.items() if v is not None})


def test_missing_targets_say_what_is_needed() -> None:
    with pytest.raises(HubError, match="needs a container"):
        log_probe(QueryLogsInput(source="docker", agent="a"))
    with pytest.raises(HubError, match="needs a path"):
        log_probe(QueryLogsInput(source="system", agent="a"))


def test_journal_since_forms() -> None:
    assert journal_since("15m") == "-15m"
    assert journal_since("2026-11-22T02:00:00Z") == "2026-11-22 02:00:00"
