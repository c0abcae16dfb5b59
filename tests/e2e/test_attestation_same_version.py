"""Sonde installed again from another build of the same version: its agents are held (their
code hash changed, their version did not), the hub says what explains it, and one command
accepts them all, each on the audit log.

Found by an upgrade review: every agent upgraded from a newer checkout (the version stays
0.1.0) was held, and `sonde hub agent accept` took one name at a time.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import sonde
from sonde.hub.attestation import SAME_VERSION_HINT
from tests.e2e.harness import audit_rows
from tests.e2e.procs import enroll_agent, running_hub, wait_until, watch, with_site

NAMES = ("web-1", "web-2")


def another_build(site: Path) -> Path:
    """The installed ``sonde`` package copied to ``site`` with one file changed, as another build
    of the same version is: its agents run it first on their path."""
    copy = site / "sonde"
    shutil.copytree(Path(sonde.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "__init__.py").open("a") as init:
        init.write("# another build of the same version\n")
    return site


def test_a_fleet_on_another_build_is_held_and_accepted_at_once(tmp_path: Path) -> None:
    site = another_build(tmp_path / "site")
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agents = [enroll_agent(hub, tmp_path, name) for name in NAMES]
        for agent in agents:
            agent.start()
        wait_until(lambda: hub.statuses() == dict.fromkeys(NAMES, "online"))  # the baseline
        for agent in agents:
            agent.stop()
            # -P: not the working directory's `sonde` (this checkout) but the one on the path
            agent.proc = watch(
                [sys.executable, "-P", "-m", "sonde", "start", "--allow-root"], with_site(agent.env, site)
            )
        wait_until(lambda: hub.statuses() == dict.fromkeys(NAMES, "degraded"))
        held = [line for line in hub.proc.lines if "is held as degraded" in line]
        assert len(held) == 2, held
        assert all("codeHash: " in line and line.endswith(SAME_VERSION_HINT) for line in held), held

        neither = hub.cli("hub", "agent", "accept")
        both = hub.cli("hub", "agent", "accept", "web-1", "--all")
        for refused in (neither, both):
            assert refused.returncode == 2, refused.stderr
            assert "give one agent's NAME, or --all for every held agent" in refused.stderr

        done = hub.cli("hub", "agent", "accept", "--all")
        assert done.returncode == 0, done.stderr
        said = done.stderr.splitlines()
        assert said[0] == "accepted the new attestation of 2 agent(s); their probes run again:", said
        # what each was held for, to look at after: here its code, under the same version
        assert [line.split(": codeHash: 'sha256:")[0] for line in said[1:]] == ["  web-1", "  web-2"], said
        wait_until(lambda: hub.statuses() == dict.fromkeys(NAMES, "online"))  # the running hub saw it
        assert sorted(r["target"] for r in audit_rows(hub, "attestation.accept")) == list(NAMES)

        again = hub.cli("hub", "agent", "accept", "--all")
        assert again.returncode == 1, again.stderr
        assert "no agent has a changed attestation waiting; nothing to accept" in again.stderr
        for agent in agents:
            agent.stop()
