"""The `sonde` commands (cyclopts): parses, then calls into the parts.

Every command imports what it needs inside its body, so `sonde serve --json`
never pays for the hub or the mcp SDK. `sonde.cli.main` reaches this module
only for argv that `sonde.cli_fast` does not take. Here: the `sonde` app, the
agent and local commands, and running the hub (`sonde hub`'s default); the
hub's admin sub-commands are in `sonde.commands_hub`, whose tree this adds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

from cyclopts import App, Parameter

from sonde import __version__
from sonde.commands_hub import data_dir_or_default, hub_app, path_or_unset
from sonde.commands_usage import worded_cli_error

app = App(
    name="sonde",
    help="Read-only, structured probes of your machines for AI assistants.",
    version=__version__,
    error_formatter=worded_cli_error,  # extra words said as such (`sonde.commands_usage`)
)
packs_app = App(name="packs", help="Inspect the probe packs installed here.")
app.command(packs_app)
app.command(hub_app)


def run_app(argv: list[str]) -> int:
    """Parse ``argv`` and run its command; its exit code (0 when it returned none), or 2 for a
    usage mistake of `sonde hub` that cyclopts would say obscurely (`sonde.commands_usage`)."""
    from sonde.commands_usage import hub_usage_mistake

    mistake = hub_usage_mistake(argv, [name for name in hub_app if not name.startswith("-")])
    if mistake is not None:
        print(f"sonde hub: {mistake}", file=sys.stderr)
        return 2
    result = app(argv, result_action="return_value")
    return result if isinstance(result, int) else 0


DataDir = Annotated[  # `hub` and `up` say what theirs holds in their docstrings
    Path | None, Parameter(name="--data-dir", env_var="SONDE_DATA_DIR", converter=path_or_unset)
]


@app.command
def serve(
    *,
    json: Annotated[bool, Parameter(negative="")] = False,
    manifest: Path | None = None,
) -> int:
    """Serve this machine's probes as tools over the JSON-line protocol on stdin/stdout.

    Parameters
    ----------
    json
        Speak the JSON-line protocol (the only mode there is; required).
    manifest
        The manifest naming the packs and probes to expose
        (default: ./sondage.manifest.json when it exists, else every detected pack).
    """
    if not json:
        print("sonde serve: only the JSON-line mode exists; run `sonde serve --json`", file=sys.stderr)
        return 2
    from sonde.agent.serve import run_serve

    return run_serve(manifest)


@packs_app.command(name="list")
def packs_list(*, json: Annotated[bool, Parameter(negative="")] = False) -> int:
    """List installed packs: version, whether detected on this machine, and their probes.

    Parameters
    ----------
    json
        Print JSON instead of a table.
    """
    from sonde.agent.packs_report import print_packs

    return print_packs(as_json=json)


@hub_app.default
def hub(
    *,
    bind: Annotated[str, Parameter(env_var="SONDE_BIND")] = "127.0.0.1:3000",
    data_dir: DataDir = None,
    tls_cert: Annotated[Path | None, Parameter(env_var="SONDE_TLS_CERT", converter=path_or_unset)] = None,
    tls_key: Annotated[Path | None, Parameter(env_var="SONDE_TLS_KEY", converter=path_or_unset)] = None,
    heartbeat_interval: Annotated[float, Parameter(env_var="SONDE_HEARTBEAT_INTERVAL")] = 30.0,
    probe_timeout: Annotated[float, Parameter(env_var="SONDE_PROBE_TIMEOUT")] = 30.0,
    log_format: Annotated[Literal["text", "json"], Parameter(env_var="SONDE_LOG_FORMAT")] = "text",
    log_level: Annotated[str, Parameter(env_var="SONDE_LOG_LEVEL")] = "INFO",
    allowed_host: Annotated[
        tuple[str, ...], Parameter(env_var="SONDE_ALLOWED_HOSTS", negative_iterable="")
    ] = (),
    audit_keep: Annotated[
        str | None, Parameter(env_var="SONDE_AUDIT_KEEP", allow_leading_hyphen=True)
    ] = None,
    trusted_proxy: Annotated[
        tuple[str, ...], Parameter(env_var="SONDE_TRUSTED_PROXIES", negative_iterable="")
    ] = (),
) -> int:
    """Run the hub: MCP at /mcp, REST at /api/v1, agents at /ws/agent.

    Parameters
    ----------
    bind
        HOST:PORT to listen on; port 0 picks a free port (the URL is printed).
    data_dir
        Where the SQLite store lives (default ~/.local/share/sonde).
    tls_cert
        TLS certificate file (PEM); serves HTTPS and WSS when given with --tls-key.
    tls_key
        TLS private key file (PEM).
    heartbeat_interval
        Seconds between agent heartbeats; an agent silent for two of them plus 5 s is offline.
    probe_timeout
        Seconds a probe may take before the caller gets a timeout.
    log_format
        text or json (one object per line), on stderr.
    log_level
        DEBUG, INFO, WARNING or ERROR.
    allowed_host
        Extra Host header values /mcp accepts (e.g. the name behind your proxy); repeat it, or
        separate names with commas or spaces (SONDE_ALLOWED_HOSTS="a.example,b.example").
    audit_keep
        Keep this much of the audit log (e.g. 180d, at least 1d): the hub prunes older rows at
        start and every hour, as `sonde hub audit prune` does. Default: keep everything.
    trusted_proxy
        The address (or network, 10.0.0.0/8) of a reverse proxy in front of the hub whose
        X-Forwarded-For names the client, for the audit log and the failed-login limit; repeat it,
        or separate them with commas or spaces. Default: none, the header is ignored.
    """
    from sonde.hub.run import build_config, run_hub

    config = build_config(
        bind=bind,
        data_dir=data_dir_or_default(data_dir),
        tls_cert=tls_cert,
        tls_key=tls_key,
        heartbeat_interval=heartbeat_interval,
        probe_timeout=probe_timeout,
        log_format=log_format,
        log_level=log_level,
        allowed_hosts=allowed_host,
        audit_keep=audit_keep or None,
        trusted_proxies=trusted_proxy,
    )
    if isinstance(config, str):
        print(f"sonde hub: {config}", file=sys.stderr)
        return 2
    return run_hub(config)


@app.command
def enroll(
    *,
    hub: Annotated[str, Parameter(env_var="SONDE_HUB_URL")],
    token: str | None = None,
    name: str | None = None,
    replace: Annotated[bool, Parameter(negative="")] = False,
) -> int:
    """Enroll this machine with a hub (once), saving its identity in ~/.sonde/config.json.

    The token comes from $SONDE_ENROLL_TOKEN, else from stdin: asked for (hidden) on a
    terminal, else its first line (echo "$TOKEN" | sonde enroll --hub URL).

    Parameters
    ----------
    hub
        The hub's URL, e.g. https://hub.example:3000 (its MCP URL, ending in /mcp, will do).
    token
        A single-use enrollment token from `sonde hub token create`. Avoid: every local user
        can read it in the command line while enroll runs (use SONDE_ENROLL_TOKEN or stdin).
    name
        The agent's name (default: this machine's hostname).
    replace
        Replace this machine's existing enrollment with a new identity.
    """
    from sonde.agent.enroll import EnrollError, check_name, normalize_hub_url
    from sonde.agent.enroll import enroll as do_enroll
    from sonde.interrupts import stop_taking_interrupts
    from sonde.secret_input import NoSecretGiven, given_secret

    def warn(text: str) -> None:
        print(f"sonde enroll: warning: {text}", file=sys.stderr)

    from sonde.agent.identity_lock import enrolled_as, next_step

    before = enrolled_as()
    try:  # once the hub said yes, Ctrl-C waits: the identity is saved and said, exit 0
        normalize_hub_url(hub)  # a malformed URL or name is said before a token is read or asked for
        check_name(name)
        token = given_secret("--token", token, "enrollment token", "SONDE_ENROLL_TOKEN", warn)
        config = do_enroll(hub, token, name, replace=replace, warn=warn, enrolled=stop_taking_interrupts)
    except NoSecretGiven as exc:
        print(f"sonde enroll: {exc}", file=sys.stderr)
        return 2
    except EnrollError as exc:
        print(f"sonde enroll: {exc}", file=sys.stderr)
        return 2 if exc.malformed_argument else 1
    print(f"enrolled as {config.name} (agent id {config.agent_id}) with {config.hub_url}", file=sys.stderr)
    print(next_step((config.name, config.hub_url), before), file=sys.stderr)
    return 0


@app.command
def start(
    *,
    allow_root: Annotated[bool, Parameter(negative="")] = False,
    log_level: Annotated[str, Parameter(env_var="SONDE_LOG_LEVEL")] = "INFO",
) -> int:
    """Run the agent: connect out to the hub and answer its probes until stopped.

    Parameters
    ----------
    allow_root
        Run even as root (not recommended: the agent is meant to run as user `sonde`).
    log_level
        DEBUG, INFO, WARNING or ERROR.
    """
    from sonde.cli_fast import run_start

    return run_start(allow_root=allow_root, log_level=log_level)


@app.command
def up(
    *,
    bind: Annotated[str, Parameter(env_var="SONDE_BIND")] = "127.0.0.1:3000",
    data_dir: DataDir = None,
    allow_root: Annotated[bool, Parameter(negative="")] = False,
    log_level: Annotated[str, Parameter(env_var="SONDE_LOG_LEVEL")] = "WARNING",
    log_format: Annotated[Literal["text", "json"], Parameter(env_var="SONDE_LOG_FORMAT")] = "text",
) -> int:
    """Quick start: a hub plus an agent for this machine, enrolled automatically.

    Prints the MCP URL, an API key and the `claude mcp add` line.

    Parameters
    ----------
    bind
        HOST:PORT for the hub (port 0 picks a free port).
    data_dir
        Where the hub's store and the local agent's identity live (default ~/.local/share/sonde).
    allow_root
        Let the local agent run as root.
    log_level
        DEBUG, INFO, WARNING or ERROR.
    log_format
        text or json (one object per line); with json the key is not printed but kept in
        quickstart.json.
    """
    from sonde.hub.run import build_config
    from sonde.quickstart import up as quick_start

    config = build_config(
        bind=bind,
        data_dir=data_dir_or_default(data_dir),
        tls_cert=None,
        tls_key=None,
        heartbeat_interval=30.0,
        probe_timeout=30.0,
        log_format=log_format,
        log_level=log_level,
        allowed_hosts=(),
    )
    if isinstance(config, str):
        print(f"sonde up: {config}", file=sys.stderr)
        return 2
    return quick_start(config, allow_root)


@app.command
def login(*, hub: str, api_key: str | None = None, check: bool = True) -> int:
    """Store a hub URL and API key in ~/.sonde/config.json for `sonde mcp-bridge`.

    The key comes from $SONDE_API_KEY, else from stdin: asked for (hidden) on a terminal,
    else its first line (echo "$KEY" | sonde login --hub URL).

    Parameters
    ----------
    hub
        The hub's URL, e.g. https://hub.example:3000.
    api_key
        An API key from `sonde hub key create` (the agent's enrollment is not an MCP key). Avoid:
        every local user can read it in the command line while login runs (use SONDE_API_KEY or stdin).
    check
        Try the key with GET /api/v1/agents first; a key the hub does not accept is not saved.
    """
    from sonde.bridge.login import login as do_login
    from sonde.bridge.login import say
    from sonde.bridge.settings import KEY_ENV
    from sonde.hub_url import normalize_hub_url
    from sonde.secret_input import given_secret

    try:  # a malformed URL is said before a key is read or asked for
        normalize_hub_url(hub)
        key = given_secret("--api-key", api_key, "API key", KEY_ENV, lambda text: say(f"warning: {text}"))
    except ValueError as exc:  # a malformed URL, or no key given at all
        say(str(exc))
        return 2
    return do_login(hub, key, check=check)


@app.command(name="mcp-bridge")
def mcp_bridge(
    *,
    hub: str | None = None,
    api_key: str | None = None,
    log_level: Annotated[str, Parameter(env_var="SONDE_LOG_LEVEL")] = "INFO",
) -> int:
    """Serve the hub's MCP tools on stdin/stdout, for stdio MCP clients such as Claude Code.

    The hub URL and API key come from `sonde login` (~/.sonde/config.json);
    SONDE_HUB_URL and SONDE_API_KEY (set them in the MCP client's env config), --hub and
    --api-key override them.
    stdout carries only JSON-RPC; diagnostics go to stderr.

    Parameters
    ----------
    hub
        The hub's URL (default: $SONDE_HUB_URL, then hubUrl in the config).
    api_key
        The API key (default: $SONDE_API_KEY, then apiKey in the config). Avoid: every local
        user can read it in the command line while the bridge runs (warned, on stderr).
    log_level
        DEBUG, INFO, WARNING or ERROR (on stderr).
    """
    from sonde.bridge.run import run_mcp_bridge

    return run_mcp_bridge(hub, api_key, log_level)


service_app = App(name="service", help="Run the agent under systemd as user `sonde`, hardened.")
app.command(service_app)
UnitDir = Annotated[Path, Parameter(name="--unit-dir")]


@service_app.command(name="install")
def service_install(
    *, unit_dir: UnitDir = Path("/etc/systemd/system"), now: Annotated[bool, Parameter(negative="")] = False
) -> int:
    """Write sonde-agent.service (runs `sonde start` as user sonde) and print the next steps.

    Parameters
    ----------
    unit_dir
        Where to write the unit (default /etc/systemd/system).
    now
        Also run `systemctl daemon-reload` and `systemctl enable --now sonde-agent`.
    """
    from sonde.agent.service import install_service

    return install_service(unit_dir, now=now)


@service_app.command(name="uninstall")
def service_uninstall(
    *, unit_dir: UnitDir = Path("/etc/systemd/system"), now: Annotated[bool, Parameter(negative="")] = False
) -> int:
    """Remove sonde-agent.service.

    Parameters
    ----------
    unit_dir
        Where the unit is (default /etc/systemd/system).
    now
        Stop and disable the service first, and reload systemd after.
    """
    from sonde.agent.service import uninstall_service

    return uninstall_service(unit_dir, now=now)


@service_app.command(name="status")
def service_status(*, unit_dir: UnitDir = Path("/etc/systemd/system")) -> int:
    """Is the unit installed, does it match what install would write now, is it active? Exit 1 if not current.

    Parameters
    ----------
    unit_dir
        Where the unit is (default /etc/systemd/system).
    """
    from sonde.agent.service import service_status as report

    return report(unit_dir)
