"""REST routes under `/api/v1`: health, enrollment, agents, keys and tokens (the audit's are in
`sonde.hub.rest_audit`)."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from quart import request
from quart_trio import QuartTrio

from sonde import __version__
from sonde.hub import agent_removal
from sonde.hub.agent_records import AgentRecord, delete_agent, set_tags
from sonde.hub.attestation import accept_held
from sonde.hub.audit import AuditEntry, audit_entry
from sonde.hub.enrollment_tokens import (
    TokenNotRevocable,
    create_enrollment_token,
    list_enrollment_tokens,
    revoke_enrollment_token,
)
from sonde.hub.keys import LastAdminKey, create_api_key, list_api_keys, revoke_api_key_named
from sonde.hub.openapi import openapi_document
from sonde.hub.policy import NewPolicy
from sonde.hub.probing import resolve_agent, run_probe_for, visible_agents_now
from sonde.hub.rest import ApiError, enroll, parse_body, require_caller
from sonde.hub.rest_audit import AuditFilters, install_audit_routes
from sonde.hub.tools.agents import AgentOverviewInput, agent_overview
from sonde.hub.tools.base import TagQuery, ToolCall
from sonde.hub.tools.diagnose import DiagnoseInput, diagnose
from sonde.hub.tools.health import HealthCheckInput, health_check
from sonde.hub.tools.probe import ProbeInput, ProbeOutput
from sonde.hub.tools.views import status_counts, summarize
from sonde.params_words import describe_params_error
from sonde.protocol.enrollment import EnrollRequest
from sonde.protocol.names import NAME_PATTERN, refuse_secret_shape

if TYPE_CHECKING:
    from sonde.hub.core import Hub


MAX_ID_SHOWN = 64


class NewApiKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9 ._-]+$")]
    role: Literal["admin", "member"] = "member"
    policy: NewPolicy | None = None


class NewEnrollmentToken(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # strict: "900" or true is a mistake to point out, not a lifetime to guess
    ttl_s: Annotated[float, Field(ge=60, le=7 * 86400, alias="ttlS", strict=True)] = 900.0
    name: Annotated[str | None, Field(pattern=NAME_PATTERN), AfterValidator(refuse_secret_shape)] = None


class TagsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tags: list[Annotated[str, Field(max_length=65)]] = Field(max_length=64)


def install_routes(app: QuartTrio, hub: Hub) -> None:
    install_key_routes(app, hub)
    install_agent_routes(app, hub)
    install_probe_routes(app, hub)
    install_audit_routes(app, hub)

    @app.get("/api/v1/openapi.json")
    async def openapi() -> dict[str, Any]:
        return rest_openapi()


@functools.cache
def rest_openapi() -> dict[str, Any]:
    """The OpenAPI document, with the models each route validates its body with (built once)."""
    return openapi_document(
        {
            ("post", "/api/v1/agents/enroll"): EnrollRequest,
            ("put", "/api/v1/agents/{agent}/tags"): TagsBody,
            ("post", "/api/v1/probe"): ProbeInput,
            ("post", "/api/v1/diagnose"): DiagnoseInput,
            ("post", "/api/v1/health-check"): HealthCheckInput,
            ("post", "/api/v1/api-keys"): NewApiKey,
            ("post", "/api/v1/enrollment-tokens"): NewEnrollmentToken,
        },
        {("get", "/api/v1/agents"): AgentFilters, ("get", "/api/v1/audit"): AuditFilters},
    )


def install_key_routes(app: QuartTrio, hub: Hub) -> None:
    @app.get("/api/v1/health")
    async def health() -> tuple[dict[str, Any], int]:
        problem = health_problem(hub)  # for monitoring: writes or calls are refused meanwhile
        if problem is not None:
            return {"status": "degraded", "version": __version__, "problem": problem}, 503
        return {"status": "ok", "version": __version__}, 200

    @app.post("/api/v1/agents/enroll")
    async def enroll_route() -> tuple[dict[str, Any], int]:
        return await enroll(hub)

    @app.post("/api/v1/api-keys")
    async def new_key() -> tuple[dict[str, Any], int]:
        caller = await require_caller(hub, admin=True, action="rest.api_key.create")
        body = await parse_body(NewApiKey)
        policy = body.policy.model_dump(mode="json") if body.policy else None
        detail = {"name": body.name, "role": body.role, "policy": policy}
        try:
            record, secret = await hub.write_audited(
                lambda db: create_api_key(db, body.name, body.role, policy),
                lambda made: audit_entry(
                    caller.key_id, "rest.api_key.create", made[0].id, "ok", detail=detail
                ),
            )
        except ValueError as exc:  # a name of spaces only, a policy on an admin key
            raise ApiError(400, "invalid_body", str(exc)) from None
        return {"key": record.model_dump(mode="json"), "secret": secret}, 201

    @app.get("/api/v1/api-keys")
    async def keys() -> dict[str, Any]:
        await require_caller(hub, admin=True, action="rest.api_key.list")
        records = await hub.store.read(list_api_keys)
        return {"keys": [r.model_dump(mode="json") for r in records]}

    @app.delete("/api/v1/api-keys/<key_id>")
    async def revoke_key(key_id: str) -> dict[str, Any]:
        caller = await require_caller(hub, admin=True, action="rest.api_key.revoke")
        if len(key_id) > MAX_ID_SHOWN:  # ids are 32 characters, secrets 49: a longer one names no key
            raise ApiError(404, "not_found", f"no API key has an id that long ({len(key_id)} characters)")
        try:  # by id, or by the key's secret (never shown, never recorded: the row names the id)
            done = await hub.write_audited(
                lambda db: revoke_api_key_named(db, key_id, time.time()),
                lambda done: audit_entry(
                    caller.key_id, "rest.api_key.revoke", done.target, "ok" if done.revoked else "not_found"
                ),
            )
        except LastAdminKey as exc:
            await hub.audit(caller.key_id, "rest.api_key.revoke", exc.key_id, "refused")
            raise ApiError(409, "last_admin_key", str(exc)) from None
        if not done.revoked:
            raise ApiError(404, "not_found", f"{done.message}; GET /api/v1/api-keys lists them")
        hub.keys.forget()
        return {"revoked": done.target}

    @app.post("/api/v1/enrollment-tokens")
    async def new_token() -> tuple[dict[str, Any], int]:
        caller = await require_caller(hub, admin=True, action="rest.token.create")
        body = await parse_body(NewEnrollmentToken)
        detail = {"name": body.name, "ttl_s": body.ttl_s}
        record, secret = await hub.write_audited(
            lambda db: create_enrollment_token(db, body.ttl_s, body.name),
            lambda made: audit_entry(caller.key_id, "rest.token.create", made[0].id, "ok", detail=detail),
        )
        return {"token": record.model_dump(mode="json"), "secret": secret}, 201

    @app.get("/api/v1/enrollment-tokens")
    async def tokens() -> dict[str, Any]:
        await require_caller(hub, admin=True, action="rest.token.list")
        records = await hub.store.read(list_enrollment_tokens, time.time())
        return {"tokens": [r.model_dump(mode="json") for r in records]}

    @app.delete("/api/v1/enrollment-tokens/<token_id>")
    async def revoke_token(token_id: str) -> dict[str, Any]:
        caller = await require_caller(hub, admin=True, action="rest.token.revoke")
        if len(token_id) > MAX_ID_SHOWN:  # ids are 32 characters: a longer one names no token
            raise ApiError(
                404, "not_found", f"no enrollment token has an id that long ({len(token_id)} characters)"
            )
        try:
            token = await hub.write_audited(
                lambda db: revoke_enrollment_token(db, token_id, time.time()),
                lambda token: audit_entry(
                    caller.key_id, "rest.token.revoke", token.id, "ok", detail={"name": token.name}
                ),
            )
        except TokenNotRevocable as exc:
            await hub.audit(
                caller.key_id, "rest.token.revoke", exc.token_id, "not_found", detail={"state": exc.state}
            )
            raise ApiError(
                404, "not_found", f"{exc.message}; GET /api/v1/enrollment-tokens lists them"
            ) from None
        return {"revoked": token.id}


def health_problem(hub: Hub) -> str | None:
    """Why the hub is degraded, with SQLite's words; None while its database takes writes."""
    audit_failure = hub.audit_queue.failure
    if audit_failure is not None:
        return (
            f"the audit log cannot be written ({audit_failure}); calls are refused until it can "
            "(see the hub's log)"
        )
    store_failure = hub.store.health.failure
    if store_failure is not None:
        return (
            f"the hub cannot write its database ({store_failure}); changes are refused (503) until "
            "a write works again (see the hub's log; often: free disk space where sonde.db is)"
        )
    return None


