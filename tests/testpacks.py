"""Install a test-only pack where a subprocess finds it: a module plus a
``*.dist-info/entry_points.txt`` in a directory that goes on PYTHONPATH."""

from __future__ import annotations

from pathlib import Path


def install_test_pack(site: Path, pack: str, source: str) -> Path:
    """Write pack ``pack`` (module ``sonde_<pack>`` defining ``PACK``) under ``site``; returns ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    module = f"sonde_{pack}"
    (site / f"{module}.py").write_text(source)
    dist_info = site / f"{module}-0.0.1.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.0.1\n"
    )
    (dist_info / "entry_points.txt").write_text(f"[sonde.packs]\n{pack} = {module}:PACK\n")
    return site
