"""The system pack for an agent that is not root: what it cannot see is said, with advice that fits.

The decisions are tested as pure functions first. Then the probes run for real
as user ``nobody`` (``setpriv``, with or without the ``adm`` group) over files
this root test process made with known owners and modes, in a directory under
/tmp that ``nobody`` may enter (pytest's tmp_path lies under a 0700 directory).
"""

from __future__ import annotations

import atexit
import functools
import grp
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.system.access import Agent, PathOwnership, refusal_advice
from sonde.packs.system.kernel import KERN_LOG, kern_log_advice, restricted_hint
from sonde.packs.system.listening import hidden_owners_note
from sonde.packs.system.privileges import parse_effective_capabilities, sees_every_process
from tests.conftest import IN_CI, require

NOBODY_UID = 65534
SONDE = Agent(uid=999, user="sonde", gids=frozenset({999}))
IN_ADM = Agent(uid=999, user="sonde", gids=frozenset({999, 4}))
SUBPROCESS_TIMEOUT_S = 60


def owned(path: str, uid: int, owner: str, gid: int, group: str, mode: int) -> PathOwnership:
    return PathOwnership(Path(path), uid, gid, mode, owner, group)


# who may read a file, and what to advise


def test_a_file_the_adm_group_may_read_advises_joining_adm() -> None:
    syslog = owned("/var/log/syslog", 0, "root", 4, "adm", stat.S_IFREG | 0o640)
    advice = refusal_advice(syslog, SONDE, "read")
    assert "may be read by the 'adm' group, which user 'sonde' is not in" in advice
    assert "`usermod -aG adm sonde`" in advice
    assert "mode -rw-r-----" in advice


def test_a_file_of_root_alone_names_who_may_read_it_and_no_group_to_join() -> None:
    private = owned("/var/log/private.log", 0, "root", 0, "root", stat.S_IFREG | 0o640)
    advice = refusal_advice(private, IN_ADM, "read")
    assert "may be read only by its owner 'root' and the 'root' group" in advice
    assert "user 'sonde' is not among them" in advice
    assert "adm" not in advice
    assert "usermod" not in advice
    assert "allowedPaths" in advice


def test_a_file_of_another_group_advises_that_group_not_adm() -> None:
    mysql = owned("/var/log/mysql/error.log", 105, "mysql", 110, "mysql", stat.S_IFREG | 0o660)
    advice = refusal_advice(mysql, IN_ADM, "read")
    assert "`usermod -aG mysql sonde`" in advice
    assert "'adm'" not in advice


def test_a_member_of_the_group_is_not_told_to_join_it() -> None:
    owner_only = owned("/var/log/auth.log", 104, "syslog", 4, "adm", stat.S_IFREG | 0o600)
    advice = refusal_advice(owner_only, IN_ADM, "read")
    assert "may be read only by its owner 'syslog', and user 'sonde' is not among them" in advice
    assert "usermod" not in advice


def test_a_refusal_the_mode_does_not_explain_says_so() -> None:
    readable = owned("/var/log/syslog", 0, "root", 4, "adm", stat.S_IFREG | 0o640)
    advice = refusal_advice(readable, IN_ADM, "read")
    assert "its mode lets user 'sonde' read it, yet that was refused" in advice


def test_a_directory_that_cannot_be_entered() -> None:
    redis = owned("/var/log/redis", 107, "redis", 112, "redis", stat.S_IFDIR | 0o750)
    advice = refusal_advice(redis, SONDE, "enter")
    assert "may be entered by the 'redis' group" in advice
    assert "mode drwxr-x---" in advice


def test_the_owner_without_read_permission() -> None:
    mine = owned("/srv/app/out.log", 999, "sonde", 4, "adm", stat.S_IFREG | 0o040)
    advice = refusal_advice(mine, IN_ADM, "read")
    assert "is owned by user 'sonde', but its mode does not let its owner read it" in advice


# dmesg and socket owners


def test_restricted_dmesg_advice_grants_the_capability_in_both_unit_settings() -> None:
    hint = restricted_hint("sonde", None)
    assert "user 'sonde' lacks" in hint
    assert "CAP_SYSLOG to both CapabilityBoundingSet= and AmbientCapabilities=" in hint
    assert "`systemctl edit sonde-agent`" in hint
    assert "kern.log" not in hint
    with_log = restricted_hint("sonde", "the agent may read it")
    assert "or read /var/log/kern.log through system.logs.tail (the agent may read it)" in with_log


def test_kern_log_is_mentioned_only_when_it_exists(tmp_path: Path) -> None:
    assert kern_log_advice(tmp_path / "kern.log") is None
    (tmp_path / "kern.log").write_text("kernel: hello\n")
    assert kern_log_advice(tmp_path / "kern.log") == "the agent may read it"  # we are root or its owner