def install_agent_routes(app: QuartTrio, hub: Hub) -> None:
    @app.get("/api/v1/agents")
    async def agents() -> dict[str, Any]:
        caller = await require_caller(hub, action="rest.agent.list")
        try:
            filters = AgentFilters.model_validate(
                {**request.args.to_dict(flat=True), "tag": request.args.getlist("tag")}
            )
        except ValidationError as exc:
            raise ApiError(400, "invalid_query", describe_params_error(exc)) from None
        summaries = [summarize(hub, r) for r in await visible_agents_now(hub, caller, filters.tag)]
        matched = [s for s in summaries if filters.status is None or s.status == filters.status]
        listed = matched if filters.limit is None else matched[: filters.limit]
        return {
            "agents": [s.model_dump() for s in listed],
            "total": len(summaries),
            "by_status": status_counts(summaries),
            "matched": len(matched),
            "truncated": len(listed) < len(matched),
        }

    @app.get("/api/v1/agents/<agent>")
    async def agent(agent: str) -> dict[str, Any]:
        caller = await require_caller(hub, action="rest.agent.overview")
        record = resolve_agent(hub, caller, agent)  # first: a name no agent can have is a 404, not a 500
        args = AgentOverviewInput(agent=record.name)
        return (await agent_overview(ToolCall(hub, caller), args)).model_dump(mode="json")

    @app.delete("/api/v1/agents/<agent>")
    async def remove_agent(agent: str) -> dict[str, Any]:
        caller = await require_caller(hub, admin=True, action="rest.agent.remove")
        record = resolve_agent(hub, caller, agent)
        target, detail = agent_removal.removal_audit(record)
        entry = audit_entry(caller.key_id, "rest.agent.remove", target, "ok", detail=detail)
        await hub.write_audited(lambda db: delete_agent(db, record.id, time.time()), lambda _: entry)
        hub.fleet.forget(record.id, agent_removal.REMOVED_BY_ADMIN)
        return {"removed": record.id, "name": record.name}

    @app.put("/api/v1/agents/<agent>/tags")
    async def put_tags(agent: str) -> dict[str, Any]:
        caller = await require_caller(hub, admin=True, action="rest.agent.tags")
        record = resolve_agent(hub, caller, agent)
        body = await parse_body(TagsBody)

        def tags_entry(updated: AgentRecord | None) -> AuditEntry | None:
            if updated is None:  # removed meanwhile: nothing changed
                return None
            return audit_entry(
                caller.key_id, "rest.agent.tags", record.name, "ok", detail={"tags": updated.tags}
            )

        try:
            updated = await hub.write_audited(lambda db: set_tags(db, record.id, body.tags), tags_entry)
        except ValueError as exc:
            raise ApiError(400, "invalid_body", str(exc)) from None
        if updated is None:
            raise ApiError(404, "not_found", f"agent {agent!r} was removed")
        hub.fleet.keep_fields(updated, "tags")
        return {"agent": record.name, "tags": updated.tags}

    @app.post("/api/v1/agents/<agent>/attestation/accept")
    async def accept_attestation(agent: str) -> dict[str, Any]:
        caller = await require_caller(hub, admin=True, action="rest.agent.attestation.accept")
        record = resolve_agent(hub, caller, agent)
        accepted = await accept_held(hub, record, caller.key_id)
        if accepted is None:
            raise ApiError(404, "not_found", f"agent {agent!r} was removed")
        return {"agent": record.name, "status": hub.fleet.status(record.id), "accepted": accepted[1]}

    @app.get("/api/v1/packs")
    async def packs() -> dict[str, Any]:
        caller = await require_caller(hub, action="rest.pack.list")
        listed = []
        for pack in hub.packs.packs.values():
            descriptor = pack.descriptor().model_dump(mode="json", by_alias=True)
            descriptor["probes"] = [p for p in descriptor["probes"] if caller.allows_probe(p["name"])]
            listed.append(descriptor)
        return {"packs": listed}


