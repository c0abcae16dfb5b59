"""`sonde service install|uninstall|status` and the groups `sonde packs list` reports missing."""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sonde.agent import service
from sonde.agent.config import AgentConfig, save_config
from sonde.agent.packs_report import render_text, report_pack
from sonde.agent.service import (
    HARDENING,
    UNIT_NAME,
    Plan,
    UnitSpec,
    closed_to_others,
    install_service,
    plan_unit,
    render_unit,
    service_status,
    sonde_command,
    uninstall_service,
)
from sonde.packs.base import Detection, NoParams, Pack, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.registry import PackRegistry
from tests.conftest import require
from tests.e2e.procs import SONDE
from tests.subprocs import run_any, run_ok

SYSTEMCTL = "/usr/bin/systemctl"
NO_SUCH_GROUP = "sonde-test-no-such-group"
MY_GROUP = grp.getgrgid(os.getegid()).gr_name
MY_USER = pwd.getpwuid(os.geteuid()).pw_name
SPEC = UnitSpec(exec_start=("/opt/sonde/bin/sonde", "start"), supplementary_groups=("adm", "systemd-journal"))


class Empty(Result):
    pass


def pack_needing(name: str, *groups: str) -> Pack:
    pack = Pack(name, "1.0.0", f"needs {groups}", requires=Requirements(groups=groups[:1]))

    @pack.probe(f"{name}.area.one", "One.", requires=Requirements(groups=groups[1:]))
    async def one(ctx: ProbeContext, params: NoParams) -> Empty:
        return Empty()

    return pack


class FakeSystemctl:
    """Records the argv lists it is asked to run; fails the calls named in ``failing``."""

    def __init__(self, *failing: str) -> None:
        self.calls: list[list[str]] = []
        self.failing = failing

    def __call__(self, argv: list[str]) -> int:
        self.calls.append(argv)
        return 1 if argv[1] in self.failing else 0


def unit_lines(text: str) -> list[str]:
    return text.splitlines()


# --- the unit text ---------------------------------------------------------------------


def test_the_unit_runs_sonde_start_as_user_sonde_with_every_hardening_line() -> None:
    lines = unit_lines(render_unit(SPEC))
    required = [
        "ExecStart=/opt/sonde/bin/sonde start",
        "User=sonde",
        "Group=sonde",
        "SupplementaryGroups=adm systemd-journal",
        "Environment=HOME=/var/lib/sonde",
        "StateDirectory=sonde",
        "ReadWritePaths=/var/lib/sonde",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "PrivateTmp=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
        "RestrictSUIDSGID=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        "LockPersonality=yes",
        "RestrictRealtime=yes",
        "SystemCallArchitectures=native",
        "Restart=on-failure",
        "RestartSec=5",
        "RestartPreventExitStatus=2 3",
        "WantedBy=multi-user.target",
    ]
    for line in [*required, *HARDENING]:
        assert line in lines, line
    assert lines.index("[Unit]") < lines.index("[Service]") < lines.index("[Install]")
    assert len([line for line in lines if line.startswith("ExecStart=")]) == 1


def test_no_groups_is_an_empty_supplementary_groups_line() -> None:
    spec = UnitSpec(exec_start=("/usr/bin/sonde", "start"))
    assert "SupplementaryGroups=" in unit_lines(render_unit(spec))


def test_exec_start_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="absolute"):
        render_unit(UnitSpec(exec_start=("sonde", "start")))


def test_sonde_command_is_absolute_and_runnable() -> None:
    command = sonde_command()
    assert Path(command[0]).is_absolute()
    assert os.access(command[0], os.X_OK)
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0


def test_groups_come_from_the_packs_and_only_existing_ones_are_used() -> None:
    registry = PackRegistry.of(
        [pack_needing("alpha", MY_GROUP, NO_SUCH_GROUP), pack_needing("beta", "root", MY_GROUP)]
    )
    plan = plan_unit(registry, command=("/opt/sonde/bin/sonde", "start"))
    assert plan.spec.supplementary_groups == tuple(sorted({MY_GROUP, "root"}))
    assert plan.missing_groups == (NO_SUCH_GROUP,)
    assert f"SupplementaryGroups={' '.join(sorted({MY_GROUP, 'root'}))}" in unit_lines(plan.text)


def test_the_default_plan_runs_this_sonde() -> None:
    plan = plan_unit(PackRegistry.of([]))
    assert plan.spec.exec_start == (*sonde_command(), "start")


# --- install ------------------------------------------------------------------------------