def test_hidden_socket_owners_note() -> None:
    assert hidden_owners_note(0, False, "sonde") is None
    unprivileged = hidden_owners_note(13, False, "sonde")
    assert unprivileged is not None
    assert "the owning process of 13 socket(s) is not visible to user 'sonde'" in unprivileged
    assert "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH to both CapabilityBoundingSet= and AmbientCapabilities=" in (
        unprivileged
    )
    privileged = hidden_owners_note(1, True, "root")
    assert privileged is not None
    assert "CAP_" not in privileged
    assert "outside the agent's PID namespace" in privileged


def test_which_capabilities_see_every_process() -> None:
    assert parse_effective_capabilities("Name:\tx\nCapEff:\t000001ffffffffff\n") == 0x1FFFFFFFFFF
    assert parse_effective_capabilities("Name:\tx\n") == 0
    assert sees_every_process(0x1FFFFFFFFFF)
    assert not sees_every_process(0)
    assert not sees_every_process(1 << 19)  # CAP_SYS_PTRACE alone cannot list another user's fd directory
    assert sees_every_process(1 << 19 | 1 << 2)  # with CAP_DAC_READ_SEARCH


# the real thing, as user nobody

PROBE_SCRIPT = """
import importlib, json, sys, trio
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
request = json.loads(sys.argv[1])
pack = importlib.import_module("sonde.packs." + request["probe"].split(".")[0]).PACK
settings = ProbeSettings(allowed_paths=tuple(request["allowed"]), packs=request["packs"])
async def main():
    try:
        outcome = await execute_probe(PackRegistry.of([pack]), request["probe"], request["params"], ProbeContext(settings))
    except ProbeExecutionError as exc:
        return {"code": exc.code, "message": exc.message}
    return {"result": outcome.result}
print(json.dumps(trio.run(main)))
"""
# Skipped on a laptop without them; under CI=true the tests run, and fail if they cannot.
unprivileged = pytest.mark.skipif(
    not IN_CI and (os.geteuid() != 0 or shutil.which("setpriv") is None),
    reason="runs probes as user nobody: needs root and setpriv (util-linux)",
)


IMPORT_ROOTS = """
import json, sys, sonde.packs.executor, sonde.packs.registry, sonde.packs.context
import sonde.packs.system, sonde.packs.nginx
for name in ("system", "nginx"):
    sys.modules["sonde.packs." + name].PACK.probes  # the probe modules, and all they import
print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})))
"""


@functools.cache
def nobody_import_path() -> str:
    """A copy, in a directory user nobody may read, of the packages the probes import.

    A clean clone may lie under a directory closed to other users (``mktemp -d`` makes
    it 0700), and its virtualenv with it: nobody could not import Sonde from there.
    """
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ROOTS], capture_output=True, text=True, timeout=60, check=True
    )
    roots = {top_level(Path(f)) for f in json.loads(done.stdout)} - {None}
    copy = Path(tempfile.mkdtemp(prefix="sonde-nobody-"))
    copy.chmod(0o755)
    atexit.register(shutil.rmtree, copy, True)
    for root in sorted(r for r in roots if r is not None):
        target = copy / root.name
        if root.is_dir():
            shutil.copytree(root, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(root, target)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(copy)


def top_level(module_file: Path) -> Path | None:
    """The top-level package directory (or single module file) of a module outside the standard library."""
    for parent in module_file.parents:
        if parent.name in ("site-packages", "dist-packages") or (parent / "pyproject.toml").is_file():
            relative = module_file.relative_to(parent)
            return parent / relative.parts[0]
    return None


@functools.cache
def python_starts_as_nobody() -> str | None:
    """None when this interpreter starts as user nobody; else why not. One installed under a
    directory closed to other users (pyenv's under /root) cannot load its own libpython."""
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY_UID}",
            f"--regid={NOBODY_UID}",
            "--clear-groups",
            sys.executable,
            "-S",
            "-c",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
        cwd="/",
    )
    return None if done.returncode == 0 else done.stderr.strip()[-300:] or f"exit {done.returncode}"