def install_probe_routes(app: QuartTrio, hub: Hub) -> None:
    @app.post("/api/v1/probe")
    async def probe() -> dict[str, Any]:
        caller = await require_caller(hub, action="rest.probe")
        body = await parse_body(ProbeInput)
        record = resolve_agent(hub, caller, body.agent)
        reading = await run_probe_for(hub, caller, record, body.probe, dict(body.params), via="rest.probe")
        return ProbeOutput(**reading.__dict__).model_dump(mode="json")

    @app.post("/api/v1/diagnose")
    async def diagnose_route() -> dict[str, Any]:
        caller = await require_caller(hub, action="rest.diagnose")
        body = await parse_body(DiagnoseInput)
        return (await diagnose(ToolCall(hub, caller), body, via="rest.diagnose")).model_dump(mode="json")

    @app.post("/api/v1/health-check")
    async def health_check_route() -> dict[str, Any]:
        caller = await require_caller(hub, action="rest.health_check")
        body = await parse_body(HealthCheckInput)
        answer = await health_check(ToolCall(hub, caller), body, via="rest.health_check")
        return answer.model_dump(mode="json")


class AgentFilters(BaseModel):
    """The query string of GET /api/v1/agents; any other parameter is refused (400 invalid_query)."""

    model_config = ConfigDict(extra="forbid")

    tag: list[TagQuery] = Field(  # as the tools take tags: a blank one would match every agent
        default_factory=list,
        max_length=16,
        description="Only agents with this tag (a leading '#' is ignored); repeated, only those with every one",
    )
    status: Literal["online", "offline", "degraded"] | None = Field(
        default=None, description="Only agents in this status ('total' and 'by_status' still count all)"
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="At most this many agents, the first by name (default: all)",
    )
