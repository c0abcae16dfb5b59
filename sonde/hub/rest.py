"""The Quart app: `/api/v1/*` REST and the dashboard's static files.

Every REST handler is one supervision boundary: `ApiError` becomes the
stable error shape ``{"error": {"code", "message"}}``; so do 404, 405 (with
its ``Allow`` header) and 413.

A refusal of an authenticated caller by its role or policy (a `HubError`
carrying a `Denial`) is audited where it becomes an answer, under the action
the route named in `require_caller`: one row per refused request, as the MCP
side writes one per tool call.
"""

from __future__ import annotations

# werkzeug's routing encodes each request's Host with this codec: imported on the first request,
# it failed that request with a 500 when the hub had no file descriptor left to read it with
import encodings.idna  # noqa: F401
import importlib.resources
import logging
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import trio
from pydantic import BaseModel, ValidationError
from quart import Response, g, jsonify, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from sonde.hub.audit import audit_entry
from sonde.hub.auth import BEARER_CHALLENGE, Caller, bearer_secret
from sonde.hub.enrollment import enroll_agent
from sonde.hub.enrollment_tokens import EnrollmentRefused
from sonde.hub.errors import (
    Denial,
    HubError,
    database_damaged,
    database_unavailable,
    forbidden,
    is_damaged_database,
)
from sonde.hub.keys import revoked_key_use
from sonde.hub.store import StoreCommitFailed
from sonde.hub.tcp_guard import WAITING
from sonde.params_words import describe_params_error
from sonde.protocol.enrollment import EnrollRequest, EnrollResponse
from sonde.protocol.jsontext import RepeatedKey, escapes_lone_surrogate, loads_unique

if TYPE_CHECKING:
    from sonde.hub.core import Hub

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 256 * 1024
WAITING_RETRY_AFTER_S = 2  # an address's waiting connections are registers and bodies: seconds at most


def ApiError(status: int, code: str, message: str) -> HubError:
    return HubError(message, code, status)


def error_response(status: int, code: str, message: str) -> Response:
    response = jsonify({"error": {"code": code, "message": message}})
    response.status_code = status
    return response


