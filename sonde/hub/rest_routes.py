"""REST routes under `/api/v1`: health, enrollment, agents, keys and tokens."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from quart_trio import QuartTrio

from sonde import __version__
from sonde.hub.keys import (
    create_api_key,
    create_enrollment_token,
    list_api_keys,
    list_enrollment_tokens,
    revoke_api_key,
)
from sonde.hub.policy import Policy
from sonde.hub.rest import ApiError, enroll, parse_body, require_caller
from sonde.hub.tools.views import summarize, visible_agents
from sonde.protocol.messages import NAME_PATTERN

if TYPE_CHECKING:
    from sonde.hub.core import Hub


class NewApiKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9 ._-]+$")]
    role: Literal["admin", "member"] = "member"
    policy: Policy | None = None


class NewEnrollmentToken(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl_s: Annotated[float, Field(ge=60, le=7 * 86400, alias="ttlS")] = 900.0
    name: Annotated[str | None, Field(pattern=NAME_PATTERN)] = None


def install_routes(app: QuartTrio, hub: Hub) -> None:
    @app.get("/api/v1/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.post("/api/v1/agents/enroll")
    async def enroll_route() -> tuple[dict[str, Any], int]:
        return await enroll(hub)

    @app.get("/api/v1/agents")
    async def agents() -> dict[str, Any]:
        caller = await require_caller(hub)
        return {"agents": [summarize(hub, r).model_dump() for r in visible_agents(hub, caller)]}

    @app.post("/api/v1/api-keys")
    async def new_key() -> tuple[dict[str, Any], int]:
        caller = await require_caller(hub, admin=True)
        body = await parse_body(NewApiKey)
        policy = body.policy.model_dump(mode="json") if body.policy else None
        record, secret = await hub.store.write(create_api_key, body.name, body.role, policy)
        await hub.audit(caller.key_id, "rest.api_key.create", record.id, "ok", detail={"name": body.name})
        return {"key": record.model_dump(mode="json"), "secret": secret}, 201

    @app.get("/api/v1/api-keys")
    async def keys() -> dict[str, Any]:
        await require_caller(hub, admin=True)
        records = await hub.store.read(list_api_keys)
        return {"keys": [r.model_dump(mode="json") for r in records]}

    @app.delete("/api/v1/api-keys/<key_id>")
    async def revoke_key(key_id: str) -> dict[str, Any]:
        caller = await require_caller(hub, admin=True)
        revoked = await hub.store.write(revoke_api_key, key_id, time.time())
        await hub.audit(caller.key_id, "rest.api_key.revoke", key_id, "ok" if revoked else "not_found")
        if not revoked:
            raise ApiError(404, "not_found", f"no active API key with id {key_id!r}")
        hub.keys.forget()
        return {"revoked": key_id}

    @app.post("/api/v1/enrollment-tokens")
    async def new_token() -> tuple[dict[str, Any], int]:
        caller = await require_caller(hub, admin=True)
        body = await parse_body(NewEnrollmentToken)
        record, secret = await hub.store.write(create_enrollment_token, body.ttl_s, body.name)
        await hub.audit(caller.key_id, "rest.token.create", record.id, "ok", detail={"name": body.name})
        return {"token": record.model_dump(mode="json"), "secret": secret}, 201

    @app.get("/api/v1/enrollment-tokens")
    async def tokens() -> dict[str, Any]:
        await require_caller(hub, admin=True)
        records = await hub.store.read(list_enrollment_tokens)
        return {"tokens": [r.model_dump(mode="json") for r in records]}
