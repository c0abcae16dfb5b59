"""`sonde service install|uninstall|status`: the agent as a hardened systemd service.

The unit runs ``sonde start`` as user ``sonde`` with no capabilities, a
read-only view of the system and of /home, a private /tmp, and write access
to its own state only (``HOME=/var/lib/sonde``, so the agent's config is
``/var/lib/sonde/.sonde/config.json``). Its ``SupplementaryGroups=`` are the
groups the enabled packs declare (``systemd-journal``, ``adm``, ``docker`` ...)
that exist on this machine.

`render_unit` is pure and makes the whole text from a `UnitSpec`; `status`
compares the installed file with what `install` would write now. Nothing here
creates users or runs systemctl unless asked (``--now``), and then only as
argv lists.
"""

from __future__ import annotations

import difflib
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sonde.agent.config import CONFIG_FILE_NAME, ConfigError, config_path, load_config, write_atomically
from sonde.agent.exit_codes import EXIT_REJECTED, EXIT_USAGE
from sonde.agent.identity import active_packs
from sonde.agent.packs_report import ROOT_EQUIVALENT_GROUPS, root_equivalent_warning
from sonde.packs.registry import PackRegistry, load_packs

UNIT_NAME = "sonde-agent.service"
DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
SERVICE_USER = "sonde"
SERVICE_HOME = Path("/var/lib/sonde")  # the unit's HOME and StateDirectory
UNIT_FILE_MODE = 0o644
SYSTEMCTL_TIMEOUT_S = 60
CommandRunner = Callable[[list[str]], int]

HARDENING = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "ProtectHostname=yes",
    "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes",
    "RestrictNamespaces=yes",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "LockPersonality=yes",
    "SystemCallArchitectures=native",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "UMask=0077",
)


@dataclass(frozen=True)
class UnitSpec:
    """Everything the unit text depends on."""

    exec_start: tuple[str, ...]  # absolute program, then its arguments
    supplementary_groups: tuple[str, ...] = ()
    user: str = SERVICE_USER
    home: Path = SERVICE_HOME