def plan_for(user: str = "sonde", home: Path | None = None) -> Plan:
    """A plan; with ``home``, for a service HOME there holding an enrolled config."""
    spec = UnitSpec(exec_start=("/opt/sonde/bin/sonde", "start"), supplementary_groups=("adm",), user=user)
    if home is not None:
        (home / ".sonde").mkdir(parents=True)
        (home / ".sonde" / "config.json").write_text("{}")
        spec = dataclasses.replace(spec, home=home)
    return Plan(spec, "the test's packs", (NO_SUCH_GROUP,))


def test_install_writes_the_unit_and_says_what_to_do_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install_service(tmp_path, plan=plan_for(), runner=FakeSystemctl()) == 0
    path = tmp_path / UNIT_NAME
    assert path.read_text() == plan_for().text
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    out = capsys.readouterr().out
    assert f"wrote {path}" in out
    assert "user sonde" in out
    assert "groups: adm" in out
    assert f"left out: {NO_SUCH_GROUP}" in out
    assert "systemctl daemon-reload && systemctl enable --now sonde-agent" in out
    if not service.user_exists("sonde"):
        assert "useradd --system --home /var/lib/sonde" in out


def program_behind(tmp_path: Path, mode: int, interpreter: str = "/bin/sh") -> Path:
    """An executable script in a directory of ``mode``; its ``#!`` names ``interpreter``."""
    home = tmp_path / "home"
    home.mkdir()
    script = home / "sonde"
    script.write_text(f"#!{interpreter}\nexit 0\n")
    script.chmod(0o755)
    home.chmod(mode)
    return script


@pytest.mark.parametrize("closed_part", ["directory", "interpreter"])
def test_install_and_status_say_when_the_service_user_cannot_run_the_program(
    tmp_path: Path, open_dir: Path, capsys: pytest.CaptureFixture[str], closed_part: str
) -> None:
    if closed_part == "directory":
        program, closed = program_behind(open_dir, 0o700), open_dir / "home"
    else:  # a script anyone may read, whose interpreter lives behind a closed directory (a venv of /root's)
        (open_dir / "hidden").mkdir()
        interpreter = program_behind(open_dir / "hidden", 0o700)
        (open_dir / "open").mkdir()
        program = program_behind(open_dir / "open", 0o755, interpreter=str(interpreter))
        closed = open_dir / "hidden" / "home"
    plan = Plan(UnitSpec(exec_start=(str(program), "start")), "the test's packs", ())
    assert install_service(tmp_path, plan=plan, runner=FakeSystemctl()) == 0
    said = f"user sonde cannot run {program}: {closed} (mode 0700) is closed to it"
    assert said in capsys.readouterr().out
    assert service_status(tmp_path, plan=plan, ask=lambda argv: "inactive", systemctl=SYSTEMCTL) == 1
    assert f"runnable: no, {said}" in capsys.readouterr().out


