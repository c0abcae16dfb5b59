"""`query_logs`: root-cause digging in an agent's logs, or in the hub's own audit trail."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue

from sonde.hub.audit import query_audit
from sonde.hub.errors import HubError
from sonde.hub.keys import parse_duration
from sonde.hub.probing import resolve_agent, run_probe_for
from sonde.hub.tools.base import ToolCall, ToolInput, ToolOutput, ToolSpec
from sonde.hub.tools.views import iso

SAFE_TEXT = r"^[^\x00-\x1f]{1,200}$"


class QueryLogsInput(ToolInput):
    source: Literal["systemd", "docker", "nginx", "system", "audit"] = Field(
        description="systemd journal, docker container logs, nginx logs, a log file under an allowed path "
        "(system), or the hub's own audit trail (audit)."
    )
    agent: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="The agent whose logs to read (required except for audit).",
    )
    lines: int = Field(default=100, ge=1, le=1000, description="At most this many lines (newest).")
    since: str | None = Field(
        default=None,
        pattern=r"^(\d+[smhd]|\d{4}-\d{2}-\d{2}[T ][0-9:]{5,8}Z?)$",
        description="Only lines newer than this: '15m', '2h', '1d' or an ISO time.",
    )
    unit: str | None = Field(default=None, pattern=r"^[A-Za-z0-9@:._-]{1,128}$", description="systemd unit.")
    priority: Literal["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"] | None = None
    container: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    kind: Literal["access", "error"] | None = Field(default=None, description="nginx log kind.")
    path: str | None = Field(
        default=None,
        pattern=r"^/[^\x00-\x1f]{0,4095}$",
        description="A log file under the agent's allowed paths (system, nginx).",
    )
    grep: str | None = Field(default=None, pattern=SAFE_TEXT, description="Only lines containing this text.")


class AuditEntryOut(BaseModel):
    seq: int
    ts: str | None
    actor: str
    action: str
    target: str | None
    outcome: str
    duration_ms: float | None
    detail: dict[str, JsonValue]


class QueryLogsOutput(ToolOutput):
    source: str
    agent: str | None
    probe: str | None
    result: dict[str, JsonValue] | None
    audit: list[AuditEntryOut] | None
    truncated: bool


QUERY_LOGS = """Read logs to find a root cause: source='systemd' (journal; unit, priority, since, grep),
'docker' (a container's logs), 'nginx' (access or error log), 'system' (a log file under the agent's
allowed paths, e.g. /var/log/syslog), or 'audit' (the hub's own trail of who ran what; members see
their own calls). Lines are bounded (default 100, at most 1000); 'since' takes '15m', '2h' or an ISO time."""


def since_epoch(since: str | None) -> float | None:
    if since is None:
        return None
    if since[-1] in "smhd" and since[:-1].isdigit():
        return time.time() - parse_duration(since)
    return datetime.fromisoformat(since.replace("Z", "+00:00").replace(" ", "T")).timestamp()


def journal_since(since: str) -> str:
    """Our '15m' / ISO forms in the shape journalctl takes ('-15m', 'YYYY-MM-DD HH:MM:SS')."""
    if since[-1] in "smhd" and since[:-1].isdigit():
        return f"-{since}"
    return since.replace("T", " ").rstrip("Z")[:19]


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
    if args.source == "nginx":
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


async def audit_logs(call: ToolCall, args: QueryLogsInput) -> QueryLogsOutput:
    hub, caller = call.hub, call.caller
    target = resolve_agent(hub, caller, args.agent).name if args.agent else None
    actor = None if caller.is_admin else caller.key_id
    rows = await hub.read_audit(
        query_audit, agent=target, actor=actor, since=since_epoch(args.since), limit=args.lines
    )
    if args.grep:
        rows = [r for r in rows if args.grep in r["action"] or args.grep in str(r["detail"])]
    entries = [AuditEntryOut(**{**r, "ts": iso(r["ts"])}) for r in rows]
    return QueryLogsOutput(
        source="audit",
        agent=target,
        probe=None,
        result=None,
        audit=entries,
        truncated=len(rows) >= args.lines,
    )


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("query_logs", QUERY_LOGS, QueryLogsInput, QueryLogsOutput, query_logs)
]
