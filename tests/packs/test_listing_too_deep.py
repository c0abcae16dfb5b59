"""A directory past the size walk's depth cap is told apart from one it may not read.

`system.files.directories` sorted by size named a directory more than 64 levels down in
`unreadable`, sending an operator looking for a permission problem there is none of. It is
now in `too_deep`, counted in `too_deep_count`.
"""

from __future__ import annotations

from pathlib import Path

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.dirsize import MAX_WALK_DEPTH

REGISTRY = PackRegistry.of([PACK])


async def test_a_directory_too_deep_is_not_called_unreadable(tmp_path: Path) -> None:
    tmp_path.joinpath("deep", *["d"] * (MAX_WALK_DEPTH + 3)).mkdir(parents=True)
    (tmp_path / "shallow").mkdir()
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)))
    params = {"path": str(tmp_path), "sort_by": "size"}
    listing = (await execute_probe(REGISTRY, "system.files.directories", params, ctx)).result
    assert listing["unreadable"] == []
    assert listing["too_deep"] == ["/".join(["deep", *["d"] * MAX_WALK_DEPTH])]
    assert listing["too_deep_count"] == 1
    assert listing["complete"] is False  # a lower bound still
    sizes = {entry["name"]: entry["size_complete"] for entry in listing["entries"]}
    assert sizes == {"deep": False, "shallow": True}
