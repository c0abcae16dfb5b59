"""Rules every pack of issue 6 keeps: names, descriptions, bounded params, runbooks, entry points."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sonde.packs.base import Pack
from sonde.packs.registry import load_packs
from sonde.packs.runbook import Runbook

PACK_NAMES = ("system", "systemd", "docker", "nginx", "postgres", "mysql", "redis")
REGISTRY = load_packs()
PACKS = [REGISTRY.packs[name] for name in PACK_NAMES]
SPECS = [spec for pack in PACKS for spec in pack.probes.values()]
GROUPS = {"systemd": {"systemd-journal"}, "docker": {"docker"}, "nginx": {"adm"}, "system": {"adm"}}


def test_every_pack_is_installed_by_entry_point() -> None:
    assert set(PACK_NAMES) <= set(REGISTRY.packs)


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_pack_has_a_runbook_of_its_own_category(pack: Pack) -> None:
    assert pack.name in pack.runbooks
    runbook: Runbook = pack.runbooks[pack.name]
    assert set(runbook.probes) <= set(pack.probes)
    for step in runbook.steps:
        pack.probes[step.probe].params.model_validate(dict(step.params))  # the step's params are valid


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_pack_declares_the_groups_it_needs(pack: Pack) -> None:
    assert pack.groups_needed() == GROUPS.get(pack.name, set())


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_detection_answers_with_a_reason(pack: Pack) -> None:
    detection = pack.detection()
    assert detection.reason
    assert "failed" not in detection.reason


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_probe_is_named_and_described_for_a_model(spec: Any) -> None:
    assert re.fullmatch(r"[a-z]+\.[a-z_]+\.[a-z_]+", spec.name) or spec.name == "system.info"
    assert len(spec.description) >= 80
    assert spec.timeout_s <= 60


def _properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, field in schema.get("properties", {}).items():
        options = field.get("anyOf", [field])
        found += [(name, option) for option in options if option.get("type") != "null"]
    return found


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_param_is_bounded(spec: Any) -> None:
    schema = spec.params_schema()
    assert schema["additionalProperties"] is False
    definitions = schema.get("$defs", {})
    for name, field in _properties(schema):
        if "$ref" in field:
            field = definitions[field["$ref"].rsplit("/", 1)[-1]]
        kind = field.get("type")
        if kind in ("integer", "number"):
            assert "minimum" in field, (spec.name, name)
            assert "maximum" in field, (spec.name, name)
        elif kind == "string":
            assert "pattern" in field or "enum" in field or "const" in field, (spec.name, name)
        else:
            assert kind == "boolean" or "enum" in field, (spec.name, name, field)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_no_probe_takes_a_password(spec: Any) -> None:
    assert not {"password", "secret", "token"} & set(spec.params_schema()["properties"])


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("system.network.ping", {"host": "-f"}),
        ("system.network.ping", {"host": "127.0.0.1; reboot"}),
        ("system.network.ping", {"host": "127.0.0.1", "count": 11}),
        ("system.network.traceroute", {"host": "--help"}),
        ("system.files.read", {"path": "relative/path"}),
        ("system.files.read", {"path": "/etc/passwd", "max_bytes": 2 * 1024 * 1024}),
        ("system.logs.tail", {"path": "/var/log/syslog", "lines": 0}),
        ("systemd.unit.status", {"unit": "-H evil"}),
        ("systemd.journal.query", {"since": "$(reboot)"}),
        ("systemd.journal.query", {"grep": "a\nb"}),
        ("docker.container.logs", {"container": "../../info"}),
        ("postgres.queries.long_running", {"min_duration_s": -1}),
        ("postgres.queries.long_running", {"min_duration_s": "60; DROP TABLE x"}),
        ("postgres.connections.usage", {"password": "x"}),
        ("postgres.connections.usage", {"database": "x'; --"}),
        ("mysql.processes.list", {"min_time_s": 100_000}),
        ("redis.server.info", {"port": 0}),
        ("redis.server.info", {"host": "-h"}),
    ],
)
def test_hostile_params_are_refused(name: str, params: dict[str, Any]) -> None:
    from pydantic import ValidationError

    spec = REGISTRY.probe(name)
    assert spec is not None
    with pytest.raises(ValidationError):
        spec.params.model_validate(params)
