"""`sonde packs list` (table and --json), run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sonde.agent.packs_report import aligned, current_group_names, first_line, render_text, report_pack
from sonde.packs.base import Detection, NoParams, Pack, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.registry import load_packs

pytestmark = pytest.mark.e2e

PACKS_LIST = [sys.executable, "-m", "sonde", "packs", "list"]
TIMEOUT_S = 30


def run_packs_list(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PACKS_LIST, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=tmp_path
    )


def test_json_lists_every_installed_pack(tmp_path: Path) -> None:
    done = run_packs_list(tmp_path, "--json")
    assert done.returncode == 0
    document = json.loads(done.stdout)
    assert (document["ok"], document["apiVersion"], document["command"]) == (True, "1.0.0", "packs list")
    registry = load_packs()
    assert [pack["name"] for pack in document["packs"]] == list(registry.packs)
    for entry in document["packs"]:
        pack = registry.packs[entry["name"]]
        assert set(entry) == {
            "name",
            "version",
            "description",
            "detected",
            "reason",
            "groupsNeeded",
            "groupsMissing",
            "groupsRootEquivalent",
            "probes",
        }
        assert entry["version"] == pack.version
        assert entry["detected"] == pack.detection().detected
        assert entry["reason"] == pack.detection().reason
        assert entry["groupsNeeded"] == sorted(pack.groups_needed())
        # docker's group is root in all but name (SECURITY.md): said, so it is granted knowingly
        assert entry["groupsRootEquivalent"] == (["docker"] if "docker" in entry["groupsNeeded"] else [])
        assert [probe["name"] for probe in entry["probes"]] == sorted(pack.probes)


def test_groups_missing_are_those_this_user_lacks_and_none_for_root(tmp_path: Path) -> None:
    document = json.loads(run_packs_list(tmp_path, "--json").stdout)
    groups = current_group_names()
    for entry in document["packs"]:
        if os.geteuid() == 0 or not entry["detected"]:
            expected = []
        else:
            expected = [g for g in entry["groupsNeeded"] if g not in groups]
        assert entry["groupsMissing"] == expected, entry


def test_json_probe_description_is_the_first_line(tmp_path: Path) -> None:
    document = json.loads(run_packs_list(tmp_path, "--json").stdout)
    [system] = [pack for pack in document["packs"] if pack["name"] == "system"]
    memory = {probe["name"]: probe["description"] for probe in system["probes"]}["system.memory.usage"]
    assert memory == first_line(load_packs().packs["system"].probes["system.memory.usage"].description)
    assert "\n" not in memory


def test_table_shows_packs_and_probes(tmp_path: Path) -> None:
    done = run_packs_list(tmp_path)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["PACK", "VERSION", "DETECTED", "GROUPS", "REASON"]
    system_row = next(line for line in lines if line.startswith("system "))
    assert system_row.split()[2] in {"yes", "no"}
    assert any(line.strip().startswith("system.memory.usage ") for line in lines)
    docker = lines.index(next(line for line in lines if line.startswith("docker: ")))
    section = lines[docker + 1 : lines.index("", docker) if "" in lines[docker:] else None]
    warnings = [line for line in section if "root-equivalent" in line]
    assert warnings == [
        "  warning: group docker is root-equivalent: its members can start a privileged container that "
        "mounts / (root on this machine); grant it knowingly"
    ]
    assert not any("root-equivalent" in line for line in lines[:docker])  # no other pack's


def test_table_columns_are_aligned() -> None:
    rows = [("PACK", "VERSION", "REASON"), ("system", "1.0.0", "always available"), ("x", "10.20.30", "r")]
    lines = aligned(rows)
    assert lines == [
        "PACK    VERSION   REASON",
        "system  1.0.0     always available",
        "x       10.20.30  r",
    ]


class Empty(Result):
    pass


def make_pack() -> Pack:
    pack = Pack("demo", "2.0.0", "Demo pack.", requires=Requirements(groups=("adm",)))

    @pack.probe("demo.area.one", "First line.\n    Second line.", requires=Requirements(groups=("docker",)))
    async def one(ctx: ProbeContext, params: NoParams) -> Empty:
        return Empty()

    return pack


def test_report_of_an_undetected_pack() -> None:
    pack = make_pack()
    pack.detect = lambda: Detection(False, "no demo here")
    report = report_pack(pack)
    assert (report.detected, report.reason) == (False, "no demo here")
    assert report.groups_needed == ("adm", "docker")
    assert [(p.name, p.summary) for p in report.probes] == [("demo.area.one", "First line.")]
    text = render_text([report])
    assert text.splitlines()[1].split() == ["demo", "2.0.0", "no", "adm,docker", "no", "demo", "here"]


def test_a_failing_detector_is_reported_not_raised() -> None:
    pack = make_pack()

    def broken() -> Detection:
        raise OSError("cannot look")

    pack.detect = broken
    report = report_pack(pack)
    assert report.detected is False
    assert report.reason == "detection failed: OSError: cannot look"


def test_no_packs() -> None:
    assert "No packs installed" in render_text([])
