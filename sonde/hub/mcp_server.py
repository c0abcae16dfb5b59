"""The MCP server: our tools on the SDK's low-level `Server`, served stateful.

A call that asks for progress from a tool that waits on agents is answered
over SSE, with a keepalive while it waits (`sonde.hub.mcp_keepalive`);
anything else as one JSON body (`sonde.hub.mcp_answers`).

Each tool call is one supervision boundary: `ToolError` and bad arguments
become tool error results a model can read; `trio.Cancelled` passes through
(the client cancelled: the probe's ``probe.cancel`` goes out from the link);
anything else is logged and reported as an internal error.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from sonde import __version__
from sonde.echo import echoed, without_secrets
from sonde.hub.auth import Caller
from sonde.hub.errors import database_damaged, database_unavailable, is_damaged_database
from sonde.hub.keys import get_api_key
from sonde.hub.mcp_events import EventLog
from sonde.hub.mcp_keepalive import call_kept_alive
from sonde.hub.mcp_sessions import SessionManager
from sonde.hub.probing import capitalized
from sonde.hub.store import StoreCommitFailed
from sonde.hub.tools import all_tools
from sonde.hub.tools.base import ProgressFn, ToolCall, ToolError, ToolSpec, no_progress
from sonde.params_words import describe_params_error

if TYPE_CHECKING:
    from sqlite_utils import Database

    from sonde.hub.core import Hub

log = logging.getLogger(__name__)

INSTRUCTIONS = """Sonde gives you read-only, structured probes of a fleet of machines (agents).
Nothing you call can change a machine. Workflow:
1. Broad question ("is something wrong?", "how is prod?"): start with health_check. It runs every
   applicable diagnostic category on the matching agents and returns ranked findings.
2. To learn what exists, call list_capabilities: agents, their probes (one line each) and diagnostic
   categories. Never guess a probe name; use only names list_capabilities returns. For parameter
   schemas call it with probe names or globs, e.g. list_capabilities(probes=["system.files.read"]).
3. For one area on one agent use diagnose(agent, category), e.g. category "system".
4. For one reading use probe(agent, probe, params), e.g. probe="system.memory.usage" or
   probe="system.disk.usage".
5. For root cause use query_logs (systemd journal, docker, nginx, log files, or the hub's audit trail).
6. list_agents and agent_overview describe the machines themselves.
Use tags only when the user names them with '#': "#prod" means tags=["prod"]."""


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    caller = getattr(user, "sonde_caller", None)
    if not isinstance(caller, Caller):
        raise ToolError("This request carries no API key. Connect with `Authorization: Bearer <key>`.")
    return caller


class SondeUser(AuthenticatedUser):
    """The ASGI ``user`` for an authenticated key; binds MCP sessions to the key."""

    def __init__(self, caller: Caller) -> None:
        from mcp.server.auth.provider import AccessToken

        super().__init__(AccessToken(token="", client_id=caller.key_id, scopes=[caller.key.role]))
        self.sonde_caller = caller


def tool_result(output: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(output, separators=(",", ":"), ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=output
    )


def tool_error(message: str) -> types.CallToolResult:
    """A failed call's answer: a Sonde secret in it (the caller's own input, said back) never shown."""
    text = without_secrets(message)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def build_server(hub: Hub, tools: list[ToolSpec[Any, Any]] | None = None) -> Server[Any]:
    specs = {spec.name: spec for spec in (tools or all_tools())}
    listed = types.ListToolsResult(
        tools=[
            types.Tool(
                name=spec.name,
                description=spec.description,
                input_schema=spec.input_schema(),
                output_schema=spec.output_schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
                ),
            )
            for spec in specs.values()
        ]
    )

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listed

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            await audit_unserved_call(hub, ctx, "not_found", params.name)
            return tool_error(f"Unknown tool {echoed(params.name)}. Tools: {', '.join(specs)}.")
        return await call_tool(hub, spec, ctx, params.arguments or {})

    server: Server[Any] = Server(
        "sonde",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    server.middleware.append(audit_refused_calls(hub))
    return server


def audit_refused_calls(hub: Hub) -> Any:
    """Middleware: the audit row of a ``tools/call`` the SDK refuses before our handler runs
    (params that are not a valid call: no name, ``arguments`` not an object)."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        try:
            return await call_next(ctx)
        except (ValidationError, MCPError):
            params = ctx.params if isinstance(ctx.params, Mapping) else {}
            name = params.get("name")
            await audit_unserved_call(hub, ctx, "invalid", name if isinstance(name, str) else None)
            raise

    return middleware


