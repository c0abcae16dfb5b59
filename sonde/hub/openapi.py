"""The REST API described as OpenAPI 3.1, served at `/api/v1/openapi.json`.

The document is built from the code rather than written beside it. `ROUTES` names each
route: who may call it, the model of its answer and the statuses its handler refuses with
itself. The models that validate bodies and query strings come from
`sonde.hub.rest_routes` and `sonde.hub.rest_audit`, which own them. Every schema is a pydantic model's own JSON Schema:
validation mode for what a caller sends, serialization mode with aliases for what the hub
answers (the handlers dump WireModels by alias, and the other models have no aliases).

The refusals that every route of a kind shares are not listed per route. They follow
from how the route is called: a key (401, and 429 with Retry-After), an admin key (403), a
JSON body (400, 413), a key, a token or a write (503 while the database cannot be read or
written, and for a write while the audit log cannot be written), and any route (500). Every
refusal has the shape of `ErrorResponse`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from sonde import __version__
from sonde.hub.auth import BEARER_CHALLENGE
from sonde.hub.rest_answers import (
    AgentList,
    AgentRemoved,
    AgentTags,
    ApiKeyCreated,
    ApiKeyList,
    AttestationAccepted,
    AuditChainCheck,
    AuditEntries,
    EnrollmentTokenCreated,
    EnrollmentTokenList,
    Health,
    PackList,
    Revoked,
)
from sonde.hub.tools.agents import AgentOverviewOutput
from sonde.hub.tools.diagnose import DiagnoseOutput
from sonde.hub.tools.health import HealthCheckOutput
from sonde.hub.tools.probe import ProbeOutput
from sonde.protocol.enrollment import EnrollResponse, ErrorResponse

RouteKey = tuple[str, str]  # (method, path)
Who = Literal["anyone", "token", "member", "admin"]

WHO_MAY_CALL = {
    "anyone": "anyone; no API key",
    "token": "anyone holding an enrollment token, sent in the body; no API key",
    "member": "any API key; a member key sees only the agents and probes its policy allows",
    "admin": "an admin API key",
}
BEARER_HEADER = {
    "description": f"How to authenticate: {BEARER_CHALLENGE}",
    "schema": {"type": "string", "const": BEARER_CHALLENGE},
}
RETRY_AFTER = {
    "description": "Seconds until this address may try again",
    "schema": {"type": "integer", "minimum": 1},
}


# --- the routes -------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    operation_id: str
    summary: str
    who: Who
    answer: type[BaseModel] | None  # None: a JSON object described elsewhere
    ok: tuple[int, ...] = (200,)  # the statuses answered with `answer`
    errors: tuple[int, ...] = ()  # what the handler refuses with besides what every route of its kind does
    path_params: Mapping[str, str] = field(default_factory=dict)  # name: description


AGENT = {"agent": "The agent's name, or its id"}

ROUTES: list[Route] = [
    Route(
        "get",
        "/api/v1/health",
        "health",
        "Liveness; 503 while the hub cannot write its database or its audit log (a full disk, an I/O error); no fleet details",
        "anyone",
        Health,
        ok=(200, 503),
    ),
    Route("get", "/api/v1/openapi.json", "openapi", "This document", "anyone", None),
    Route(
        "post",
        "/api/v1/agents/enroll",
        "enrollAgent",
        "Enroll an agent with a single-use token and its public key",
        "token",
        EnrollResponse,
        ok=(201,),
        errors=(401, 409),
    ),
    Route(
        "get", "/api/v1/agents", "listAgents", "Agents this key may see", "member", AgentList, errors=(400,)
    ),
    Route(
        "get",
        "/api/v1/agents/{agent}",
        "getAgent",
        "One agent's overview",
        "member",
        AgentOverviewOutput,
        errors=(404,),
        path_params=AGENT,
    ),
    Route(
        "delete",
        "/api/v1/agents/{agent}",
        "removeAgent",
        "Remove an agent and revoke its identity; closes its socket",
        "admin",
        AgentRemoved,
        errors=(404,),
        path_params=AGENT,
    ),
    Route(
        "put",
        "/api/v1/agents/{agent}/tags",
        "setAgentTags",
        "Replace an agent's tags",
        "admin",
        AgentTags,
        errors=(404,),
        path_params=AGENT,
    ),
    Route(
        "post",
        "/api/v1/agents/{agent}/attestation/accept",
        "acceptAttestation",
        "Accept an agent's changed attestation",
        "admin",
        AttestationAccepted,
        errors=(404,),
        path_params=AGENT,
    ),
    Route("get", "/api/v1/packs", "listPacks", "Packs the hub knows, with their probes", "member", PackList),
    Route(
        "post",
        "/api/v1/probe",
        "runProbe",
        "Run one probe on one agent (502: the probe failed there; 503: the agent cannot be reached)",
        "member",
        ProbeOutput,
        errors=(403, 404, 409, 502, 503),
    ),
    Route(
        "post",
        "/api/v1/diagnose",
        "diagnose",
        "Run one category's runbook on one agent (503: the agent cannot be reached)",
        "member",
        DiagnoseOutput,
        errors=(403, 404, 409, 503),
    ),
    Route(
        "post",
        "/api/v1/health-check",
        "healthCheck",
        "Every applicable category on the matching agents, as the health_check tool (partial at deadline_s)",
        "member",
        HealthCheckOutput,
        errors=(404,),
    ),
    Route(
        "post",
        "/api/v1/api-keys",
        "createApiKey",
        "Create an API key; the secret is returned once",
        "admin",
        ApiKeyCreated,
        ok=(201,),
    ),
    Route("get", "/api/v1/api-keys", "listApiKeys", "List API keys (never secrets)", "admin", ApiKeyList),
    Route(
        "delete",
        "/api/v1/api-keys/{id}",
        "revokeApiKey",
        "Revoke an API key (409: it is the last admin key)",
        "admin",
        Revoked,
        errors=(404, 409),
        path_params={"id": "The API key's id"},
    ),
    Route(
        "post",
        "/api/v1/enrollment-tokens",
        "createEnrollmentToken",
        "Create an enrollment token; the secret is returned once",
        "admin",
        EnrollmentTokenCreated,
        ok=(201,),
    ),
    Route(
        "get",
        "/api/v1/enrollment-tokens",
        "listEnrollmentTokens",
        "List enrollment tokens with their state: active, used, expired or revoked (never secrets)",
        "admin",
        EnrollmentTokenList,
    ),
    Route(
        "delete",
        "/api/v1/enrollment-tokens/{id}",
        "revokeEnrollmentToken",
        "Revoke an enrollment token that could still enroll an agent; it stays listed, as revoked",
        "admin",
        Revoked,
        errors=(404,),
        path_params={"id": "The token's id, or the token itself"},
    ),
    Route(
        "get",
        "/api/v1/audit",
        "queryAudit",
        "Audit entries, newest first (400: a query parameter is invalid or unknown)",
        "admin",
        AuditEntries,
        errors=(400,),
    ),
    Route(
        "get", "/api/v1/audit/verify", "verifyAudit", "Check the audit hash chain", "admin", AuditChainCheck
    ),
]


# --- the document -----------------------------------------------------------------


def openapi_document(
    bodies: Mapping[RouteKey, type[BaseModel]], queries: Mapping[RouteKey, type[BaseModel]]
) -> dict[str, Any]:
    """The document. ``bodies`` are the models that validate each route's JSON body and
    ``queries`` those that validate its query string, keyed by (method, path).

    Raises ValueError for a model keyed by a route not in `ROUTES`, a path parameter without
    a description, or a query model with a field that is not a scalar or a list of scalars.
    """
    known = {(route.method, route.path) for route in ROUTES}
    unknown = (set(bodies) | set(queries)) - known
    if unknown:
        raise ValueError(f"models for routes not in ROUTES: {sorted(unknown)}")
    uses: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorResponse, "serialization")]
    uses += [(model, "validation") for model in bodies.values()]
    uses += [(route.answer, "serialization") for route in ROUTES if route.answer is not None]
    refs, schemas = models_json_schema(list(dict.fromkeys(uses)), ref_template="#/components/schemas/{model}")
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        key = (route.method, route.path)
        body = None if key not in bodies else refs[(bodies[key], "validation")]
        answer = {"type": "object"} if route.answer is None else refs[(route.answer, "serialization")]
        operation = describe_route(route, query_parameters(queries.get(key)), body)
        operation["responses"] = responses(
            route, answer, refs[(ErrorResponse, "serialization")], body is not None
        )
        paths.setdefault(route.path, {})[route.method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sonde hub", "version": __version__},
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key: `sonde hub key create`, or the admin key the hub printed on first start",
                }
            },
        },
    }


def describe_route(route: Route, query: list[dict[str, Any]], body: dict[str, Any] | None) -> dict[str, Any]:
    """The operation object, without its responses."""
    operation: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "description": f"Who may call: {WHO_MAY_CALL[route.who]}.",
        "security": [{"bearer": []}] if route.who in ("member", "admin") else [],
    }
    parameters = path_parameters(route) + query
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return operation


def responses(
    route: Route, answer: dict[str, Any], error: dict[str, Any], takes_body: bool
) -> dict[str, Any]:
    """Every status ``route`` answers with, each with the schema of its body."""
    found: dict[str, Any] = {}
    for status in sorted({*route.ok, *refusals(route, takes_body)}):
        found[str(status)] = {
            "description": HTTPStatus(status).phrase,
            "content": {"application/json": {"schema": answer if status in route.ok else error}},
        }
        if status == HTTPStatus.TOO_MANY_REQUESTS:
            found[str(status)]["headers"] = {"Retry-After": RETRY_AFTER}
        if status == HTTPStatus.UNAUTHORIZED and route.who in ("member", "admin"):
            found[str(status)]["headers"] = {"WWW-Authenticate": BEARER_HEADER}
    return found


def refusals(route: Route, takes_body: bool) -> set[int]:
    """The error statuses of ``route``: its own and those of every route called like it."""
    found = {*route.errors, 500}
    if route.who in ("member", "admin"):
        found |= {401, 429}  # no valid key; too many failed attempts from this address
    if route.who == "admin":
        found.add(403)
    if takes_body:
        found |= {400, 413}
    if route.who != "anyone" or route.method != "get":
        # a key or token is looked up in the database, which can be locked past the wait, full or
        # damaged (`database_unavailable`); a write is also refused while unaudited
        found.add(503)
    return found - set(route.ok)


def path_parameters(route: Route) -> list[dict[str, Any]]:
    names = re.findall(r"\{([^}]+)\}", route.path)
    missing = set(names) - set(route.path_params)
    if missing:
        raise ValueError(f"{route.method} {route.path}: no description of {sorted(missing)}")
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": route.path_params[name],
            "schema": {"type": "string"},
        }
        for name in names
    ]


def query_parameters(model: type[BaseModel] | None) -> list[dict[str, Any]]:
    """One query parameter per field of ``model``; a list field is the parameter repeated."""
    if model is None:
        return []
    schema = model.model_json_schema(by_alias=True, mode="validation")
    if "$defs" in schema:
        raise ValueError(f"{model.__name__}: a query parameter must be a scalar or a list of scalars")
    required = set(schema.get("required", []))
    parameters = []
    for name, field_schema in schema["properties"].items():
        value = plain_value(field_schema)
        parameter = {"name": name, "in": "query", "required": name in required, "schema": value}
        if "description" in field_schema:
            parameter["description"] = field_schema["description"]
        if value.get("type") == "array":
            parameter |= {"style": "form", "explode": True}  # ?tag=a&tag=b
        parameters.append(parameter)
    return parameters


def plain_value(field_schema: dict[str, Any]) -> dict[str, Any]:
    """A query field's schema without its title, description and ``null``: a parameter is left
    out, never sent as null."""
    value = {k: v for k, v in field_schema.items() if k not in ("title", "description")}
    options = [option for option in value.pop("anyOf", []) if option != {"type": "null"}]
    if len(options) > 1:
        value["anyOf"] = options
    elif options:
        value |= options[0]
    if value.get("default", ...) is None:
        del value["default"]
    return value