async def parse_body(model: type[M]) -> M:
    """The JSON body validated by ``model``; ApiError 400 naming the bad field."""
    body = await request.get_data(as_text=False)
    try:  # not quart's get_json: bytes that are not UTF-8, or nesting too deep, escaped it as a 500
        data = loads_unique(body)
    except RepeatedKey as exc:  # {"agent": "web-1", ..., "agent": "db-1"} ran on db-1
        raise ApiError(400, "invalid_body", f"request body: {exc}") from None
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_body", "request body is not valid JSON (UTF-8)") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_body", "request body must be a JSON object")
    if escapes_lone_surrogate(body, data):
        raise ApiError(400, "invalid_body", "request body escapes a lone UTF-16 surrogate (\\ud800-\\udfff)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, "invalid_body", describe_params_error(exc)) from None


async def stranger_body(model: type[M], deadline_s: float) -> M:
    """`parse_body` for a route that takes no key (enrollment: the token is in the body). Until
    the body is read, the connection counts with its address's idle ones (`WAITING`): one that
    sent a byte of it every few seconds was held up to the 30 s body deadline by no bound, and
    one address with no key held every file descriptor the hub has (a fault review)."""
    address = str(request.remote_addr)
    if not WAITING.admit(address):
        raise HubError(
            f"too many connections from this address are waiting; try again in {WAITING_RETRY_AFTER_S} s",
            "busy",
            503,
            {"Retry-After": str(WAITING_RETRY_AFTER_S)},
        )
    try:
        with trio.move_on_after(deadline_s):
            return await parse_body(model)
        raise ApiError(408, "body_timeout", f"the request body did not arrive within {deadline_s:g} s")
    finally:
        WAITING.started(address)


async def require_caller(hub: Hub, admin: bool = False, *, action: str) -> Caller:
    """The caller of this request; 401 (audited, rate limited per address) without a valid key
    (the 401 of a revoked key says so, and its audit row names the key by id).

    ``action`` names the route in the audit row of a refusal of this caller (a
    role's 403 here, a policy's later in the handler).
    """
    client = str(request.remote_addr)
    caller = await hub.keys.authenticate(request.headers.get("Authorization"))
    if caller is None:
        retry = hub.keys.failures.retry_after(client)
        if retry is not None:  # a valid key is never held back: its address may be a shared proxy
            wait_s = int(retry) + 1
            raise HubError(
                f"too many failed authentications from this address; try again in {wait_s} s",
                "too_many_failures",
                429,
                {"Retry-After": str(wait_s)},
            )
        hub.keys.failures.failed(client)
        secret = bearer_secret(request.headers.get("Authorization"))
        revoked = None if secret is None else await hub.store.read(revoked_key_use, secret)
        await hub.audit(
            "anonymous",
            "rest.auth",
            request.path,  # cut to size by Hub.audit, as every target is
            "denied",
            detail={"client": request.remote_addr, **(revoked.detail if revoked else {})},
            unauthenticated=True,
        )
        raise HubError(
            revoked.message if revoked else "a valid API key is required: Authorization: Bearer <key>",
            "unauthorized",
            401,
            {"WWW-Authenticate": BEARER_CHALLENGE},  # RFC 9110 11.6.1, as /mcp answers
        )
    g.sonde_caller, g.sonde_action = caller, action
    if admin and not caller.is_admin:
        raise forbidden("this route needs an admin API key", Denial("admin_required", request.path))
    return caller


async def audit_denial(hub: Hub, exc: HubError, denial: Denial) -> None:
    """The audit row of a refusal by the caller's role or policy, shaped as a policy-refused MCP call's."""
    caller: Caller | None = g.get("sonde_caller")
    if caller is None:  # no route refuses before it knows its caller; nothing to name as the actor
        return
    detail = {"code": exc.code, "reason": denial.reason, **denial.detail}
    await hub.audit(caller.key_id, g.sonde_action, denial.target, "denied", detail=detail)


def create_rest_app(hub: Hub) -> QuartTrio:
    app = QuartTrio("sonde.hub", static_folder=None)
    # A doubled slash is a 404, not a redirect: werkzeug built its 308 from the Host header,
    # `/ui//x` with `Host: evil.example` went to `http://evil.example/ui/x` (a shared cache keeps it).
    app.url_map.merge_slashes = False  # before any route: each rule takes it when added
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["BODY_TIMEOUT"] = 30  # s for a whole request body, then 408 (as /mcp: MCP_BODY_DEADLINE_S)
    install_error_handlers(app, hub)
    install_security_headers(app)

    @app.before_request
    async def refuse_while_unaudited() -> None:
        """Every write and every call must be on the record: none while the audit log cannot be written."""
        refusal = hub.audit_queue.refusal()
        if refusal is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
            raise ApiError(503, "audit_unavailable", refusal)

    from sonde.hub.rest_routes import install_routes

    install_routes(app, hub)
    install_webui(app)
    return app


# The tools and the routes share their refusals, which name the MCP tool to look things up
# with (a call's arguments too: `list_capabilities(probes=["system.info"])`); a REST caller is
# pointed at the route that answers the same.
REST_EQUIVALENTS = {"list_agents": "GET /api/v1/agents", "list_capabilities": "GET /api/v1/packs"}
TOOL_NAMES = re.compile(r"\b(" + "|".join(REST_EQUIVALENTS) + r")\b(?:\([^()]*\))?")


def for_rest(message: str) -> str:
    return TOOL_NAMES.sub(lambda match: REST_EQUIVALENTS[match.group(1)], message)


def install_error_handlers(app: QuartTrio, hub: Hub) -> None:
    @app.errorhandler(HubError)
    async def api_error(exc: HubError) -> Response:
        if exc.denial is not None:
            await audit_denial(hub, exc, exc.denial)
        response = error_response(exc.status, exc.code, for_rest(exc.message))
        response.headers.update(exc.headers)
        return response

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(
            exc.code or 500, "http_error"
        )
        response = error_response(exc.code or 500, code, http_error_message(exc))
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:  # RFC 9110 15.5.6: say what is allowed
            response.headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        return response

    @app.errorhandler(StoreCommitFailed)
    async def database_error(exc: StoreCommitFailed) -> Response:
        if exc.__cause__ is not None and is_damaged_database(exc.__cause__):
            return await damaged_database(exc.__cause__)
        # the database refused the write (locked by another process, a full disk): no bug here
        log.warning(
            "%s %s: not written: %s (%s)", request.method, request.path, exc.cause, hub.config.db_path
        )
        return await api_error(database_unavailable(exc.locked, exc.cause))

    @app.errorhandler(sqlite3.DatabaseError)
    async def damaged_database(exc: BaseException) -> Response:
        if not is_damaged_database(exc):  # any other SQLite error a handler did not expect: a bug
            return await internal_error(exc)
        # no bug of the hub's either, and no traceback: the file changed under SQLite
        log.error(
            "%s %s: the database file %s is damaged (%s): stop the hub, restore it from a backup "
            "and run `sonde hub audit verify`",
            request.method,
            request.path,
            hub.config.db_path,
            exc,
        )
        return await api_error(database_damaged(str(exc)))

    @app.errorhandler(Exception)
    async def internal_error(exc: BaseException) -> Response:  # the REST supervision boundary
        log.exception("REST handler failed", exc_info=exc)
        return error_response(500, "internal", "internal error; the hub logged it")


# The dashboard's scripts and styles are files of this hub; nothing inline, nothing from elsewhere,
# and no form submits anywhere (the key form is handled by script: never into a URL).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'"
)


