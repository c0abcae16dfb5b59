"""The REST API described as OpenAPI 3.1, served at `/api/v1/openapi.json`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from sonde import __version__

ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}

# (method, path, summary, who may call)
ROUTES: list[tuple[str, str, str, str]] = [
    (
        "get",
        "/api/v1/health",
        "Liveness; 503 while calls are refused (the audit log cannot be written); no auth, no fleet details",
        "anyone",
    ),
    ("post", "/api/v1/agents/enroll", "Enroll an agent with a single-use token and its public key", "token"),
    ("get", "/api/v1/agents", "Agents this key may see (?tag=prod&tag=web: all tags)", "member"),
    ("get", "/api/v1/agents/{agent}", "One agent's overview (name or id)", "member"),
    (
        "delete",
        "/api/v1/agents/{agent}",
        "Remove an agent and revoke its identity; closes its socket",
        "admin",
    ),
    ("put", "/api/v1/agents/{agent}/tags", 'Replace an agent\'s tags: {"tags": [...]}', "admin"),
    ("post", "/api/v1/agents/{agent}/attestation/accept", "Accept an agent's changed attestation", "admin"),
    ("get", "/api/v1/packs", "Packs the hub knows, with their probes", "member"),
    ("post", "/api/v1/probe", "Run one probe: {agent, probe, params}", "member"),
    ("post", "/api/v1/diagnose", "Run one category's runbook: {agent, category, description?}", "member"),
    (
        "post",
        "/api/v1/api-keys",
        "Create an API key: {name, role, policy?}; the secret is returned once",
        "admin",
    ),
    ("get", "/api/v1/api-keys", "List API keys (never secrets)", "admin"),
    ("delete", "/api/v1/api-keys/{id}", "Revoke an API key", "admin"),
    ("post", "/api/v1/enrollment-tokens", "Create an enrollment token: {ttlS?, name?}", "admin"),
    (
        "get",
        "/api/v1/enrollment-tokens",
        "List enrollment tokens with their state: active, used, expired or revoked (never secrets)",
        "admin",
    ),
    (
        "delete",
        "/api/v1/enrollment-tokens/{id}",
        "Revoke an enrollment token that could still enroll an agent ({id}: its id, or the token itself); it stays listed, as revoked",
        "admin",
    ),
    ("get", "/api/v1/audit", "Audit entries (?agent=&key=&action=&since=&until=&limit=)", "admin"),
    ("get", "/api/v1/audit/verify", "Check the audit hash chain", "admin"),
]


def openapi_document(bodies: Mapping[tuple[str, str], type[BaseModel]]) -> dict[str, Any]:
    """The document; ``bodies`` are the models that validate each route's JSON body, keyed by
    (method, path): their JSON Schemas (field names as the wire spells them) go in
    ``components.schemas``."""
    unknown = set(bodies) - {(method, path) for method, path, _, _ in ROUTES}
    if unknown:
        raise ValueError(f"request bodies for routes not in ROUTES: {sorted(unknown)}")
    refs, schemas = models_json_schema(
        [(model, "validation") for model in bodies.values()], ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, who in ROUTES:
        operation: dict[str, Any] = {
            "summary": summary,
            "description": f"Who may call: {who}.",
            "responses": {
                "2XX": {"description": "Done (201 when something was created)"},
                "4XX": {"description": "Refused", "content": {"application/json": {"schema": ERROR}}},
            },
        }
        if who in ("member", "admin"):
            operation["security"] = [{"bearer": []}]
        params = [part[1:-1] for part in path.split("/") if part.startswith("{")]
        if params:
            operation["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params
            ]
        body = bodies.get((method, path))
        if body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(body, "validation")]}},
            }
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sonde hub", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
