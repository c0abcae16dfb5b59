"""A plain (non-editable) build ships everything the hub serves, webui/ included."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from tests.subprocs import run_ok

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_webui_packs_and_entry_points(tmp_path: Path) -> None:
    run_ok(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)], timeout=300
    )
    wheel = next(tmp_path.glob("sonde-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        declared = archive.read(entry_points).decode()
    for served in ("index.html", "app.js", "app.css"):  # the dashboard, whole
        assert f"sonde/webui/{served}" in names, served
    for module in ("sonde/hub/serve.py", "sonde/bridge/proxy.py", "sonde/packs/postgres/__init__.py"):
        assert module in names, module
    for pack in ("system", "systemd", "docker", "nginx", "postgres", "mysql", "redis"):
        assert f"{pack} = sonde.packs.{pack}:PACK" in declared
        assert f"sonde/packs/{pack}/descriptor.json" in names  # the register is built from it
    assert "sonde = sonde.cli:main" in declared
    sources = {p.relative_to(ROOT / "sonde").as_posix() for p in (ROOT / "sonde").rglob("*.py")}
    assert {f"sonde/{s}" for s in sources} <= names, (
        "a module is missing from the package list in pyproject.toml"
    )
