"""The `sonde` commands (cyclopts): parses, then calls into the parts.

Every command imports what it needs inside its body, so `sonde serve --json`
never pays for the hub or the mcp SDK. `sonde.cli.main` reaches this module
only for argv that `sonde.cli_fast` does not take.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from cyclopts import App, Parameter, Token

from sonde import __version__

app = App(
    name="sonde", help="Read-only, structured probes of your machines for AI assistants.", version=__version__
)
packs_app = App(name="packs", help="Inspect the probe packs installed here.")
app.command(packs_app)
hub_app = App(name="hub", help="Run the hub, or manage its keys, tokens and audit log.")
key_app = App(name="key", help="API keys for MCP clients and the REST API.")
token_app = App(name="token", help="Single-use enrollment tokens for new agents.")
audit_app = App(name="audit", help="The hub's hash-chained audit log.")
hub_app.command(key_app)
hub_app.command(token_app)
agent_admin_app = App(name="agent", help="Agents known to the hub.")
hub_app.command(audit_app)
hub_app.command(agent_admin_app)
app.command(hub_app)


def path_or_unset(type_: object, tokens: Sequence[Token]) -> Path | None:
    """A path option's value; an empty one (``SONDE_DATA_DIR=``, a variable set but blank) is as
    if unset, not ``Path("")``: that is the current directory."""
    text = tokens[-1].value
    return Path(text) if text else None


DataDir = Annotated[  # `hub` and `up` say what theirs holds in their docstrings
    Path | None, Parameter(name="--data-dir", env_var="SONDE_DATA_DIR", converter=path_or_unset)
]
AdminDataDir = Annotated[  # the admin commands': the data directory of the hub they work on
    Path | None,
    Parameter(
        name="--data-dir",
        env_var="SONDE_DATA_DIR",
        converter=path_or_unset,
        help="The hub's data directory, where its sonde.db is (default ~/.local/share/sonde).",
    ),
]
# a duration: "-5m" is a value to refuse with a reason (parse_duration), not an unknown option
Duration = Annotated[str, Parameter(allow_leading_hyphen=True)]


def data_dir_or_default(data_dir: Path | None) -> Path:
    from sonde.hub.config import default_data_dir

    return data_dir or default_data_dir()


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


@hub_app.command(name="backup")
def hub_backup(dest: Path, /, *, data_dir: AdminDataDir = None) -> int:
    """Copy the hub's database to DEST while the hub runs: one consistent moment, checked, 0600.

    DEST may be a directory (the copy is named sonde-<UTC time>.db there); an existing file is
    never replaced. Exits 0 with the copy made, 1 when none was, 2 for a DEST that cannot be used.
    The copy holds the hub's signing key: keep it as private as the hub's TLS key.

    Parameters
    ----------
    dest
        The file to write, or a directory to write it in.
    """
    from sonde.hub import admin
    from sonde.hub.backup import hub_backup as backup

    return admin.run_admin(backup, data_dir_or_default(data_dir), dest)


@key_app.command(name="create")
def key_create(
    *,
    name: str,
    role: Literal["admin", "member"] = "member",
    agents: Annotated[tuple[str, ...], Parameter(name="--agents", negative_iterable="")] = (),
    probes: Annotated[tuple[str, ...], Parameter(name="--probes", negative_iterable="")] = (),
    data_dir: AdminDataDir = None,
) -> int:
    """Create an API key; the secret alone goes to stdout.

    Parameters
    ----------
    name
        A label for the key (who or what uses it).
    role
        admin (everything, including keys and tokens) or member (probes within its policy).
    agents
        Agent name globs or #tags this key may reach (default: all).
    probes
        Probe name globs this key may run (default: all).
    """
    from sonde.hub import admin

    return admin.run_admin(admin.key_create, data_dir_or_default(data_dir), name, role, agents, probes)


@key_app.command(name="list")
def key_list(*, json: Annotated[bool, Parameter(negative="")] = False, data_dir: AdminDataDir = None) -> int:
    """List API keys (never their secrets)."""
    from sonde.hub import admin

    return admin.run_admin(admin.key_list, data_dir_or_default(data_dir), json)


@key_app.command(name="revoke")
def key_revoke(key_id: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Revoke an API key, by its id or by the key itself (never shown or recorded)."""
    from sonde.hub import admin

    return admin.run_admin(admin.key_revoke, data_dir_or_default(data_dir), key_id)


@token_app.command(name="create")
def token_create(*, ttl: Duration = "15m", name: str | None = None, data_dir: AdminDataDir = None) -> int:
    """Create a single-use enrollment token; the token alone goes to stdout.

    Parameters
    ----------
    ttl
        How long it is valid: 90s, 15m, 2h, 1d (60 s to 7 days).
    name
        Reserve the token for this agent name (also allows re-enrolling that name).
    """
    from sonde.hub import admin

    return admin.run_admin(admin.token_create, data_dir_or_default(data_dir), ttl, name)


@token_app.command(name="list")
def token_list(
    *,
    show_all: Annotated[bool, Parameter(name="--all", negative="")] = False,
    json: Annotated[bool, Parameter(negative="")] = False,
    data_dir: AdminDataDir = None,
) -> int:
    """List the enrollment tokens that can still enroll an agent (never their secrets).

    Parameters
    ----------
    show_all
        Also list used, expired and revoked tokens, with their state.
    json
        Print JSON instead of a table.
    """
    from sonde.hub import admin

    return admin.run_admin(admin.token_list, data_dir_or_default(data_dir), show_all, json)


