"""Attestation rules on their own: what is explained, what is held."""

from __future__ import annotations

from sonde.hub.attestation import compare

BASE = {
    "os": "linux Debian 12",
    "kernel": "6.1",
    "agentVersion": "0.1.0",
    "codeHash": "sha256:a",
    "packs": {"system": "0.1.0"},
}


def test_first_connect_sets_the_baseline() -> None:
    assert (
        compare(BASE, {**BASE, "packs": {"system": "0.1.0", "redis": "0.1.0"}}, first_connect=True).verdict
        == "first"
    )
    assert compare(None, BASE, first_connect=False).verdict == "first"


def test_nothing_changed() -> None:
    assert compare(BASE, dict(BASE), first_connect=False).verdict == "same"


def test_a_version_upgrade_explains_code_and_packs() -> None:
    upgraded = {
        **BASE,
        "agentVersion": "0.2.0",
        "codeHash": "sha256:b",
        "packs": {"system": "0.2.0", "x": "1"},
    }
    result = compare(BASE, upgraded, first_connect=False)
    assert result.verdict == "upgraded"
    assert any("codeHash" in change for change in result.changes)


def test_os_kernel_and_pack_version_moves_are_explained() -> None:
    assert compare(BASE, {**BASE, "kernel": "6.2"}, first_connect=False).verdict == "upgraded"
    assert compare(BASE, {**BASE, "packs": {"system": "0.1.1"}}, first_connect=False).verdict == "upgraded"


def test_unexplained_changes_are_held() -> None:
    assert compare(BASE, {**BASE, "codeHash": "sha256:evil"}, first_connect=False).verdict == "unexplained"
    added = {**BASE, "packs": {"system": "0.1.0", "shell": "6.6.6"}}
    assert compare(BASE, added, first_connect=False).verdict == "unexplained"
    removed = {**BASE, "packs": {}}
    assert compare(BASE, removed, first_connect=False).verdict == "unexplained"
