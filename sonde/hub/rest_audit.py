"""REST's audit routes, `GET /api/v1/audit` and `GET /api/v1/audit/verify`, and the query model
of the first.

Its filters read as `sonde hub audit list` reads them (`sonde.hub.audit_filters`): ``since`` and
``until`` a duration ago (``2h``) or an ISO 8601 time, and ``key`` an API key's id or name. A
plain number stays unix seconds, as the route first took them, so the clients that send one keep
working; so does the guard that refuses milliseconds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError
from quart import request
from quart_trio import QuartTrio
from sqlite_utils import Database

from sonde.echo import echoed
from sonde.hub.audit import verify_audit
from sonde.hub.audit_filters import AmbiguousKeyName, actor_of, time_ago_or_at
from sonde.hub.audit_query import query_audit_page
from sonde.hub.rest import ApiError, require_caller
from sonde.params_words import describe_params_error

if TYPE_CHECKING:
    from pydantic import ModelWrapValidatorHandler

    from sonde.hub.core import Hub

LAST_UNIX_S = 253402300799  # 9999-12-31T23:59:59Z: a larger number is milliseconds, or no time
MOMENT_FORMS = "unix seconds (1767225600), a duration ago (90s, 15m, 2h, 7d) or a time (2026-01-31T09:15:00Z)"
MOMENT_DESCRIPTION = (
    f"{MOMENT_FORMS}; a time without Z or an offset is in the hub's local time; "
    "unix seconds, not milliseconds"
)


def unix_seconds_of(value: object, info: ValidationInfo) -> object:
    """``since`` or ``until`` as the unix seconds it names: a plain number left as it is (the field
    reads it as unix seconds, as it always did), a duration ago or an ISO 8601 time turned into
    one, from the context's ``now`` where it gives one (both bounds read one clock: ``5m`` and
    ``5m`` are no range). A refusal names the forms there are."""
    if not isinstance(value, str) or _is_number(value):
        return value
    now = info.context.get("now", time.time()) if isinstance(info.context, dict) else time.time()
    try:
        return time_ago_or_at(value, now, MOMENT_FORMS)
    except ValueError as exc:  # pydantic would prefix "Value error, "
        raise PydanticCustomError("moment", "{message}", {"message": str(exc)}) from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


Moment = Annotated[
    float | None,
    Field(ge=0, le=LAST_UNIX_S, allow_inf_nan=False),
    BeforeValidator(unix_seconds_of),
    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "maximum": LAST_UNIX_S}, {"type": "string"}]}),
]


class AuditFilters(BaseModel):
    """The query string of GET /api/v1/audit; any other parameter is refused (400 invalid_query)."""

    model_config = ConfigDict(extra="forbid")
    agent: str | None = Field(default=None, max_length=64, description="Only entries with this target")
    key: str | None = Field(
        default=None,
        max_length=64,
        description="Only entries by this actor: an API key's id or name, or cli, hub, agent, anonymous, enrollment",
    )
    action: str | None = Field(
        default=None, max_length=64, description="Only entries whose action starts with this"
    )
    since: Moment = Field(default=None, description=f"Only entries at or after this: {MOMENT_DESCRIPTION}")
    until: Moment = Field(default=None, description=f"Only entries before this: {MOMENT_DESCRIPTION}")
    limit: int = Field(default=100, ge=1, le=1000, description="At most this many, the newest")

    @model_validator(mode="wrap")
    @classmethod
    def _since_before_until(cls, data: Any, handler: ModelWrapValidatorHandler[AuditFilters]) -> AuditFilters:
        filters = handler(data)
        if filters.since is not None and filters.until is not None and filters.since >= filters.until:
            raise PydanticCustomError(  # as they were given: 2h, not the unix seconds it was read as
                "range",
                "since ({since}) must come before until ({until}): the range holds no time",
                {"since": data["since"], "until": data["until"]},
            )
        return filters


def install_audit_routes(app: QuartTrio, hub: Hub) -> None:
    @app.get("/api/v1/audit")
    async def audit() -> dict[str, Any]:
        await require_caller(hub, admin=True, action="rest.audit.query")
        repeated = sorted({name for name in request.args if len(request.args.getlist(name)) > 1})
        if repeated:
            raise ApiError(
                400, "invalid_query", f"{echoed(repeated[0])} is given more than once: give it once"
            )
        try:
            filters = AuditFilters.model_validate(request.args.to_dict(), context={"now": time.time()})
        except ValidationError as exc:
            raise ApiError(400, "invalid_query", describe_params_error(exc)) from None
        try:
            rows, more = await hub.read_audit(audit_page, filters)
        except (AmbiguousKeyName, UnknownKey) as exc:
            raise ApiError(400, "invalid_query", f"key: {exc}; GET /api/v1/api-keys lists them") from None
        return {"entries": rows, "truncated": more}

    @app.get("/api/v1/audit/verify")
    async def verify() -> dict[str, Any]:
        await require_caller(hub, admin=True, action="rest.audit.verify")
        report = await hub.read_audit(verify_audit)
        return {
            "ok": report.ok,
            "rows": report.rows,
            "firstBadSeq": report.first_bad_seq,
            "problem": report.problem,
            "startsAfter": report.starts_after,
        }


class UnknownKey(ValueError):
    """A key filter that names no API key and no actor that is no key."""


def audit_page(db: Database, filters: AuditFilters) -> tuple[list[dict[str, Any]], bool]:
    """The entries ``filters`` match, newest first, and whether older ones match too; ``key`` a
    key's name is read as its id (`actor_of`). AmbiguousKeyName for a name several keys have,
    UnknownKey for one no key has (the CLI says so too: an empty page would hide a typo)."""
    actor = None
    if filters.key is not None:
        found = actor_of(db, filters.key)
        if not found.known:
            raise UnknownKey(f"no API key has the id or name {echoed(filters.key)}")
        actor = found.actor
    return query_audit_page(
        db,
        agent=filters.agent,
        actor=actor,
        since=filters.since,
        until=filters.until,
        action_prefix=filters.action,
        limit=filters.limit,
    )
