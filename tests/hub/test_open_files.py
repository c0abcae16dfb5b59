"""The hub lifts its soft open-file limit to the hard one: each agent holds a socket.

Each case starts a real process whose soft limit was lowered first (a small
launcher sets it, then execs), the way systemd's default of 1024 would.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

from sonde.hub.open_files import CEILING, RESERVED
from tests.e2e.procs import SONDE, URL_LINE, base_env, watch

LOWERED_SOFT = 512


def launcher(soft: int, hard: int, argv: list[str]) -> list[str]:
    """A command that sets RLIMIT_NOFILE to (soft, hard) and then execs ``argv``."""
    code = textwrap.dedent(
        f"""
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
        os.execv({argv[0]!r}, {argv!r})
        """
    )
    return [sys.executable, "-c", code]


def open_file_limits(pid: int) -> tuple[int, int]:
    """The soft and hard open-file limits of process ``pid``, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = (resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in line.split()[3:5])
            return soft, hard
    raise AssertionError("no 'Max open files' line")


def test_the_hub_raises_its_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = CEILING if hard == resource.RLIM_INFINITY else hard
    argv = [*SONDE, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    hub = watch(launcher(LOWERED_SOFT, hard, argv), base_env(tmp_path / "home"))
    try:
        hub.wait_for(URL_LINE)
        assert open_file_limits(hub.popen.pid) == (expected, hard)
        hub.wait_for(re.compile(rf"open-file limit {expected}: room for about {expected - RESERVED} agents"))
    finally:
        hub.stop()


def test_a_low_hard_limit_is_named_with_what_to_do(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import logging, resource, sys
        logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
        from sonde.hub.open_files import raise_open_file_limit
        print("returned", raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))
        """
    )
    done = subprocess.run(
        launcher(300, 1000, [sys.executable, "-c", script]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=base_env(tmp_path / "home"),
    )
    assert (
        "WARNING open-file limit 1000: this hub can hold about 936 agents; raise it (LimitNOFILE="
        in done.stdout
    )
    assert "returned 1000 (1000, 1000)" in done.stdout