async def audit_unserved_call(
    hub: Hub, ctx: ServerRequestContext[Any, Any], outcome: str, tool: str | None
) -> None:
    """The one audit row of a tool call that never reached a tool (``mcp.call``: the name is the caller's)."""
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    caller = getattr(user, "sonde_caller", None)
    with trio.CancelScope(shield=True):
        await hub.audit(
            caller.key_id if isinstance(caller, Caller) else "anonymous",
            "mcp.call",
            None,
            outcome,
            detail={"tool": tool},
        )


async def call_tool(
    hub: Hub, spec: ToolSpec[Any, Any], ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
) -> types.CallToolResult:
    started = time.perf_counter()
    caller: Caller | None = None
    outcome = "error"
    detail: dict[str, Any] = {"tool": spec.name}
    try:
        caller = caller_of(ctx)
        refusal = hub.audit_queue.refusal()
        if refusal is not None:
            outcome = "audit_unavailable"
            return tool_error(refusal)
        args = spec.input_model.model_validate(arguments)
        output = await run_handler(hub, spec, ctx, caller, args)
        outcome = "ok"
        return tool_result(output.model_dump(mode="json"))
    except ValidationError as exc:
        outcome = "invalid"
        return tool_error(
            f"Invalid arguments for {spec.name}: {describe_params_error(exc, spec.input_model)}"
        )
    except ToolError as exc:
        outcome = exc.code
        if exc.denial is not None:  # refused by the key's role or policy: a row shaped as REST's
            # (a hidden agent reads as unknown to the caller; the row says it was the policy)
            outcome = "denied"
            detail.update(code=exc.code, reason=exc.denial.reason, **exc.denial.detail)
        return tool_error(str(exc))
    except StoreCommitFailed as exc:  # the database refused a write: say why, as REST does
        outcome = "database_unavailable"
        if exc.__cause__ is not None and is_damaged_database(exc.__cause__):
            return damaged_database(hub, spec, exc.__cause__)
        log.warning("tool %s: not written: %s (%s)", spec.name, exc.cause, hub.config.db_path)
        return tool_error(capitalized(database_unavailable(exc.locked, exc.cause).message) + ".")
    except sqlite3.DatabaseError as exc:
        if not is_damaged_database(exc):  # any other SQLite error a tool did not expect: a bug
            return internal_error(spec)
        outcome = "database_unavailable"
        return damaged_database(hub, spec, exc)
    except trio.Cancelled:
        outcome = "cancelled"
        raise
    except BaseExceptionGroup as group:
        if group.split(trio.Cancelled)[1] is None:  # a tool's nursery (health_check's), cancelled whole
            outcome = "cancelled"
        if not isinstance(group, Exception):
            raise
        return internal_error(spec)
    except Exception:  # the supervision boundary of one tool call
        return internal_error(spec)
    finally:
        with trio.CancelScope(shield=True):
            await hub.audit(
                caller.key_id if caller else "anonymous",
                f"mcp.call.{spec.name}",
                arguments.get("agent") if isinstance(arguments.get("agent"), str) else None,
                outcome,
                duration_ms=(time.perf_counter() - started) * 1000,
                detail=detail,
            )


async def run_handler(
    hub: Hub, spec: ToolSpec[Any, Any], ctx: ServerRequestContext[Any, Any], caller: Caller, args: Any
) -> Any:
    """The tool's answer; a call that waits on agents and asked for progress has a keepalive
    going while it runs (answered over SSE: `sonde.hub.mcp_answers`)."""
    asked = ctx.meta is not None and ctx.meta.get("progress_token") is not None
    wait = spec.waits_on_agents(hub, args) if asked and spec.waits_on_agents is not None else None
    if wait is None:
        own = ctx.session.report_progress if spec.reports_progress else no_progress
        return await spec.handler(ToolCall(hub, caller, own), args)
    report = ctx.session.report_progress

    async def handler(progress: ProgressFn) -> Any:
        return await spec.handler(
            ToolCall(hub, caller, progress if spec.reports_progress else no_progress), args
        )

    return await call_kept_alive(handler, report, wait, tool_counts=spec.reports_progress)