def render_unit(spec: UnitSpec) -> str:
    """The text of ``sonde-agent.service`` for ``spec``. Raises `ValueError` if the program is relative."""
    if not Path(spec.exec_start[0]).is_absolute():
        raise ValueError(f"ExecStart needs an absolute program path, got {spec.exec_start[0]!r}")
    lines = [
        "# Written by `sonde service install`; `sonde service status` reports any drift.",
        "[Unit]",
        "Description=Sonde agent: read-only probes of this machine for AI assistants",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={' '.join(spec.exec_start)}",
        f"User={spec.user}",
        f"Group={spec.user}",
        f"SupplementaryGroups={' '.join(spec.supplementary_groups)}",
        f"Environment=HOME={spec.home}",
        f"StateDirectory={spec.home.name}",
        "StateDirectoryMode=0700",
        f"ReadWritePaths={spec.home}",
        "Restart=on-failure",
        "RestartSec=5",
        # a removed or forgotten agent (3) or a bad setting (2) will not mend itself: no restart
        # every 5 s forever, each refused and audited by the hub; fix it, then start the unit.
        # Another `sonde start` holding this identity (4, one run by hand to debug) is restarted:
        # the unit takes over once that one stops, with nothing sent to the hub meanwhile
        f"RestartPreventExitStatus={EXIT_USAGE} {EXIT_REJECTED}",
        *HARDENING,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


# --- what this machine says -------------------------------------------------------------


def sonde_command() -> tuple[str, ...]:
    """The absolute command that runs this ``sonde``: its console script, else ``python -m sonde``."""
    candidates = [sys.argv[0] if Path(sys.argv[0]).name == "sonde" else None]
    candidates += [str(Path(sys.executable).with_name("sonde")), shutil.which("sonde")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return (os.path.abspath(candidate),)
    return (os.path.abspath(sys.executable), "-m", "sonde")


def closed_to_others(program: str) -> str | None:
    """Where running ``program`` (and its ``#!`` interpreter), symlinks resolved, is closed to a user
    who is neither owner nor group: ``'/root (mode 0700)'``; None if open, or if it cannot be read."""
    try:
        with open(program, "rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    paths = [program]
    if first.startswith(b"#!") and first[2:].split():
        paths.append(os.fsdecode(first[2:].split()[0]))
    for path in paths:
        real = Path(os.path.realpath(path))
        try:
            for step in [*reversed(real.parents), real]:
                mode = step.stat().st_mode
                needed = stat.S_IXOTH | (stat.S_IROTH if step == real else 0)
                if mode & needed != needed:
                    return f"{step} (mode {stat.S_IMODE(mode):04o})"
        except OSError:
            return None
    return None


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def split_groups(
    needed: Iterable[str], exists: Callable[[str], bool] = group_exists
) -> tuple[list[str], list[str]]:
    """(the needed groups that exist here, those that do not), each sorted."""
    names = sorted(set(needed))
    return [n for n in names if exists(n)], [n for n in names if not exists(n)]


def service_registry() -> tuple[PackRegistry, str]:
    """The packs the service will offer, and where that answer came from.

    Read from the service's own config (``/var/lib/sonde/.sonde/config.json``)
    when it exists, else from the caller's; without either, the packs detected here.
    """
    for path in (SERVICE_HOME / ".sonde" / CONFIG_FILE_NAME, config_path()):
        config = load_config(
            path, check_access=False
        )  # read, never connected with; ConfigError names the file
        if config is not None:
            described = "enabledPacks" if config.enabled_packs is not None else "the packs detected here"
            return active_packs(load_packs(), config.enabled_packs), f"{described} (config {path})"
    return active_packs(load_packs(), None), "the packs detected here (no agent config)"


def run_command(argv: list[str]) -> int:
    """Run ``argv`` (never a shell), inheriting stdout/stderr; its exit status."""
    return subprocess.run(argv, check=False, timeout=SYSTEMCTL_TIMEOUT_S).returncode


def unit_dir_writable(unit_dir: Path) -> bool:
    return os.access(unit_dir, os.W_OK)


# --- the commands ----------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What `install` would write, and the facts behind it."""

    spec: UnitSpec
    packs_from: str
    missing_groups: tuple[str, ...]

    @property
    def text(self) -> str:
        return render_unit(self.spec)


def plan_unit(registry: PackRegistry | None = None, command: tuple[str, ...] | None = None) -> Plan:
    """The unit `install` would write now, for ``registry`` (default: `service_registry`)."""
    packs_from = "the given packs"
    if registry is None:
        registry, packs_from = service_registry()
    needed = [group for pack in registry.packs.values() for group in pack.groups_needed()]
    present, missing = split_groups(needed)
    spec = UnitSpec(exec_start=command or (*sonde_command(), "start"), supplementary_groups=tuple(present))
    return Plan(spec, packs_from, tuple(missing))


def install_service(
    unit_dir: Path = DEFAULT_UNIT_DIR,
    *,
    now: bool = False,
    plan: Plan | None = None,
    runner: CommandRunner = run_command,
    systemctl: str | None = None,
) -> int:
    """Write the unit and say what to do next; with ``now``, also reload and start it. 0 on success."""
    if not unit_dir.is_dir():
        return refuse(f"{unit_dir} does not exist (is systemd here?); pass --unit-dir DIR to write elsewhere")
    if not unit_dir_writable(unit_dir):
        return refuse(
            f"cannot write to {unit_dir}: run it as root (`sudo sonde service install`) or pass --unit-dir"
        )
    try:
        plan = plan or plan_unit()
    except ConfigError as exc:
        return refuse(str(exc))
    if now and not user_exists(plan.spec.user):
        return refuse(f"user {plan.spec.user} does not exist; create it first: {useradd_command(plan.spec)}")
    if now and not service_config(plan.spec).exists():  # the unit would start, fail and restart forever
        return refuse(
            f"the service has no enrollment yet ({service_config(plan.spec)}); enroll it first: "
            f"{enroll_command(plan.spec)} (it asks for the token); then run this again"
        )
    path = unit_dir / UNIT_NAME
    write_atomically(path, plan.text)
    os.chmod(path, UNIT_FILE_MODE)
    report_install(path, plan)
    if not now:
        return 0
    return run_systemctl(runner, systemctl, [["daemon-reload"], ["enable", "--now", "sonde-agent"]])


def report_install(path: Path, plan: Plan) -> None:
    spec = plan.spec
    print(f"wrote {path}")
    print(f"  runs:   {' '.join(spec.exec_start)}")
    print(f"  as:     user {spec.user}, HOME={spec.home} (its config: {spec.home}/.sonde/config.json)")
    print(f"  groups: {' '.join(spec.supplementary_groups) or '(none)'}, for {plan.packs_from}")
    if plan.missing_groups:
        print(f"  not on this machine, left out: {', '.join(plan.missing_groups)}")
    for group in spec.supplementary_groups:
        if group in ROOT_EQUIVALENT_GROUPS:
            print(
                f"  warning: {root_equivalent_warning(group)} (to leave it out, list the packs you want in enabledPacks without the one needing it)"
            )
    closed = closed_to_others(spec.exec_start[0])
    if closed is not None:
        print(
            f"  warning: user {spec.user} cannot run {spec.exec_start[0]}: {closed} is closed to it, so the "
            "unit would fail to start; install Sonde where every user can read it (e.g. a virtualenv "
            "under /opt/sonde made with a system-wide Python) and install the unit from there"
        )
    print("next:")
    if not user_exists(spec.user):
        print(f"  {useradd_command(spec)}")
    if not service_config(spec).exists():
        print(f"  {enroll_command(spec)}   # asks for the token")
    print("  systemctl daemon-reload && systemctl enable --now sonde-agent")


def useradd_command(spec: UnitSpec) -> str:
    return f"useradd --system --home {spec.home} --create-home --shell /usr/sbin/nologin {spec.user}"


def service_config(spec: UnitSpec) -> Path:
    """The agent config the unit reads (its own HOME's, not the installing user's)."""
    return spec.home / ".sonde" / CONFIG_FILE_NAME


def enroll_command(spec: UnitSpec) -> str:
    """The service user's enrollment; it asks for the token (on stdin: never in argv, which every
    local user can read)."""
    sonde = " ".join(spec.exec_start[:-1])
    return f"sudo -u {spec.user} env HOME={spec.home} {sonde} enroll --hub URL"


def uninstall_service(
    unit_dir: Path = DEFAULT_UNIT_DIR,
    *,
    now: bool = False,
    runner: CommandRunner = run_command,
    systemctl: str | None = None,
) -> int:
    """Remove the unit (with ``now``, stop and disable it first, reload after). 0 on success."""
    path = unit_dir / UNIT_NAME
    if not path.exists():
        print(f"{path} is not installed; nothing to do")
        return 0
    if not unit_dir_writable(unit_dir):
        return refuse(f"cannot remove {path}: run it as root (`sudo sonde service uninstall`)")
    if now and run_systemctl(runner, systemctl, [["disable", "--now", "sonde-agent"]]) != 0:
        return 1
    path.unlink()
    print(f"removed {path}")
    if now:
        return run_systemctl(runner, systemctl, [["daemon-reload"]])
    print("next: systemctl disable --now sonde-agent; systemctl daemon-reload")
    return 0


def service_status(
    unit_dir: Path = DEFAULT_UNIT_DIR,
    *,
    plan: Plan | None = None,
    ask: Callable[[list[str]], str] | None = None,
    systemctl: str | None = None,
) -> int:
    """Say whether the unit is installed, whether it matches what `install` would write now,
    and (with systemctl) whether it is active (``ask`` runs ``systemctl is-active``).
    0 when installed and current, else 1."""
    path = unit_dir / UNIT_NAME
    installed = path.exists()
    current = False
    print(f"unit: {path} ({'installed' if installed else 'not installed'})")
    if installed:
        try:
            plan = plan or plan_unit()
        except ConfigError as exc:
            return refuse(str(exc))
        drift = list(
            difflib.unified_diff(
                path.read_text().splitlines(),
                plan.text.splitlines(),
                "installed",
                "install would write",
                lineterm="",
            )
        )
        current = not drift
        print(
            "content: matches what `sonde service install` would write now" if current else "content: drifted"
        )
        for line in drift:
            print(f"  {line}")
        closed = closed_to_others(plan.spec.exec_start[0])
        if closed is not None:
            current = False
            print(
                f"runnable: no, user {plan.spec.user} cannot run {plan.spec.exec_start[0]}: {closed} is closed to it"
            )
    systemctl = systemctl or shutil.which("systemctl")
    if systemctl is not None:
        print(f"service: {(ask or is_active)([systemctl, 'is-active', 'sonde-agent'])}")
    else:
        print("service: unknown (no systemctl here)")
    return 0 if installed and current else 1


def is_active(argv: list[str]) -> str:
    """The first line ``systemctl is-active`` prints (active, inactive, failed, or why it cannot tell)."""
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S)
    said = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return said[0] if said else f"exit status {done.returncode}"


def run_systemctl(runner: CommandRunner, systemctl: str | None, calls: list[list[str]]) -> int:
    """Run each ``systemctl`` call in order, stopping at the first failure; 1 without systemctl."""
    systemctl = systemctl or shutil.which("systemctl")
    if systemctl is None:
        return refuse("systemctl is not available here; start the agent with `sonde start` instead")
    for args in calls:
        argv = [systemctl, *args]
        print(f"running: {' '.join(argv)}")
        if (status := runner(argv)) != 0:
            return refuse(f"`{' '.join(argv)}` failed with exit status {status}")
    return 0


def refuse(message: str) -> int:
    print(f"sonde service: {message}", file=sys.stderr)
    return 1