def probe_as_nobody(
    probe: str,
    params: dict[str, Any] | None = None,
    *,
    groups: tuple[int, ...] = (),
    allowed: tuple[str, ...] = (),
    packs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``probe`` in a new process as uid/gid 65534 with exactly ``groups``: its result or error."""
    request = {"probe": probe, "params": params or {}, "allowed": list(allowed), "packs": packs or {}}
    drop = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_UID}"]
    drop += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    started = python_starts_as_nobody()
    require(started is None, f"a Python that user nobody can start (this one cannot: {started})")
    done = subprocess.run(
        [*drop, sys.executable, "-S", "-c", PROBE_SCRIPT, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
        cwd="/",
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": nobody_import_path()},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def make(path: Path, mode: int, *, gid: int = 0, size: int | None = None) -> Path:
    if size is None:
        path.mkdir()
    else:
        path.write_bytes(b"x" * size)
    os.chown(path, 0, gid)
    path.chmod(mode)
    return path


def adm_gid() -> int:
    try:
        return grp.getgrnam("adm").gr_gid
    except KeyError:
        pytest.skip("this machine has no 'adm' group")


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


NOBODY = user_name(NOBODY_UID)


@unprivileged
def test_directory_sizes_it_cannot_count_are_marked_lower_bounds(open_dir: Path) -> None:
    logs = make(open_dir / "logs", 0o755)
    make(make(logs / "redis", 0o750) / "redis.log", 0o640, size=959)  # closed to nobody
    make(make(logs / "listable", 0o744) / "x.log", 0o644, size=20)  # listed, but not entered
    nested = make(logs / "nested", 0o755)
    make(nested / "open.log", 0o644, size=100)
    make(make(nested / "locked", 0o700) / "y.log", 0o644, size=50)
    make(make(logs / "open", 0o755) / "a.log", 0o644, size=10)
    found = probe_as_nobody(
        "system.files.directories",
        {"path": str(logs), "sort_by": "size", "descending": True},
        allowed=(str(logs),),
    )
    listing = found["result"]
    assert listing["complete"] is False
    assert sorted(listing["unreadable"]) == ["listable", "nested/locked", "redis"]
    entries = {entry["name"]: entry for entry in listing["entries"]}
    assert {name: entry["size_complete"] for name, entry in entries.items()} == {
        "redis": False,
        "listable": False,
        "nested": False,
        "open": True,
    }
    # only the directories' own entries are counted where nobody may not look
    assert entries["redis"]["apparent_size_bytes"] == (logs / "redis").lstat().st_size
    assert entries["open"]["apparent_size_bytes"] == (logs / "open").lstat().st_size + 10
    assert entries["nested"]["apparent_size_bytes"] >= 100


@unprivileged
def test_a_log_of_the_adm_group_advises_joining_it_until_the_agent_has(open_dir: Path) -> None:
    adm = adm_gid()
    log = make(open_dir / "syslog", 0o640, gid=adm, size=12)
    params = {"path": str(log), "lines": 5}
    refused = probe_as_nobody("system.logs.tail", params, allowed=(str(open_dir),))
    assert refused["code"] == "permission_denied"
    assert f"may be read by the 'adm' group, which user '{NOBODY}' is not in" in refused["message"]
    assert f"`usermod -aG adm {NOBODY}`" in refused["message"]
    read = probe_as_nobody("system.logs.tail", params, groups=(adm,), allowed=(str(open_dir),))
    assert read["result"]["lines"] == ["x" * 12]


@unprivileged
def test_a_log_adm_cannot_read_says_who_may(open_dir: Path) -> None:
    log = make(open_dir / "private.log", 0o640, size=12)  # root:root
    refused = probe_as_nobody(
        "system.logs.tail", {"path": str(log)}, groups=(adm_gid(),), allowed=(str(open_dir),)
    )
    message = refused["message"]
    assert "may be read only by its owner 'root' and the 'root' group" in message
    assert f"user '{NOBODY}' is not among them" in message
    assert "adm" not in message
    assert "allowedPaths" in message


@unprivileged
def test_a_log_behind_a_closed_directory_names_that_directory(open_dir: Path) -> None:
    redis = make(open_dir / "redis", 0o750)
    log = make(redis / "redis.log", 0o644, size=10)
    refused = probe_as_nobody("system.logs.tail", {"path": str(log)}, allowed=(str(open_dir),))
    assert refused["message"].startswith(f"permission denied: {log}: {redis} (owner root, group root")
    assert "may be entered only by its owner 'root' and the 'root' group" in refused["message"]


@unprivileged
def test_restricted_dmesg_names_the_unit_settings() -> None:
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0 here: any user may read the ring buffer")
    refused = probe_as_nobody("system.kernel.messages")
    assert refused["code"] == "permission_denied"
    assert "CAP_SYSLOG to both CapabilityBoundingSet= and AmbientCapabilities=" in refused["message"]
    assert ("kern.log" in refused["message"]) == KERN_LOG.is_file()


@unprivileged
def test_sockets_of_other_users_say_what_would_show_their_owners() -> None:
    with socket.socket() as listener:  # held by this root process: hidden from nobody
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        listening = probe_as_nobody("system.network.listening")["result"]
        connections = probe_as_nobody("system.network.connections", {"state": "listen", "port": port})
    [ours] = [s for s in listening["sockets"] if s["port"] == port]
    assert ours["pid"] is None
    assert listening["processes_visible"] is False
    assert f"not visible to user '{NOBODY}'" in listening["note"]
    assert "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH" in listening["note"]
    result = connections["result"]
    assert [c["pid"] for c in result["connections"]] == [None]
    assert result["processes_visible"] is False
    assert f"the owning process of 1 socket(s) is not visible to user '{NOBODY}'" in result["note"]
    assert "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH" in result["note"]
