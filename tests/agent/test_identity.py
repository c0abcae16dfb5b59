"""Machine facts, the code hash, agent names and the register payload."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import sonde
from sonde.agent import identity
from sonde.agent.identity import (
    active_packs,
    attestation,
    code_hash,
    hash_tree,
    read_os_release,
    register_payload,
    sanitize_agent_name,
)
from sonde.packs.base import Pack, Requirements
from sonde.packs.registry import PackRegistry
from sonde.protocol.names import NAME_PATTERN
from tests.agent.probes import TEST_PACK, registry_for_tests

RECORDED = Path(__file__).parent.parent / "packs" / "recorded"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    shutil.copytree(Path(sonde.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_code_hash_is_the_hash_of_the_installed_package_and_stable() -> None:
    assert code_hash() == hash_tree(Path(sonde.__file__).resolve().parent)
    assert code_hash() == code_hash()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", code_hash())


def test_hash_changes_when_a_file_changes(tree: Path) -> None:
    before = hash_tree(tree)
    assert hash_tree(tree) == before
    target = tree / "agent" / "config.py"
    target.write_text(target.read_text() + "\n# tampered\n")
    assert hash_tree(tree) != before


def test_hash_changes_on_rename_and_add_but_ignores_other_files(tree: Path) -> None:
    before = hash_tree(tree)
    (tree / "notes.txt").write_text("not code")
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert hash_tree(tree) == before
    (tree / "runtime.py").rename(tree / "runtime2.py")
    renamed = hash_tree(tree)
    assert renamed != before
    (tree / "extra.py").write_text("")
    assert hash_tree(tree) not in (before, renamed)


def test_os_release_pretty_name(tmp_path: Path) -> None:
    assert read_os_release(RECORDED / "os-release-debian12.txt") == "Debian GNU/Linux 12 (bookworm)"
    assert read_os_release(tmp_path / "missing") == ""


@pytest.mark.parametrize(
    ("hostname", "name"),
    [
        ("web-1", "web-1"),
        ("db.prod.example.com", "db.prod.example.com"),
        ("_weird host!", "weird-host-"),
        ("x" * 100, "x" * 63),
        ("---", "agent"),
        ("", "agent"),
    ],
)
def test_agent_names_are_sanitized(hostname: str, name: str) -> None:
    assert sanitize_agent_name(hostname) == name
    assert re.fullmatch(NAME_PATTERN, sanitize_agent_name(hostname))


def test_default_name_is_the_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity.socket, "gethostname", lambda: "build box")
    assert identity.default_agent_name() == "build-box"


def test_register_payload_carries_facts_packs_and_attestation() -> None:
    registry = registry_for_tests()
    payload = register_payload("web-1", registry)
    assert payload.name == "web-1"
    assert payload.os == "linux"
    assert payload.agent_version == sonde.__version__
    assert payload.boot_time is not None
    assert [p.name for p in payload.packs] == ["system", "testpack"]
    assert "testpack.echo.value" in {probe.name for probe in payload.packs[1].probes}
    assert payload.attestation == attestation(registry)
    assert payload.attestation.packs == {"system": sonde.__version__, "testpack": "0.0.1"}
    assert payload.attestation.code_hash == code_hash()
    assert payload.attestation.os.startswith("linux")


def test_active_packs_by_name_or_by_detection() -> None:
    absent = Pack(
        "absent", "1.0", "needs a command no machine has", Requirements(commands=("no-such-cmd-x",))
    )
    registry = PackRegistry.of([TEST_PACK, absent])
    assert list(active_packs(registry, None).packs) == ["testpack"]
    assert list(active_packs(registry, ["absent", "nope"]).packs) == ["absent"]  # an explicit choice
