"""`sonde serve --json` lists its tools from the packs' saved descriptions, importing no probe module.

Importing every detected pack's probe modules (and building their pydantic models) took about
half of the start to the ready line; the agent had stopped doing it for its register. The
tools it lists are the same as the probe code's own, and a pack's modules are imported when one
of its probes is first called.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

from sonde.packs.registry import load_packs
from tests.e2e.procs import base_env

LIST_TOOLS = """
import json, sys
from pathlib import Path
from sonde.agent.manifest import select_tools
from sonde.agent.serve import create_tool_server
from sonde.packs.registry import load_packs

registry = load_packs()
server = create_tool_server(registry, select_tools(registry, None, Path.cwd()))
before = sorted(m for m in sys.modules if m.startswith("sonde.packs.") and m.count(".") == 3)
print(json.dumps({
    "tools": [tool.model_dump(mode="json", by_alias=True) for tool in server.tools],
    "imported": before,
    "loaded": sorted(name for name, pack in registry.packs.items() if pack._loaded),
}))
"""


def test_the_tools_are_listed_from_the_descriptions_and_equal_the_code(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LIST_TOOLS],
        cwd=tmp_path,
        env=base_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = json.loads(done.stdout)
    assert listed["loaded"] == []  # no pack imported its probe modules to be listed
    modules = {module for pack in load_packs().packs.values() for module in pack.modules}
    assert not set(listed["imported"]) & modules, listed["imported"]
    assert listed["tools"], "no tool listed: no pack detected here"
    registry = load_packs()
    for tool in listed["tools"]:
        spec = registry.probe(tool["name"])
        assert spec is not None, tool["name"]
        assert tool["description"] == inspect.cleandoc(spec.description)
        assert tool["inputSchema"] == spec.params_schema()
