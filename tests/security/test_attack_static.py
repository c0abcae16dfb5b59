"""No code path runs a shell or a command built as a string: an `ast` walk over every module of sonde.

Refused anywhere under ``sonde/``:

- ``shell=`` anything but a literal False, on any call;
- ``os.system``, ``os.popen``, ``subprocess.getoutput``/``getstatusoutput``,
  ``asyncio.create_subprocess_shell`` and ``pty.spawn`` (each runs a shell or a string);
- ``eval`` and ``exec``;
- a process call (``subprocess.run``/``Popen``/``call``/``check_*``, ``trio.run_process``,
  ``trio.lowlevel.open_process``, ``asyncio.create_subprocess_exec``, ``anyio``'s; also
  through ``functools.partial``) whose command is a string: a literal, an f-string,
  ``str.format``, ``%``, ``+`` with a string, ``str.join``, or a local name bound to one;
  or whose argv starts a shell on a string (``["sh", "-c", ...]``).

Names are resolved through each module's imports (``from subprocess import run as go``).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sonde

SONDE_ROOT = Path(sonde.__file__).parent
SHELL_RUNNERS = {
    "os.system",
    "os.popen",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "asyncio.create_subprocess_shell",
    "pty.spawn",
}
BUILTIN_EVALUATORS = {"eval", "exec"}
PROCESS_CALLS = {
    "subprocess.run",
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "trio.run_process",
    "trio.lowlevel.open_process",
    "asyncio.create_subprocess_exec",
    "anyio.run_process",
    "anyio.open_process",
}
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"}
PARTIALS = {"functools.partial", "functools.partialmethod"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


class Imports(ast.NodeVisitor):
    """Local name -> dotted origin, from a module's imports (any depth)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.names[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.names[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if node.module and node.level == 0:
                self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def dotted(node: ast.expr, imports: dict[str, str]) -> str | None:
    """``a.b.c`` for a name or attribute chain, its head resolved through ``imports``."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = imports.get(node.id, node.id)
    return ".".join([head, *reversed(parts)])


def is_process_call(name: str) -> bool:
    return name in PROCESS_CALLS


def is_string_built(node: ast.expr | None, strings: set[str]) -> bool:
    """True for an expression that makes a string (``strings``: local names bound to one)."""
    match node:
        case ast.Constant(value=str() | bytes()) | ast.JoinedStr():
            return True
        case ast.BinOp(op=ast.Mod(), left=left):
            return is_string_built(left, strings)
        case ast.BinOp(op=ast.Add(), left=left, right=right):
            return is_string_built(left, strings) or is_string_built(right, strings)
        case ast.Call(func=ast.Attribute(attr="format" | "join" | "replace" | "strip")):
            return True
        case ast.Call(func=ast.Name(id="str")):
            return True
        case ast.Name(id=name):
            return name in strings
    return False


def string_names(scope: ast.AST) -> set[str]:
    """Names a scope ever binds to a string-built value (a rough, safe over-approximation)."""
    found: set[str] = set()
    for _ in range(3):  # names built from names built from strings
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                adds = isinstance(node, ast.AugAssign) and is_string_built(node.value, found)
                if adds or is_string_built(node.value, found):
                    found |= {target.id for target in targets if isinstance(target, ast.Name)}
    return found


def runs_a_shell(argv: ast.expr | None) -> bool:
    """An argv list that starts a shell on a command string: ``["sh", "-c", ...]``."""
    if not isinstance(argv, ast.List | ast.Tuple) or not argv.elts:
        return False
    words = [elt.value for elt in argv.elts if isinstance(elt, ast.Constant) and isinstance(elt.value, str)]
    first = argv.elts[0]
    return isinstance(first, ast.Constant) and first.value in SHELLS and "-c" in words


def command_of(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    for keyword in call.keywords:
        if keyword.arg in ("args", "argv", "command", "cmd", "program"):
            return keyword.value
    return None


def problems_in_call(call: ast.Call, imports: dict[str, str], strings: set[str]) -> Iterator[str]:
    for keyword in call.keywords:
        if keyword.arg == "shell" and not (
            isinstance(keyword.value, ast.Constant) and keyword.value.value is False
        ):
            yield "shell= on a call (argv lists only, never a shell)"
    name = dotted(call.func, imports)
    if name is None:
        return
    if name in SHELL_RUNNERS:
        yield f"{name}() runs a shell"
    if name in BUILTIN_EVALUATORS and name not in imports:
        yield f"{name}() evaluates code"
    target, args = name, call
    if name in PARTIALS and call.args:
        inner = dotted(call.args[0], imports)
        if inner is not None:
            target, args = inner, ast.Call(func=call.args[0], args=call.args[1:], keywords=call.keywords)
    if is_process_call(target) and is_string_built(command_of(args), strings):
        yield f"{target}() with a string command (pass an argv list)"
    if is_process_call(target) and runs_a_shell(command_of(args)):
        yield f"{target}() runs a shell on a command string (sh -c)"


def scopes(tree: ast.Module) -> Iterator[tuple[ast.AST, set[str]]]:
    """Each function (and the module) with the string names bound in it."""
    yield tree, string_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield node, string_names(node)


def check_source(source: str, path: str) -> list[Finding]:
    """Every forbidden call in ``source``."""
    tree = ast.parse(source, path)
    collector = Imports()
    collector.visit(tree)
    seen: set[tuple[int, int, str]] = set()
    findings = []
    for scope, strings in scopes(tree):
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call):
                continue
            for problem in problems_in_call(node, collector.names, strings):
                key = (node.lineno, node.col_offset, problem)
                if key not in seen:
                    seen.add(key)
                    findings.append(Finding(path, node.lineno, problem))
    return sorted(findings, key=lambda finding: finding.line)


def sonde_modules() -> list[Path]:
    return sorted(path for path in SONDE_ROOT.rglob("*.py") if "__pycache__" not in path.parts)


# --- the check --------------------------------------------------------------------------------


def test_no_shell_no_string_command_no_eval_anywhere_in_sonde() -> None:
    modules = sonde_modules()
    assert len(modules) > 50, "the walk should see the whole package"
    findings = [
        finding
        for path in modules
        for finding in check_source(path.read_text(), str(path.relative_to(SONDE_ROOT.parent)))
    ]
    assert not findings, "\n".join(map(str, findings))


def test_the_walk_sees_the_real_process_calls() -> None:
    """The check is not vacuous: it resolves the package's own process calls."""
    seen: set[str] = set()
    for path in sonde_modules():
        tree = ast.parse(path.read_text())
        collector = Imports()
        collector.visit(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = dotted(node.func, collector.names) or ""
                inner = dotted(node.args[0], collector.names) if name in PARTIALS and node.args else None
                seen |= {n for n in (name, inner) if n and is_process_call(n)}
    assert "trio.run_process" in seen  # sonde/packs/process.py, through functools.partial


# --- the checker's self-test --------------------------------------------------------------------

BAD = """
import os, subprocess, asyncio
import subprocess as sp
from functools import partial
from subprocess import run as go, check_output
import trio
from trio.lowlevel import open_process

def bad(host, args):
    os.system("ls")                                        # 1 shell
    os.popen(f"ping {host}")                               # 2 shell
    subprocess.getoutput("id")                             # 3 shell
    subprocess.getstatusoutput("id")                       # 4 shell
    subprocess.run(["ls"], shell=True)                     # 5 shell=
    sp.Popen(args, shell=host)                             # 6 shell= not literal False
    go("ls -l")                                            # 7 string literal
    check_output(f"ping -c1 {host}")                       # 8 f-string
    subprocess.call("ping {}".format(host))                # 9 str.format
    subprocess.check_call("ping %s" % host)                # 10 %
    subprocess.run("ping " + host)                         # 11 + with a string
    subprocess.run(" ".join(["ping", host]))               # 12 str.join
    command = "ping " + host
    subprocess.run(command)                                # 13 a name bound to a string
    subprocess.run(args=f"ls {host}")                      # 14 keyword args=
    trio.run_process(f"ping {host}")                       # 15 trio
    open_process("ls " + host)                             # 16 trio.lowlevel, imported
    partial(trio.run_process, "ls -l")                     # 17 through partial
    asyncio.create_subprocess_shell("ls")                  # 18 shell
    eval(host)                                             # 19 eval
    exec("print(1)")                                       # 20 exec
    subprocess.run(["/bin/sh", "-c", host])                # 21 sh -c in an argv list
    line = "ls"
    line += host
    subprocess.Popen(line)                                 # 22 a name extended with +=
"""

GOOD = """
import subprocess, trio
from functools import partial

def good(host: str, argv: list[str]) -> None:
    subprocess.run(["ping", "-c1", "--", host], check=False, shell=False)
    subprocess.run([*argv, "--", host])
    trio.run_process(list(argv), stdin=subprocess.DEVNULL)
    partial(trio.run_process, ["ls", "-l"], stdout=subprocess.PIPE)
    label = f"ping {host}"  # a string that is never a command
    print(label.format())
    ast_eval = {"eval": 1}
"""


def test_the_checker_catches_every_bad_shape() -> None:
    findings = check_source(textwrap.dedent(BAD), "bad.py")
    lines = {finding.line for finding in findings}
    expected = {
        index + 1
        for index, line in enumerate(textwrap.dedent(BAD).splitlines())
        if "# " in line and line.split("# ")[-1].split()[0].isdigit()
    }
    assert len(expected) == 22
    assert lines == expected, "\n".join(map(str, findings))


def test_the_checker_passes_argv_lists() -> None:
    assert check_source(textwrap.dedent(GOOD), "good.py") == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import subprocess\nsubprocess.run('x', shell=1)",
        "from os import system\nsystem('x')",
        "import os as o\no.popen('x')",
        "import trio\nasync def f(h):\n    await trio.run_process('ping %s' % h)",
    ],
)
def test_the_checker_follows_aliases(snippet: str) -> None:
    assert check_source(snippet, "alias.py"), snippet
