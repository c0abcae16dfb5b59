"""`query_logs`: root-cause digging in an agent's logs, or in the hub's own audit trail.

Each source is one probe of one pack (the audit trail is read on the hub), and each
supports only the filters its probe has: a filter a source cannot apply is refused
when the arguments are validated, never silently dropped (`FILTER_SOURCES`).
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, Field, JsonValue, WithJsonSchema, model_validator

from sonde.hub.agent_records import AgentRecord
from sonde.hub.audit_query import query_audit_page
from sonde.hub.durations import parse_duration
from sonde.hub.errors import HubError, not_found
from sonde.hub.probing import probe_deadline_s, resolve_agent, run_probe_for
from sonde.hub.tools.base import (
    AGENT_NAME_OR_ID,
    AgentWait,
    DurationMs,
    ToolCall,
    ToolInput,
    ToolOutput,
    ToolSpec,
    within_budget,
)
from sonde.hub.tools.views import iso
from sonde.packs.docker.stats import CONTAINER_PATTERN
from sonde.packs.systemd.timespec import LAST_TIME_S
from sonde.protocol.names import worded

if TYPE_CHECKING:
    from sonde.hub.core import Hub

SAFE_TEXT = worded(
    r"^[^\x00-\x1f]{1,200}$", "1 to 200 characters, none a control character (a newline, a tab)"
)
SINCE_PATTERN = r"^(\d{1,5}[smhd]|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?Z?)$"
# journalctl (the systemd source) refuses a time before 1970 (`sonde.packs.systemd.timespec`):
# '-21000d' is refused today, so a duration stops well short of that, and an ISO time after it
MAX_SINCE_DAYS = 10_000  # about 27 years
SINCE_FORMS = (
    f"a duration with s, m, h or d of at most 5 digits and {MAX_SINCE_DAYS}d ('90s', '15m', '2h', '1d'), "
    "or an ISO time 'YYYY-MM-DDTHH:MM[:SS]' with an optional Z ('2026-11-25T14:30:00Z'), from 1970-01-01 "
    "to 9999-12-30"
)
SOURCE_PACKS = {"systemd": "systemd", "docker": "docker", "nginx": "nginx", "system": "system"}
FILTER_SOURCES = {  # each source-specific argument and the sources that use it
    "since": ("systemd", "audit"),
    "grep": ("systemd", "system", "audit"),
    "unit": ("systemd",),
    "priority": ("systemd",),
    "container": ("docker",),
    "kind": ("nginx",),
    "path": ("system", "nginx"),
}


def is_duration(since: str) -> bool:
    return since[-1] in "smhd" and since[:-1].isdigit()


def iso_epoch(text: str) -> float:
    """Unix time of an ISO time ('Z': UTC, none: local time); ValueError or OverflowError if not one."""
    return datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T")).timestamp()


def is_since(text: str) -> bool:
    """Whether ``text`` is a `since` this tool can use: the pattern, and a real date and time."""
    if re.fullmatch(SINCE_PATTERN, text) is None:
        return False
    if is_duration(text):
        return parse_duration(text) <= MAX_SINCE_DAYS * 86400
    try:
        epoch = iso_epoch(text)
    except (ValueError, OverflowError, OSError):  # month 13, hour 99, a year out of the clock's reach
        return False
    return 0 <= epoch <= LAST_TIME_S


def checked_since(since: str) -> str:
    """``since`` if it is one of `SINCE_FORMS` and a real date and time; else ValueError saying so."""
    if not is_since(since):
        # what is wrong first: a long message is cut when said back (`describe_params_error`)
        raise ValueError(f"since {since!r} is no real date and time in reach: since must be {SINCE_FORMS}")
    return since


# Checked here, not by a pattern constraint alone: '2026-13-45T99:99' fits any pattern short of a calendar.
Since = Annotated[
    str, AfterValidator(checked_since), WithJsonSchema({"type": "string", "pattern": SINCE_PATTERN})
]


class QueryLogsInput(ToolInput):
    source: Literal["systemd", "docker", "nginx", "system", "audit"] = Field(
        description="systemd: the journal (unit, priority, since, grep); docker: a container's logs "
        "(container; no since, no grep); nginx: the access or error log (kind, path; no since, no grep); "
        "system: a log file under the agent's allowed paths (path, grep; no since); audit: the hub's own "
        "audit trail (agent, since, grep)."
    )
    agent: str | None = Field(
        default=None,
        pattern=AGENT_NAME_OR_ID,
        description="The agent whose logs to read (required except for audit, where it keeps the entries "
        "targeting that agent).",
    )
    lines: int = Field(default=100, ge=1, le=1000, description="At most this many lines (the newest).")
    since: Since | None = Field(
        default=None,
        description="systemd and audit only: only entries newer than this, "
        f"{SINCE_FORMS}. With Z an ISO time is UTC; without, it is the agent's local time for "
        "systemd and the hub's for audit.",
    )
    unit: str | None = Field(
        default=None,
        pattern=worded(r"^[A-Za-z0-9@:._-]{1,128}$", "1 to 128 letters, digits, '@', ':', '.', '_' or '-'"),
        description="systemd only: the unit.",
    )
    priority: Literal["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"] | None = Field(
        default=None, description="systemd only: this priority and more severe."
    )
    container: str | None = Field(
        default=None,
        pattern=CONTAINER_PATTERN,
        description="docker only (required there): the container name or ID.",
    )
    kind: Literal["access", "error"] | None = Field(
        default=None, description="nginx only: which log (default error)."
    )
    path: str | None = Field(
        default=None,
        pattern=worded(
            r"^/[^\x00-\x1f]{0,4095}$",
            "an absolute path, starting with '/', of at most 4096 characters, none a control character",
        ),
        description="system (required) and nginx: a log file under the agent's allowed paths.",
    )
    grep: str | None = Field(
        default=None,
        pattern=SAFE_TEXT,
        description="systemd, system and audit only. systemd: a regular expression on the message "
        "(journalctl --grep, case-insensitive when all lowercase); system: lines containing this literal, "
        "case-sensitive text; audit: entries whose actor, action, target (agent), outcome or detail "
        "contains it (literal, case-sensitive).",
    )

    @model_validator(mode="after")
    def filters_the_source_supports(self) -> Self:
        for name, sources in FILTER_SOURCES.items():
            if getattr(self, name) is not None and self.source not in sources:
                raise ValueError(
                    f"source={self.source!r} has no {name} filter; only sources {', '.join(sources)} "
                    f"support {name}. Leave {name} out (and narrow with lines)."
                )
        return self


class AuditEntryOut(BaseModel):
    seq: int
    ts: str | None
    actor: str
    action: str
    target: str | None
    outcome: str
    duration_ms: DurationMs | None
    detail: dict[str, JsonValue]


class QueryLogsOutput(ToolOutput):
    source: str
    agent: str | None
    probe: str | None
    result: dict[str, JsonValue] | None
    audit: list[AuditEntryOut] | None
    truncated: bool


QUERY_LOGS = """Read logs to find a root cause. Each source supports only these filters:
'systemd' (the journal: unit, priority, since, grep as a regex on the message), 'docker' (a container's
logs: container; no since or grep), 'nginx' (access or error log: kind, path; no since or grep),
'system' (a log file under the agent's allowed paths, e.g. /var/log/syslog: path, grep as literal text;
no since), 'audit' (the hub's own trail of who ran what, members see their own calls: agent, since, grep
over actor, action, target, outcome and detail). A filter the source does not support is refused.
Lines are bounded (default 100, at most 1000; the audit's newest that fit in about 96 KiB, truncated
says when some were left out); 'since' takes '15m', '2h', '1d' or an ISO time."""


def since_epoch(since: str | None) -> float | None:
    """Unix time of a validated `since` (see `QueryLogsInput`), or None."""
    if since is None:
        return None
    if is_duration(since):
        return time.time() - parse_duration(since)
    return iso_epoch(since)


def journal_since(since: str) -> str:
    """Our '15m' / ISO forms in the shape journalctl takes ('-15m', 'YYYY-MM-DD HH:MM:SS', with
    ' UTC' for a Z: journalctl reads a bare time in the agent's time zone)."""
    if is_duration(since):
        return f"-{since}"
    utc = " UTC" if since.endswith("Z") else ""
    return since.replace("T", " ").rstrip("Z")[:19] + utc


def log_probe(args: QueryLogsInput) -> tuple[str, dict[str, Any]]:
    """The agent probe that answers this query, with its parameters."""
    if args.source == "systemd":
        params = {"unit": args.unit, "priority": args.priority, "grep": args.grep, "lines": args.lines}
        if args.since:
            params["since"] = journal_since(args.since)
        return "systemd.journal.query", params
    if args.source == "docker":
        if args.container is None:
            raise HubError(
                "query_logs with source='docker' needs a container (see probe docker.containers.list)."
            )
        return "docker.container.logs", {"container": args.container, "lines": args.lines}
    if args.source == "nginx":  # neither nginx probe filters by time or text
        probe = "nginx.logs.access" if args.kind == "access" else "nginx.logs.error"
        return probe, {"path": args.path, "lines": args.lines}
    if args.path is None:
        raise HubError("query_logs with source='system' needs a path, e.g. /var/log/syslog.")
    return "system.logs.tail", {"path": args.path, "lines": args.lines, "contains": args.grep}


async def query_logs(call: ToolCall, args: QueryLogsInput) -> QueryLogsOutput:
    if args.source == "audit":
        return await audit_logs(call, args)
    if args.agent is None:
        raise HubError(f"query_logs with source={args.source!r} needs an agent; see list_agents.")
    record = resolve_agent(call.hub, call.caller, args.agent)
    require_source_pack(record, args.source)
    probe, params = log_probe(args)
    params = {key: value for key, value in params.items() if value is not None}
    reading = await run_probe_for(call.hub, call.caller, record, probe, params, via="mcp.query_logs")
    return QueryLogsOutput(
        source=args.source,
        agent=record.name,
        probe=probe,
        result=reading.result,
        audit=None,
        truncated=reading.truncated,
    )


def require_source_pack(record: AgentRecord, source: str) -> None:
    """Refuse a source whose pack the agent does not have (not detected there), naming those it has."""
    packs = {pack.get("name") for pack in record.packs}
    if SOURCE_PACKS[source] in packs:
        return
    available = [name for name, pack in SOURCE_PACKS.items() if pack in packs]
    raise not_found(
        f"Agent {record.name} does not run the {SOURCE_PACKS[source]} pack (it is not installed there, or "
        f"it does not apply: `sonde packs list` on {record.name} says why), so source={source!r} is not "
        f"available there. Sources available on {record.name}: {', '.join([*available, 'audit'])}."
    )


async def audit_logs(call: ToolCall, args: QueryLogsInput) -> QueryLogsOutput:
    hub, caller = call.hub, call.caller
    target = resolve_agent(hub, caller, args.agent).name if args.agent else None
    actor = None if caller.is_admin else caller.key_id
    rows, more = await hub.read_audit(
        query_audit_page,
        agent=target,
        actor=actor,
        since=since_epoch(args.since),
        contains=args.grep,
        limit=args.lines,
        as_told=not caller.is_admin,
    )
    entries = [AuditEntryOut(**{**r, "ts": iso(r["ts"])}) for r in rows]
    listed = within_budget(entries)  # the newest first: what is cut is the oldest
    return QueryLogsOutput(
        source="audit",
        agent=target,
        probe=None,
        result=None,
        audit=listed,
        truncated=more or len(listed) < len(entries),
    )


def logs_wait(hub: Hub, args: QueryLogsInput) -> AgentWait | None:
    """An agent's logs are read by a probe there; the audit trail (or a call with no agent,
    refused) answers from the hub at once."""
    if args.source == "audit" or args.agent is None:
        return None
    try:
        deadline_s = probe_deadline_s(hub, log_probe(args)[0])
    except HubError:  # refused as the call starts
        deadline_s = hub.config.probe_timeout_s
    return AgentWait(f"{args.agent}: its {args.source} logs", deadline_s)


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("query_logs", QUERY_LOGS, QueryLogsInput, QueryLogsOutput, query_logs, waits_on_agents=logs_wait)
]
