"""The agent caps glibc's malloc arenas, unless the operator set MALLOC_ARENA_MAX."""

from __future__ import annotations

import platform

import pytest

from sonde.agent.arenas import cap_malloc_arenas


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")
def test_the_arenas_are_capped_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert cap_malloc_arenas()


def test_an_operators_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert not cap_malloc_arenas()
