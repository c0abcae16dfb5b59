"""`sonde/protocol` must stay pure: no I/O framework, no storage, no MCP."""

from __future__ import annotations

import ast
import pathlib

import sonde.protocol

FORBIDDEN = {"trio", "trio_websocket", "hypercorn", "quart", "quart_trio", "sqlite_utils", "psutil", "mcp"}
PROTOCOL_DIR = pathlib.Path(sonde.protocol.__file__).parent


def imported_roots(path: pathlib.Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
            if node.module.startswith("sonde.") and not node.module.startswith("sonde.protocol"):
                roots.add(node.module)
    return roots


def test_protocol_imports_nothing_impure() -> None:
    files = sorted(PROTOCOL_DIR.rglob("*.py"))
    assert files, "no protocol modules found"
    for path in files:
        roots = imported_roots(path)
        bad = roots & FORBIDDEN
        assert not bad, f"{path.name} imports {bad}"
        outside = {r for r in roots if r.startswith("sonde.")}
        assert not outside, f"{path.name} imports {outside} from outside sonde.protocol"


def test_the_walker_sees_a_forbidden_import(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import trio\nfrom sqlite_utils import Database\nfrom sonde.hub import app\n")
    assert imported_roots(bad) >= {"trio", "sqlite_utils", "sonde.hub"}