def transport_security(hub: Hub, bound_port: int) -> TransportSecuritySettings:
    """Allowed Host/Origin values: the bind address, loopback names, and --allowed-host."""
    host, port = hub.config.host, bound_port
    hosts = {host, "127.0.0.1", "localhost", "[::1]"} if host in ("127.0.0.1", "localhost", "::1") else {host}
    if host in ("0.0.0.0", "::"):
        hosts = {"127.0.0.1", "localhost", "[::1]"}
    allowed = {h if h.startswith("[") or ":" not in h else f"[{h}]" for h in hosts}
    allowed_hosts = [f"{h}:{port}" for h in allowed] + [h for h in allowed if port in (80, 443)]
    for extra in hub.config.allowed_hosts:
        allowed_hosts.append(extra)
        if ":" not in extra.rsplit("]", 1)[-1]:
            allowed_hosts.append(f"{extra}:{port}")
    allowed_hosts = [h.lower() for h in allowed_hosts]  # compared with the request's, lowered too
    origins = [f"{scheme}://{h}" for h in allowed_hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=origins
    )


def damaged_database(hub: Hub, spec: ToolSpec[Any, Any], exc: BaseException) -> types.CallToolResult:
    """What a caller gets when a tool reached a damaged page of sonde.db: what an operator must do.

    No traceback: the file changed under SQLite, no bug of the hub's (as REST's 503).
    """
    log.error(
        "tool %s: the database file %s is damaged (%s): stop the hub, restore it from a backup "
        "and run `sonde hub audit verify`",
        spec.name,
        hub.config.db_path,
        exc,
    )
    return tool_error(capitalized(database_damaged(str(exc)).message) + ".")


def internal_error(spec: ToolSpec[Any, Any]) -> types.CallToolResult:
    """What a caller gets when a tool failed of a bug (logged here, with its traceback)."""
    log.exception("tool %s failed", spec.name)
    return tool_error(f"Internal error in {spec.name}; the hub logged it. Try again or use another tool.")


def close_event_streams(manager: StreamableHTTPSessionManager) -> None:
    """End every MCP session's open GET event stream (the hub is stopping).

    Such a stream stays open as long as its client keeps it: left alone, each one would
    hold the server until its graceful timeout. Answers still being written (on POST
    streams) are left to finish.
    """
    for transport in list(manager._server_instances.values()):
        transport.close_standalone_sse_stream()


def build_session_manager(hub: Hub, bound_port: int) -> StreamableHTTPSessionManager:
    manager = SessionManager(
        app=build_server(hub),
        json_response=False,  # chosen per request: see mcp_answers
        stateless=False,
        security_settings=transport_security(hub, bound_port),
        session_idle_timeout=hub.config.session_idle_timeout_s,
    )
    manager.event_log = EventLog()  # SSE answers resume after a dropped connection: see mcp_events
    manager.max_sessions_per_owner = hub.config.max_sessions_per_key
    manager.revoked_keys = lambda key_ids: revoked_keys(hub, key_ids)
    return manager


def keys_revoked(db: Database, key_ids: Collection[str]) -> set[str]:
    """Those of ``key_ids`` revoked or gone: one lookup by id each."""
    return {
        key_id for key_id in key_ids if (key := get_api_key(db, key_id)) is None or key.revoked_at is not None
    }


async def revoked_keys(hub: Hub, key_ids: Collection[str]) -> set[str]:
    """Those of ``key_ids`` revoked, their MCP sessions to be ended (`SessionManager.revoked_keys`);
    none while the database cannot be read (logged; the next look tries again). When some are,
    the key cache is dropped: their requests get 401 now, not once their cache entry expires."""
    try:
        revoked = await hub.store.read(keys_revoked, key_ids)
    except sqlite3.Error as exc:
        log.warning("could not read which API keys holding MCP sessions were revoked: %s", exc)
        return set()
    if revoked:
        hub.keys.forget()
    return revoked
