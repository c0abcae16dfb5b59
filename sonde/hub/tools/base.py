"""What an MCP tool is here: a typed input, a typed output, one async handler.

Handlers raise `ToolError` with a message that tells the model what to do
next; the MCP layer turns it into a tool error result.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

import trio
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, ValidationInfo, field_validator

from sonde.hub.errors import HubError
from sonde.protocol.names import worded

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
    from sonde.hub.core import Hub

InT = TypeVar("InT", bound=BaseModel)
OutT = TypeVar("OutT", bound=BaseModel)
ItemT = TypeVar("ItemT", bound=BaseModel)
# the items of one answer's list, as JSON: past it the list is cut (truncated), for it would swamp a
# model's context (1,000 agents with six packs each were some 312,000 characters) and some clients
# refuse a tool's answer that large
LIST_BUDGET_BYTES = 96 * 1024

AGENT_NAME_OR_ID = worded(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
    "1 to 64 letters, digits, '.', '_' or '-', the first a letter or digit (an agent's name or id "
    "as list_agents shows it)",
)
AGENT_FIELD = Field(
    min_length=1,
    max_length=64,
    pattern=AGENT_NAME_OR_ID,
    description="Agent name (or id), exactly as list_agents shows it.",
)
# One tag to filter by: a blank one, or a bare '#', would match every agent.
TagQuery = Annotated[
    str,
    Field(
        max_length=65,
        pattern=worded(r"[^#\s]", "a tag: not blank, and more than a '#'"),
        description="A tag, with or without a leading '#'.",
    ),
]
TAGS_FIELD: Any = Field(
    default_factory=list,
    max_length=16,
    description="Only agents carrying ALL these tags. A leading '#' is ignored. "
    "Use tags only when the user names them (e.g. '#prod').",
)


class ToolInput(BaseModel):
    """A tool's arguments: only the JSON types its schema names.

    Strict, so ``"5"`` or ``true`` is refused where the schema says integer or
    number rather than coerced (a JSON integer still passes for a number). One
    strict refusal JSON Schema does not make: a whole number written ``5.0`` is
    an integer there, so it is taken as one.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def whole_number_as_integer(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, float) and value.is_integer() and info.field_name is not None:
            if cls.model_fields[info.field_name].annotation is int:
                return int(value)
        return value


class ToolOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")


ToolError = HubError  # a refusal or failure the model should read and act on


ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


async def no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


# A duration as a tool answers it: to the hundredth of a millisecond (perf_counter's 15 digits
# would be tokens the model reads and people skim, with nothing in them).
DurationMs = Annotated[float, PlainSerializer(lambda ms: round(ms, 2), return_type=float)]
PROGRESS_INTERVAL_S = 0.2


class ThrottledProgress:
    """Progress for a fleet-wide call: the first and the last report, and at most one per interval between.

    A thousand agents finishing within a second would otherwise be a thousand
    notifications for the client to read and the hub to send; a person (or a
    model) needs a few per second.

    Reports go out one at a time, and only a count above the last one sent (MCP: progress
    increases). Agents finishing together report from their own tasks: sent side by side,
    the last report could reach the client before an earlier one still on its way (4 of 4,
    then 1 of 4). One that comes while another is being sent is dropped, unless it is the last.
    """

    def __init__(self, report: ProgressFn, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self._report = report
        self._interval_s = interval_s
        self._last: float | None = None
        self._sent: float | None = None
        self._sending = trio.Lock()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        final = progress == total
        if not final and (self._sending.locked() or self._throttled()):
            return
        async with self._sending:
            if self._sent is not None and progress <= self._sent:
                return
            self._last = time.monotonic()
            self._sent = progress
            await self._report(progress, total, message)

    def _throttled(self) -> bool:
        return self._last is not None and time.monotonic() - self._last < self._interval_s


@dataclass
class ToolCall:
    hub: Hub
    caller: Caller
    progress: ProgressFn = no_progress


@dataclass(frozen=True, slots=True)
class AgentWait:
    """What a tool call waits for, as a keepalive names it (``alpha: system.network.traceroute``),
    and the call's deadline in seconds (None: not known)."""

    awaited: str
    deadline_s: float | None


# How a call with these (validated) arguments waits on agents; None: it answers from the hub at once.
WaitsOnAgents = Callable[["Hub", Any], AgentWait | None]


@dataclass(frozen=True)
class ToolSpec(Generic[InT, OutT]):
    name: str
    description: str
    input_model: type[InT]
    output_model: type[OutT]
    handler: Callable[[ToolCall, InT], Awaitable[OutT]]
    reports_progress: bool = False  # the tool reports its own progress (health_check: agents checked)
    # a call that waits on agents and asks for progress is answered over SSE; see sonde.hub.mcp_answers
    waits_on_agents: WaitsOnAgents | None = None

    def agent_wait(self, hub: Hub, arguments: Mapping[str, Any]) -> AgentWait | None:
        """What a call with ``arguments`` waits on; None if it waits on no agent or its
        arguments are invalid (it is refused at once)."""
        if self.waits_on_agents is None:
            return None
        try:
            args = self.input_model.model_validate(arguments)
        except ValueError:  # pydantic's ValidationError is one
            return None
        return self.waits_on_agents(hub, args)

    def input_schema(self) -> dict[str, Any]:
        schema = self.input_model.model_json_schema()
        schema.setdefault("properties", {})
        schema["additionalProperties"] = False
        return schema

    def output_schema(self) -> dict[str, Any]:
        return self.output_model.model_json_schema()


def within_budget(items: list[ItemT], budget_bytes: int = LIST_BUDGET_BYTES) -> list[ItemT]:
    """The first of ``items`` whose JSON fits in ``budget_bytes`` (the first one always)."""
    used = 0
    for count, item in enumerate(items):
        used += len(item.model_dump_json()) + 1
        if used > budget_bytes and count:
            return items[:count]
    return items
