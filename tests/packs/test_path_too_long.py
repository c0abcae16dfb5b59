"""A path the file system cannot take (a name too long, a symlink loop, a file for a directory)
is a clean refusal from every probe that takes a path: no traceback in the agent's log.

Before, `system.files.list` and `.directories` on ``/var/log/`` + 4,000 emoji (within the
param's pattern) failed with ``OSError: [Errno 36] File name too long`` and logged it at ERROR
with its traceback, 18 KB a call that any caller could repeat.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.nginx import PACK as NGINX
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM

REGISTRY = PackRegistry.of([SYSTEM, NGINX])
PATH_PROBES = [
    "system.files.list",
    "system.files.directories",
    "system.files.read",
    "system.logs.tail",
    "system.logs.head",
    "nginx.logs.access",
    "nginx.logs.error",
    "nginx.status.summary",
]
NAME_MAX_BYTES = 255


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    (tmp_path / "plain.txt").write_text("a file, no directory\n")
    return tmp_path


def odd_paths(allowed: Path) -> dict[str, str]:
    return {
        "emoji name": f"{allowed}/" + "😀" * 4000,
        "name of 256 bytes": f"{allowed}/" + "a" * (NAME_MAX_BYTES + 1),
        "directory of 256 bytes": f"{allowed}/" + "é" * 128 + "/x.log",
        "symlink loop": f"{allowed}/loop_a",
        "through a symlink loop": f"{allowed}/loop_a/x.log",
        "through a file": f"{allowed}/plain.txt/x.log",
    }


@pytest.mark.parametrize("probe", PATH_PROBES)
async def test_a_path_the_file_system_cannot_take_is_refused_cleanly(
    allowed: Path, probe: str, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(allowed),)))
    for case, path in odd_paths(allowed).items():
        caplog.clear()
        with caplog.at_level(logging.DEBUG), pytest.raises(ProbeExecutionError) as caught:
            await execute_probe(REGISTRY, probe, {"path": path}, ctx)
        assert caught.value.code in ("refused", "invalid_params"), (case, caught.value.message)
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == [], case
        assert len(caught.value.message) < 1000, (case, len(caught.value.message))
        assert ("symlink" in caught.value.message) == ("loop" in case), (case, caught.value.message)


@pytest.mark.parametrize("probe", PATH_PROBES)
async def test_a_relative_path_is_refused_saying_the_path_must_be_absolute(probe: str) -> None:
    """Before: ``path: String should match pattern '^/[^\\x00-\\x1f]{0,4095}$'``, a regex to decode."""
    ctx = ProbeContext(ProbeSettings(allowed_paths=("/var/log",)))
    with pytest.raises(ProbeExecutionError) as refused:
        await execute_probe(REGISTRY, probe, {"path": "var/log/dpkg.log"}, ctx)
    assert refused.value.code == "invalid_params"
    assert "path: must be an absolute path, starting with '/'" in refused.value.message
    assert "pattern" not in refused.value.message
