"""A log with a run of NUL bytes (what logrotate's copytruncate leaves) is read as text.

`system.logs.head` sent a log's leading run of NULs as its first "line" (4,096 of them, then
"[line cut: …]"), `system.files.read` refused the same file as binary, and a log with its text
first and a hole after was refused by `logs.head` while `logs.tail` found no line in it. The
NULs are now no text (a run of them no line) for all three, and the answers count them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK

REGISTRY = PackRegistry.of([PACK])
HOLE_BYTES = 100 * 1024  # more than a block the readers take at a time
LINES = [f"line {number}" for number in range(1, 21)]
TEXT = "".join(f"{line}\n" for line in LINES).encode()


async def probe(tmp_path: Path, name: str, **params: Any) -> dict[str, Any]:
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)))
    return (await execute_probe(REGISTRY, name, params, ctx)).result


@pytest.fixture
def truncated_while_written(tmp_path: Path) -> Path:
    """A log as copytruncate leaves it once its writer wrote on: NULs, then the new lines."""
    path = tmp_path / "copytruncated.log"
    path.write_bytes(b"\x00" * HOLE_BYTES + TEXT)
    return path


@pytest.fixture
def text_then_hole(tmp_path: Path) -> Path:
    path = tmp_path / "text-then-hole.log"
    path.write_bytes(TEXT + b"\x00" * HOLE_BYTES)
    return path


@pytest.mark.parametrize("name", ["system.logs.head", "system.logs.tail"])
@pytest.mark.parametrize("fixture", ["truncated_while_written", "text_then_hole"])
async def test_a_run_of_nuls_is_no_line(
    tmp_path: Path, request: pytest.FixtureRequest, name: str, fixture: str
) -> None:
    path: Path = request.getfixturevalue(fixture)
    found = await probe(tmp_path, name, path=str(path), lines=len(LINES) + 5)
    assert found["lines"] == LINES
    assert found["nul_bytes_skipped"] == HOLE_BYTES
    assert found["truncated"] is False
    few = await probe(tmp_path, name, path=str(path), lines=2)
    assert few["lines"] == (LINES[:2] if name.endswith("head") else LINES[-2:])


async def test_a_log_of_nuls_alone_has_no_lines(tmp_path: Path) -> None:
    path = tmp_path / "all-nul.log"
    path.write_bytes(b"\x00" * HOLE_BYTES)
    for name in ("system.logs.head", "system.logs.tail"):
        found = await probe(tmp_path, name, path=str(path))
        assert found["lines"] == []
        assert found["nul_bytes_skipped"] == HOLE_BYTES


@pytest.mark.parametrize("fixture", ["truncated_while_written", "text_then_hole"])
async def test_files_read_reads_such_a_log_as_the_log_probes_do(
    tmp_path: Path, request: pytest.FixtureRequest, fixture: str
) -> None:
    path: Path = request.getfixturevalue(fixture)
    read = await probe(tmp_path, "system.files.read", path=str(path), max_bytes=192 * 1024)
    assert read["content"] == TEXT.decode()
    assert read["nul_bytes_skipped"] == HOLE_BYTES
    assert read["bytes_read"] == HOLE_BYTES + len(TEXT)


async def test_nuls_among_the_text_are_still_binary(tmp_path: Path) -> None:
    path = tmp_path / "wtmp"
    path.write_bytes(b"pts/0\x00\x00\x00root\x00\x00\x00host\x00\x00\x00" * 100)
    for name in ("system.logs.head", "system.logs.tail", "system.files.read"):
        with pytest.raises(ProbeExecutionError, match="binary"):
            await probe(tmp_path, name, path=str(path))
