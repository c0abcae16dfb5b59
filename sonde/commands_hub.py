"""The `sonde hub` command tree (cyclopts) and its admin sub-commands: key, token, agent, audit, backup,
restore.

Each admin command works on a hub's data directory through `sonde.hub.admin` and its action
modules, imported inside its body like every command's. `sonde.commands` adds the tree to the
`sonde` app and gives `hub_app` its default (running the hub); the ``--data-dir`` helpers here
(`path_or_unset`, `data_dir_or_default`) serve `sonde hub` and `sonde up` there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from cyclopts import App, Parameter, Token

hub_app = App(
    name="hub", help="Run the hub, or manage its keys, tokens, agents, audit log, backups and restores."
)
key_app = App(name="key", help="API keys for MCP clients and the REST API.")
token_app = App(name="token", help="Single-use enrollment tokens for new agents.")
audit_app = App(name="audit", help="The hub's hash-chained audit log.")
hub_app.command(key_app)
hub_app.command(token_app)
agent_admin_app = App(name="agent", help="Agents known to the hub.")
hub_app.command(audit_app)
hub_app.command(agent_admin_app)


def path_or_unset(type_: object, tokens: Sequence[Token]) -> Path | None:
    """A path option's value; an empty one (``SONDE_DATA_DIR=``, a variable set but blank) is as
    if unset, not ``Path("")``: that is the current directory."""
    text = tokens[-1].value
    return Path(text) if text else None


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


@hub_app.command(name="backup")
def hub_backup(dest: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Copy the hub's database to DEST while the hub runs: one consistent moment, checked, 0600.

    DEST may be a directory (the copy is named `sonde-<UTC time>.db` there, a name no other copy
    has); one written with a trailing slash is made (0700) when missing. An existing file is never
    replaced. Exits 0 with the copy made, 1 when none was (DEST
    exists, say), 2 for a DEST that cannot be used (in no directory). The copy holds the hub's
    signing key: keep it as private as the hub's TLS key.

    Parameters
    ----------
    dest
        The file to write, or a directory to write it in (a trailing slash: a directory).
    """
    from sonde.hub import admin
    from sonde.hub.backup import hub_backup as backup

    return admin.run_admin(backup, data_dir_or_default(data_dir), dest)


@hub_app.command(name="restore")
def hub_restore(
    backup: Path,
    /,
    *,
    data_dir: AdminDataDir = None,
    other_hub: Annotated[bool, Parameter(negative="")] = False,
) -> int:
    """Put BACKUP (a file `sonde hub backup` wrote) in the place of the hub's database; the hub stopped.

    Refused while a hub runs on the data directory. The backup is copied and checked first; the
    files it replaces (sonde.db, its -wal and -shm) are kept beside it as
    `sonde.db.replaced-<UTC time>`, never deleted. Says what the backup takes back: keys and agents
    removed since it was taken that it knows again, those made since that it lacks. Another
    hub's backup (another signing key than hub-key.pub names) is refused unless --other-hub.
    Exits 0 with the backup in place, 1 when nothing was changed, 2 for a BACKUP that is no file.

    Parameters
    ----------
    backup
        The backup file to restore.
    other_hub
        Restore another hub's backup: the agents enrolled with this directory's hub must then
        enroll again (hub-key.pub is made to name the backup's signing key).
    """
    from sonde.hub import admin
    from sonde.hub.restore import hub_restore as restore

    return admin.run_admin(restore, data_dir_or_default(data_dir), backup, other_hub)


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
    from sonde.hub import admin, admin_credentials

    return admin.run_admin(
        admin_credentials.key_create, data_dir_or_default(data_dir), name, role, agents, probes
    )


@key_app.command(name="list")
def key_list(*, json: Annotated[bool, Parameter(negative="")] = False, data_dir: AdminDataDir = None) -> int:
    """List API keys (never their secrets).

    Parameters
    ----------
    json
        Print JSON instead of a table.
    """
    from sonde.hub import admin, admin_credentials

    return admin.run_admin(admin_credentials.key_list, data_dir_or_default(data_dir), json)