@token_app.command(name="revoke")
def token_revoke(token: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Revoke an enrollment token, by its id or by the token itself, so it can no longer enroll an agent."""
    from sonde.hub import admin

    return admin.run_admin(admin.token_revoke, data_dir_or_default(data_dir), token)


@agent_admin_app.command(name="accept")
def agent_accept(name: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Accept an agent's changed attestation (it is held as degraded until then)."""
    from sonde.hub import admin

    return admin.run_admin(admin.agent_accept, data_dir_or_default(data_dir), name)


@agent_admin_app.command(name="remove")
def agent_remove(name: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Remove an agent, by name or id: a running hub cuts it off within seconds and refuses it after."""
    from sonde.hub import admin

    return admin.run_admin(admin.agent_remove, data_dir_or_default(data_dir), name)


@agent_admin_app.command(name="list")
def agent_list(
    *, json: Annotated[bool, Parameter(negative="")] = False, data_dir: AdminDataDir = None
) -> int:
    """List the agents enrolled with the hub (the status is the last one the hub recorded).

    Parameters
    ----------
    json
        Print JSON instead of a table.
    """
    from sonde.hub import admin

    return admin.run_admin(admin.agent_list, data_dir_or_default(data_dir), json)


@audit_app.command(name="verify")
def audit_verify(*, data_dir: AdminDataDir = None) -> int:
    """Check the audit log's hash chain, only reading the database (a read-only copy will do).

    Exits 0 when it is intact, 1 when a row was edited or deleted, 2 for a usage error (an
    unknown option, say), 3 when it could not be checked (no hub database there, unreadable,
    or from a newer Sonde).
    """
    from sonde.hub import admin

    return admin.run_admin(admin.audit_verify, data_dir_or_default(data_dir))


@audit_app.command(name="prune")
def audit_prune(*, older_than: Duration, data_dir: AdminDataDir = None) -> int:
    """Delete the audit rows older than a given age from the start of the log; the rest still verifies.

    A running hub goes on serving meanwhile: rows are deleted in short batches.

    Parameters
    ----------
    older_than
        Age of the rows to delete: 90d, 2160h (at least 1d). A broken chain is never pruned.
    """
    from sonde.hub import admin

    return admin.run_admin(admin.audit_prune, data_dir_or_default(data_dir), older_than)


@app.command
def enroll(
    *,
    hub: Annotated[str, Parameter(env_var="SONDE_HUB_URL")],
    token: str,
    name: str | None = None,
    replace: Annotated[bool, Parameter(negative="")] = False,
) -> int:
    """Enroll this machine with a hub (once), saving its identity in ~/.sonde/config.json.

    Parameters
    ----------
    hub
        The hub's URL, e.g. https://hub.example:3000 (its MCP URL, ending in /mcp, will do).
    token
        A single-use enrollment token from `sonde hub token create`.
    name
        The agent's name (default: this machine's hostname).
    replace
        Replace this machine's existing enrollment with a new identity.
    """
    from sonde.agent.enroll import EnrollError
    from sonde.agent.enroll import enroll as do_enroll

    def warn(text: str) -> None:
        print(f"sonde enroll: warning: {text}", file=sys.stderr)

    try:
        config = do_enroll(hub, token, name, replace=replace, warn=warn)
    except EnrollError as exc:
        print(f"sonde enroll: {exc}", file=sys.stderr)
        return 1
    print(f"enrolled as {config.name} (agent id {config.agent_id}) with {config.hub_url}", file=sys.stderr)
    print("start the agent with `sonde start` (or `sonde service install` for systemd)", file=sys.stderr)
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
) -> int:
    """Quick start: a hub plus an agent for this machine, enrolled automatically.

    Prints the MCP URL, an API key and the `claude mcp add` line.

    Parameters
    ----------
    bind
        HOST:PORT for the hub (port 0 picks a free port).
    data_dir
        Where the hub's store and the local agent's identity live.
    allow_root
        Let the local agent run as root.
    log_level
        DEBUG, INFO, WARNING or ERROR.
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
        log_format="text",
        log_level=log_level,
        allowed_hosts=(),
    )
    if isinstance(config, str):
        print(f"sonde up: {config}", file=sys.stderr)
        return 2
    return quick_start(config, allow_root)


@app.command
def login(*, hub: str, api_key: str, check: bool = True) -> int:
    """Store a hub URL and API key in ~/.sonde/config.json for `sonde mcp-bridge`.

    Parameters
    ----------
    hub
        The hub's URL, e.g. https://hub.example:3000.
    api_key
        An API key from `sonde hub key create` (the agent's enrollment is not an MCP key).
    check
        Try the key with GET /api/v1/agents first; a key the hub refuses is not saved.
    """
    from sonde.bridge.login import login as do_login

    return do_login(hub, api_key, check=check)


@app.command(name="mcp-bridge")
def mcp_bridge(
    *,
    hub: str | None = None,
    api_key: str | None = None,
    log_level: Annotated[str, Parameter(env_var="SONDE_LOG_LEVEL")] = "INFO",
) -> int:
    """Serve the hub's MCP tools on stdin/stdout, for stdio MCP clients such as Claude Code.

    The hub URL and API key come from `sonde login` (~/.sonde/config.json);
    --hub, --api-key, SONDE_HUB_URL and SONDE_API_KEY override them.
    stdout carries only JSON-RPC; diagnostics go to stderr.

    Parameters
    ----------
    hub
        The hub's URL (default: $SONDE_HUB_URL, then hubUrl in the config).
    api_key
        The API key (default: $SONDE_API_KEY, then apiKey in the config).
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
