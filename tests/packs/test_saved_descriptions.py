"""A pack's saved description says exactly what its probe modules say, and the register uses it."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from sonde.packs.describe import built_in_described, saved_text, stale
from sonde.packs.registry import load_packs
from tests.subprocs import run_ok

REPO = Path(__file__).resolve().parents[2]
BUILT_IN = ("system", "systemd", "docker", "nginx", "postgres", "mysql", "redis")


def test_every_built_in_pack_keeps_a_description() -> None:
    assert sorted(p.name for p in built_in_described(load_packs().packs.values())) == sorted(BUILT_IN)


def test_the_saved_descriptions_match_the_modules() -> None:
    """Fails after a probe's name, description, parameters or timeout changed: run the command it names."""
    run_ok([sys.executable, "-m", "sonde.packs.describe", "--check"], cwd=REPO)


def test_the_register_comes_from_the_saved_description_without_importing_probes() -> None:
    code = (
        "import json, sys\n"
        "from sonde.packs.registry import load_packs\n"
        "packs = load_packs()\n"
        "described = [p.descriptor().model_dump(mode='json') for p in packs.packs.values()]\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('sonde.packs.') and m.count('.') == 3)\n"
        "print(json.dumps({'loaded': loaded, 'probes': sum(len(d['probes']) for d in described)}))\n"
    )
    report = json.loads(run_ok([sys.executable, "-c", code], cwd=REPO).stdout)
    assert report["probes"] > 30
    probe_modules = [m for m in report["loaded"] if m.split(".")[2] in BUILT_IN]
    assert probe_modules == [], "describing the built-in packs imported their probe modules"


def test_a_missing_or_broken_description_falls_back_to_the_modules(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = load_packs().packs["redis"]
    expected = json.loads(saved_text(pack))
    broken = tmp_path / "descriptor.json"
    broken.write_text("{not json")
    for path in (tmp_path / "missing.json", broken):
        monkeypatch.setattr(pack, "described_by", path)
        monkeypatch.setattr(pack, "_loaded", False)  # as in an agent that has run none of its probes
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            described = pack.descriptor().model_dump(mode="json")
        assert described["probes"] == expected["probes"]
        assert "loading its probes" in caplog.text


def test_check_names_a_stale_description(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = load_packs().packs["redis"]
    outdated = tmp_path / "descriptor.json"
    outdated.write_text(saved_text(pack).replace("redis.server.info", "redis.server.renamed"))
    monkeypatch.setattr(pack, "described_by", outdated)
    assert stale([pack]) == [outdated]
    outdated.write_text(saved_text(pack))
    assert stale([pack]) == []