@key_app.command(name="revoke")
def key_revoke(key_id: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Revoke an API key, by its id, its name (when one active key has it) or the key itself
    (never shown or recorded).

    Parameters
    ----------
    key_id
        The key's id or name (as `sonde hub key list` shows them), or the key itself (sonde_...).
    """
    from sonde.hub import admin, admin_credentials

    return admin.run_admin(admin_credentials.key_revoke, data_dir_or_default(data_dir), key_id)


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
    from sonde.hub import admin, admin_credentials

    return admin.run_admin(admin_credentials.token_create, data_dir_or_default(data_dir), ttl, name)


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
    from sonde.hub import admin, admin_credentials

    return admin.run_admin(admin_credentials.token_list, data_dir_or_default(data_dir), show_all, json)


@token_app.command(name="revoke")
def token_revoke(token: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Revoke an enrollment token, by its id or by the token itself, so it can no longer enroll an agent.

    Parameters
    ----------
    token
        The token's id (as `sonde hub token list` shows it), or the token itself (enr_...).
    """
    from sonde.hub import admin, admin_credentials

    return admin.run_admin(admin_credentials.token_revoke, data_dir_or_default(data_dir), token)


@agent_admin_app.command(name="accept", usage="Usage: sonde hub agent accept [OPTIONS] (NAME | --all)")
def agent_accept(
    name: str | None = None,
    /,
    *,
    every_held: Annotated[bool, Parameter(name="--all", negative="")] = False,
    data_dir: AdminDataDir = None,
) -> int:
    """Accept an agent's changed attestation (it is held as degraded until then).

    Exits 1 when none waits: there is nothing to accept.

    Parameters
    ----------
    name
        The agent's name or id.
    every_held
        Accept every held agent's (a fleet you installed another build on), each listed with what
        changed, and on the audit log.
    """
    from sonde.hub import admin, admin_agents

    return admin.run_admin(admin_agents.agent_accept, data_dir_or_default(data_dir), name, every_held)


@agent_admin_app.command(name="remove")
def agent_remove(name: str, /, *, data_dir: AdminDataDir = None) -> int:
    """Remove an agent, by name or id: a running hub cuts it off within seconds and refuses it after.

    Parameters
    ----------
    name
        The agent's name or id.
    """
    from sonde.hub import admin, admin_agents

    return admin.run_admin(admin_agents.agent_remove, data_dir_or_default(data_dir), name)


@agent_admin_app.command(name="tag")
def agent_tag(
    name: str,
    /,
    *tags: Annotated[str, Parameter(allow_leading_hyphen=True)],  # "-x": a tag to refuse, with why
    add: Annotated[tuple[str, ...], Parameter(name="--add", negative_iterable="")] = (),
    remove: Annotated[tuple[str, ...], Parameter(name="--remove", negative_iterable="")] = (),
    clear: Annotated[bool, Parameter(negative="")] = False,
    data_dir: AdminDataDir = None,
) -> int:
    """Set an agent's tags (replacing them), or add, remove or clear some, as PUT /api/v1/agents/{id}/tags does.

    A leading # is dropped and a tag is kept once, whatever its case (the first spelling stays).
    A running hub uses the new tags within a few seconds (key policies, tag filters).
    Exits 1 when no agent has that name, or when --remove names a tag it does not have.

    Parameters
    ----------
    name
        The agent's name or id.
    tags
        The tags it has from now on (replacing all it had).
    add
        A tag to give it, keeping the others; repeat for more.
    remove
        A tag to take from it, keeping the others; repeat for more.
    clear
        Take every tag from it.
    """
    from sonde.hub import admin, admin_agents, admin_tags

    change = admin_tags.TagChange(set_to=tags, add=add, remove=remove, clear=clear)
    return admin.run_admin(admin_agents.agent_tag, data_dir_or_default(data_dir), name, change)


@agent_admin_app.command(name="list")
def agent_list(
    *,
    status: Literal["online", "offline", "degraded"] | None = None,
    json: Annotated[bool, Parameter(negative="")] = False,
    data_dir: AdminDataDir = None,
) -> int:
    """List the agents enrolled with the hub (the status the hub last recorded; none online when no hub runs).

    The count of every agent, by status, goes to stderr.

    Parameters
    ----------
    status
        Only agents in this status (offline: to see what is down).
    json
        Print JSON instead of a table.
    """
    from sonde.hub import admin, admin_agents

    return admin.run_admin(admin_agents.agent_list, data_dir_or_default(data_dir), json, status)


@audit_app.command(name="verify")
def audit_verify(*, data_dir: AdminDataDir = None) -> int:
    """Check the audit log's hash chain, only reading the database (a read-only copy will do).

    Exits 0 when it is intact, 1 when a row was edited or deleted, 2 for a usage error (an
    unknown option, say), 3 when it could not be checked (no hub database there, unreadable,
    or from a newer Sonde).
    """
    from sonde.hub import admin, admin_audit

    return admin.run_admin(admin_audit.audit_verify, data_dir_or_default(data_dir))


@audit_app.command(name="prune")
def audit_prune(*, older_than: Duration, data_dir: AdminDataDir = None) -> int:
    """Delete the audit rows older than a given age from the start of the log; the rest still verifies.

    A running hub goes on serving meanwhile: rows are deleted in short batches.

    Parameters
    ----------
    older_than
        Age of the rows to delete: 90d, 2160h (at least 1d). A broken chain is never pruned.
    """
    from sonde.hub import admin, admin_audit

    return admin.run_admin(admin_audit.audit_prune, data_dir_or_default(data_dir), older_than)


@audit_app.command(name="list")
def audit_list(
    *,
    agent: str | None = None,
    key: str | None = None,
    action: str | None = None,
    since: Annotated[str | None, Parameter(allow_leading_hyphen=True)] = None,
    until: Annotated[str | None, Parameter(allow_leading_hyphen=True)] = None,
    limit: int = 100,
    json: Annotated[bool, Parameter(negative="")] = False,
    data_dir: AdminDataDir = None,
) -> int:
    """List audit entries, newest first, with the filters of GET /api/v1/audit; only reads the database.

    A running hub goes on writing meanwhile, and a read-only backup copy will do.

    Parameters
    ----------
    agent
        Only entries with this target (an agent's name, mostly).
    key
        Only entries by this actor: an API key's id or name, or cli, hub, agent.
    action
        Only entries whose action starts with this (mcp.call., rest.agent., cli.).
    since
        Only entries at or after this: a duration ago (90s, 15m, 2h, 7d) or a time
        (2026-01-31T09:15:00Z; without Z, this machine's local time).
    until
        Only entries before this, given as --since is.
    limit
        At most this many, the newest (1 to 1000).
    json
        Print JSON ({"entries": [...], "truncated": ...}, as GET /api/v1/audit answers) instead of a table.
    """
    from sonde.hub import admin, admin_audit_list

    query = admin_audit_list.AuditListing(
        agent=agent, key=key, action=action, since=since, until=until, limit=limit
    )
    return admin.run_admin(admin_audit_list.audit_list, data_dir_or_default(data_dir), query, json)