def test_a_program_every_user_may_run_gets_no_warning(
    tmp_path: Path, open_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = program_behind(open_dir, 0o755)
    plan = Plan(UnitSpec(exec_start=(str(program), "start")), "the test's packs", ())
    install_service(tmp_path, plan=plan, runner=FakeSystemctl())
    assert "cannot run" not in capsys.readouterr().out
    assert service_status(tmp_path, plan=plan, ask=lambda argv: "active", systemctl=SYSTEMCTL) == 0


def test_install_without_now_runs_nothing(tmp_path: Path) -> None:
    systemctl = FakeSystemctl()
    install_service(tmp_path, plan=plan_for(), runner=systemctl, systemctl=SYSTEMCTL)
    assert systemctl.calls == []


def install_enrolled_now(tmp_path: Path, systemctl: FakeSystemctl) -> int:
    """`install --now` for a service user that exists and is enrolled."""
    plan = plan_for(MY_USER, tmp_path / "svc")
    return install_service(tmp_path, now=True, plan=plan, runner=systemctl, systemctl=SYSTEMCTL)


def test_install_now_reloads_and_starts(tmp_path: Path) -> None:
    systemctl = FakeSystemctl()
    assert install_enrolled_now(tmp_path, systemctl) == 0
    assert systemctl.calls == [[SYSTEMCTL, "daemon-reload"], [SYSTEMCTL, "enable", "--now", "sonde-agent"]]


def test_install_now_stops_at_the_first_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    systemctl = FakeSystemctl("daemon-reload")
    assert install_enrolled_now(tmp_path, systemctl) == 1
    assert systemctl.calls == [[SYSTEMCTL, "daemon-reload"]]
    assert "failed with exit status 1" in capsys.readouterr().err


def test_install_now_needs_the_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    systemctl = FakeSystemctl()
    plan = plan_for("sonde-test-no-such-user")
    assert install_service(tmp_path, now=True, plan=plan, runner=systemctl, systemctl=SYSTEMCTL) == 1
    assert systemctl.calls == []
    assert not (tmp_path / UNIT_NAME).exists()
    assert "useradd --system" in capsys.readouterr().err


def test_install_now_without_systemctl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(service.shutil, "which", lambda name: None)
    assert (
        install_service(tmp_path, now=True, plan=plan_for(MY_USER, tmp_path / "svc"), runner=FakeSystemctl())
        == 1
    )
    assert (tmp_path / UNIT_NAME).exists()
    assert "systemctl is not available" in capsys.readouterr().err


def test_install_refuses_politely_without_write_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(service, "unit_dir_writable", lambda path: False)
    assert install_service(tmp_path, plan=plan_for()) == 1
    assert not (tmp_path / UNIT_NAME).exists()
    assert "run it as root" in capsys.readouterr().err


def test_install_refuses_a_missing_unit_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install_service(tmp_path / "nope", plan=plan_for()) == 1
    assert "--unit-dir" in capsys.readouterr().err


# --- uninstall and status ---------------------------------------------------------------------


def test_uninstall_removes_the_unit(tmp_path: Path) -> None:
    install_service(tmp_path, plan=plan_for())
    systemctl = FakeSystemctl()
    assert uninstall_service(tmp_path, runner=systemctl, systemctl=SYSTEMCTL) == 0
    assert not (tmp_path / UNIT_NAME).exists()
    assert systemctl.calls == []


def test_uninstall_now_stops_first_and_reloads_after(tmp_path: Path) -> None:
    install_service(tmp_path, plan=plan_for())
    systemctl = FakeSystemctl()
    assert uninstall_service(tmp_path, now=True, runner=systemctl, systemctl=SYSTEMCTL) == 0
    assert systemctl.calls == [[SYSTEMCTL, "disable", "--now", "sonde-agent"], [SYSTEMCTL, "daemon-reload"]]


def test_uninstall_keeps_the_unit_when_it_cannot_stop_the_service(tmp_path: Path) -> None:
    install_service(tmp_path, plan=plan_for())
    assert uninstall_service(tmp_path, now=True, runner=FakeSystemctl("disable"), systemctl=SYSTEMCTL) == 1
    assert (tmp_path / UNIT_NAME).exists()


def test_uninstall_of_nothing_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert uninstall_service(tmp_path) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_status_of_a_current_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_service(tmp_path, plan=plan_for())
    capsys.readouterr()
    asked: list[list[str]] = []

    def ask(argv: list[str]) -> str:
        asked.append(argv)
        return "active"

    assert service_status(tmp_path, plan=plan_for(), ask=ask, systemctl=SYSTEMCTL) == 0
    out = capsys.readouterr().out
    assert "(installed)" in out
    assert "matches what `sonde service install` would write now" in out
    assert "service: active" in out
    assert asked == [[SYSTEMCTL, "is-active", "sonde-agent"]]


def test_status_reports_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_service(tmp_path, plan=plan_for())
    path = tmp_path / UNIT_NAME
    path.write_text(path.read_text().replace("ProtectSystem=strict", "ProtectSystem=full"))
    capsys.readouterr()
    assert service_status(tmp_path, plan=plan_for(), ask=lambda argv: "inactive", systemctl=SYSTEMCTL) == 1
    out = capsys.readouterr().out
    assert "content: drifted" in out
    assert "-ProtectSystem=full" in out
    assert "+ProtectSystem=strict" in out


def test_status_when_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(service.shutil, "which", lambda name: None)
    assert service_status(tmp_path) == 1
    out = capsys.readouterr().out
    assert "(not installed)" in out
    assert "no systemctl here" in out


def assert_systemd_takes_it_whole(unit: Path) -> None:
    """systemd's own check of a unit file: every key known (a misspelt hardening line is only
    warned about, and the service would run without it), ExecStart's program executable."""
    analyze = shutil.which("systemd-analyze")
    require(analyze is not None, "systemd-analyze (Debian's systemd package) checks the unit file")
    assert analyze is not None
    verified = run_any([analyze, "verify", str(unit)], timeout=60)
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, ""), unit.read_text()


def test_systemd_knows_every_line_of_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / UNIT_NAME
    unit.write_text(render_unit(dataclasses.replace(SPEC, exec_start=(*service.sonde_command(), "start"))))
    assert_systemd_takes_it_whole(unit)
    misspelt = tmp_path / "misspelt" / UNIT_NAME  # the check itself: a line systemd would ignore fails it
    misspelt.parent.mkdir()
    misspelt.write_text(unit.read_text().replace("LockPersonality=", "LockPersonallity="))
    with pytest.raises(AssertionError, match="LockPersonallity"):
        assert_systemd_takes_it_whole(misspelt)