def install_security_headers(app: QuartTrio) -> None:
    @app.after_request
    async def headers(response: Response) -> Response:
        # A refused request may leave its body unread (even one too large to read at all):
        # end the keep-alive connection so the next request is not stuck behind that body.
        if request.method in ("POST", "PUT", "PATCH", "DELETE") and response.status_code >= 400:
            response.headers["Connection"] = "close"
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        if request.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        elif request.path == "/" or request.path.startswith("/ui/"):
            response.headers["Cache-Control"] = "no-cache"  # revalidated (ETag): a new hub, new files
        return response


# The kinds of file the dashboard is made of; its package's other files (`__init__.py`,
# `__pycache__`) are no dashboard's and are not served.
DASHBOARD_SUFFIXES = frozenset({".html", ".css", ".js", ".svg", ".png", ".ico"})


def webui_dir() -> Path:
    return Path(str(importlib.resources.files("sonde.webui")))


def dashboard_files(root: Path) -> frozenset[str]:
    """The names of the dashboard's own files in ``root`` (no subdirectories), as served under /ui/."""
    return frozenset(p.name for p in root.iterdir() if p.is_file() and p.suffix in DASHBOARD_SUFFIXES)


WHERE_THINGS_ARE = (
    "the hub serves MCP at /mcp (the URL an MCP client or `sonde mcp-bridge --hub` is given is the "
    "base URL it prints as 'listening on'), its REST API under /api/v1 (/api/v1/openapi.json) "
    "and its dashboard at /"
)


def http_error_message(exc: HTTPException) -> str:
    """The hub's words for a 404 or 405 of the router (werkzeug's own say to check the spelling),
    naming where its endpoints are; other errors, and 404s a route raised, keep their text."""
    if isinstance(exc, NotFound) and exc.description == NotFound.description:
        return f"nothing is served at {request.path}: {WHERE_THINGS_ARE}"
    if isinstance(exc, MethodNotAllowed) and exc.description == MethodNotAllowed.description:
        allowed = ", ".join(sorted(exc.valid_methods or ()))
        return f"{request.method} is not served at {request.path} (it takes {allowed}): {WHERE_THINGS_ARE}"
    return exc.description or exc.name


def install_webui(app: QuartTrio) -> None:
    from quart import send_from_directory

    root = webui_dir()
    served = dashboard_files(root)

    @app.get("/")
    async def index() -> Response:
        return await send_from_directory(root, "index.html")

    @app.get("/ui/<path:name>")
    async def asset(name: str) -> Response:
        if name not in served:  # the 404 of any unknown path
            raise NotFound()
        return await send_from_directory(root, name)


Handler = Callable[..., Awaitable[Any]]


# An enrollment's body: a few KB (some 55 KB with the packs described), sent at once.
ENROLL_BODY_S = 10.0


async def enroll(hub: Hub) -> tuple[dict[str, Any], int]:
    body = await stranger_body(EnrollRequest, ENROLL_BODY_S)
    try:
        enrolled = await hub.write_audited(
            lambda db: enroll_agent(db, body, time.time()),
            lambda made: audit_entry(
                "enrollment", "agent.enroll", made.record.name, "ok", detail=made.audit_detail()
            ),
        )
    except EnrollmentRefused as exc:
        status = 409 if exc.code == "name_taken" else 400 if exc.code == "invalid_public_key" else 401
        await hub.audit(
            "enrollment", "agent.enroll", body.name, "denied", detail={"code": exc.code}, unauthenticated=True
        )
        raise ApiError(status, exc.code, exc.message) from None
    record = enrolled.record
    hub.fleet.remember(record)  # with the tags it kept: key policies select it by them at once
    from sonde.protocol.signing import public_key_to_text

    answer = EnrollResponse(
        agent_id=record.id,
        name=record.name,
        hub_public_key=public_key_to_text(hub.signing_key.public_key()),
        heartbeat_interval_s=hub.config.heartbeat_interval_s,
    )
    return answer.model_dump(mode="json", by_alias=True), 201