@pytest.mark.e2e
def test_the_cli_installs_reports_and_uninstalls(tmp_path: Path) -> None:
    env = {**os.environ, "SONDE_HOME": str(tmp_path / "home")}

    def sonde(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "sonde", "service", *args, "--unit-dir", str(tmp_path)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)

    installed = sonde("install")
    assert installed.returncode == 0, installed.stderr
    assert "ExecStart=/" in (tmp_path / UNIT_NAME).read_text()
    assert_systemd_takes_it_whole(tmp_path / UNIT_NAME)
    status = sonde("status")
    closed = closed_to_others(service.sonde_command()[0])  # e.g. this venv's Python under /root
    assert status.returncode == (0 if closed is None else 1), status.stdout + status.stderr
    assert "matches" in status.stdout
    assert ("runnable: no" in status.stdout) == (closed is not None)
    assert ("cannot run" in installed.stdout) == (closed is not None)
    assert sonde("uninstall").returncode == 0
    assert not (tmp_path / UNIT_NAME).exists()


# --- packs list: the groups this user lacks -----------------------------------------------------


def test_packs_list_names_the_groups_the_current_user_lacks() -> None:
    pack = pack_needing("demo", MY_GROUP, NO_SUCH_GROUP, "root")
    report = report_pack(pack, member_of={MY_GROUP})
    expected_missing = tuple(sorted({NO_SUCH_GROUP, "root"} - {MY_GROUP}))
    assert report.groups_missing == expected_missing
    assert report.to_json()["groupsMissing"] == list(expected_missing)
    text = render_text([report])
    assert f"  needs group {NO_SUCH_GROUP} (no such group here)" in text.splitlines()
    if "root" in expected_missing:
        assert "  needs group root (not a member)" in text.splitlines()


def test_packs_list_says_nothing_for_a_pack_that_does_not_apply() -> None:
    pack = pack_needing("demo", NO_SUCH_GROUP)
    pack.detect = lambda: Detection(False, "not here")
    assert report_pack(pack, member_of=set()).groups_missing == ()
    assert report_pack(pack, member_of=set(), enabled=True).groups_missing == (NO_SUCH_GROUP,)


def test_the_service_users_config_is_read_though_another_user_owns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root, installing the unit, reads the packs from a config the service user owns: it only reports them."""
    require(os.geteuid() == 0, "giving a file to another user needs root")
    home = tmp_path / "home"
    save_config(AgentConfig(enabled_packs=["system"]), home / "config.json")
    os.chown(home / "config.json", 65534, 65534)
    monkeypatch.setenv("SONDE_HOME", str(home))
    monkeypatch.setattr(service, "SERVICE_HOME", tmp_path / "no-service-home")
    registry, source = service.service_registry()
    assert list(registry.packs) == ["system"]
    assert source == f"enabledPacks (config {home / 'config.json'})"


def test_packs_list_says_what_it_cannot_use_from_the_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    save_config(AgentConfig(enabled_packs=["system", "nosuchpack"]), home / "config.json")
    env = {**os.environ, "SONDE_HOME": str(home)}
    listed = run_ok([*SONDE, "packs", "list", "--json"], env=env)
    assert "enabledPacks names packs not installed here: nosuchpack" in listed.stderr
    assert "would not start" not in listed.stderr
    assert "system" in {p["name"] for p in json.loads(listed.stdout)["packs"]}
    (home / "config.json").chmod(0o622)
    listed = run_ok([*SONDE, "packs", "list", "--json"], env=env)
    assert f"config {home / 'config.json'} has mode 622: others can change it" in listed.stderr
    assert "the agent would not start with it (enabledPacks not shown)" in listed.stderr
    assert "nosuchpack" not in listed.stderr


def test_install_now_needs_the_service_enrolled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The unit reads the service HOME's config, not the caller's: without it, it would restart forever."""
    systemctl = FakeSystemctl()
    plan = plan_for(MY_USER)  # HOME /var/lib/sonde, not enrolled on this machine
    assert install_service(tmp_path, now=True, plan=plan, runner=systemctl, systemctl=SYSTEMCTL) == 1
    assert systemctl.calls == []
    assert not (tmp_path / UNIT_NAME).exists()
    err = capsys.readouterr().err
    assert "the service has no enrollment yet (/var/lib/sonde/.sonde/config.json)" in err
    assert (
        "sudo -u " + MY_USER + " env HOME=/var/lib/sonde /opt/sonde/bin/sonde enroll --hub URL "
        "(it asks for the token)" in err
    )


def test_install_warns_when_it_grants_a_root_equivalent_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = UnitSpec(exec_start=("/opt/sonde/bin/sonde", "start"), supplementary_groups=("adm", "docker"))
    assert install_service(tmp_path, plan=Plan(spec, "the test's packs", ()), runner=FakeSystemctl()) == 0
    out = capsys.readouterr().out
    assert "warning: group docker is root-equivalent" in out
    assert "adm is root-equivalent" not in out
