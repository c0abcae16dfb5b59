"""`list_capabilities`: what every reachable agent can be asked, so a model never guesses.

It discloses probes in two steps. Called plainly it names every probe the key may run with the
first sentence of its description and no schema: with the built-in packs every description and
schema came to some 60,000 characters, past what a client shows a model (Claude Code files a
result over ~50,000 and shows 2 KB of it). Called with ``probes`` (names or globs) it gives the
matching probes whole, each with its parameter JSON schema, and says which globs matched nothing.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from sonde.echo import clipped
from sonde.hub.auth import Caller
from sonde.hub.diagnostics import describe_categories
from sonde.hub.policy import checked_probe_glob, unmatched_probe_globs
from sonde.hub.probing import schema_call, visible_agents
from sonde.hub.tools.base import TAGS_FIELD, TagQuery, ToolCall, ToolInput, ToolOutput, ToolSpec
from sonde.hub.tools.views import runnable_categories
from sonde.protocol.messages import ProbeDescriptor


class PackOut(BaseModel):
    name: str
    version: str
    probes: list[str]


class AgentCapabilities(BaseModel):
    agent: str
    status: str
    packs: list[PackOut]
    categories: list[str]


class ProbeInfo(BaseModel):
    name: str
    description: str = Field(
        description="Its first sentence, unless 'probes' named it: then all of it, with its params_schema."
    )
    params_schema: dict[str, Any] | None = Field(
        default=None,
        description="Its parameters' JSON schema, only for a probe 'probes' named (null otherwise).",
    )


class CategoryInfo(BaseModel):
    category: str
    description: str


# Each agent shown names its packs' probes (some 1,600 characters with the built-in packs): 25 of
# them took the overview past the ~50,000 characters a client shows whole. list_agents lists more.
DEFAULT_AGENTS_SHOWN = 10
MAX_PROBE_GLOBS = 20
# A summary is one line a model skims: 53 probes of the built-in packs in some 10 KB of JSON, not
# the 60 KB of full descriptions and schemas that Claude Code moves to a file it does not show.
SUMMARY_CHARS = 120
# The most probes one answer lists: the built-in packs have 53; agents of another pack, or many
# hostile ones, could make it any size (each agent may describe 64 packs of 256 probes).
MAX_PROBES_LISTED = 400  # with their one-line summaries (about 150 characters each)
MAX_PROBES_DETAILED = 100  # with whole descriptions and schemas (each up to 8 KiB and more)
AGENTS_WORDS = "(described by its agents, not by this hub) "  # a probe of a pack the hub does not have
EXAMPLE_PROBE = "system.files.read"
EXAMPLE_CALL = schema_call([EXAMPLE_PROBE])

ProbeGlob = Annotated[
    str,
    Field(max_length=100, description="A probe name or glob, e.g. 'system.files.read' or 'postgres.*'."),
    AfterValidator(checked_probe_glob),
]


class CapabilitiesInput(ToolInput):
    tags: Annotated[list[TagQuery], TAGS_FIELD]
    probes: list[ProbeGlob] = Field(
        default_factory=list,
        max_length=MAX_PROBE_GLOBS,
        description="Only probes matching these names or globs, each with its full description and "
        "parameter JSON schema, e.g. ['postgres.*']. Without it: every probe, with a one-line summary.",
    )
    limit: int = Field(
        default=DEFAULT_AGENTS_SHOWN,
        ge=1,
        le=1000,
        description="At most this many agents in 'agents' (by name); probes and categories cover all of them.",
    )


class CapabilitiesOutput(ToolOutput):
    agents: list[AgentCapabilities]
    probes: list[ProbeInfo]
    categories: list[CategoryInfo]
    matched: int = Field(description="Agents you can reach (within tags); 'agents' holds the first 'limit'.")
    truncated: bool = Field(description="True when more agents matched than 'limit'.")
    unmatched_probes: list[str] = Field(
        description="The globs of 'probes' matching no probe you can run on these agents (see 'note')."
    )
    probes_left_out: int = Field(
        default=0,
        description=f"Probes that matched but are not in 'probes' (at most {MAX_PROBES_LISTED} are listed, "
        f"{MAX_PROBES_DETAILED} with details): ask for fewer with 'probes' globs.",
    )
    note: str | None = Field(default=None, description="What to do next, when there is something to say.")


LIST_CAPABILITIES = f"""Discover what you can ask: every agent you can reach with its status, packs
(with versions), the probe names and diagnostic categories your key can run; then each probe ONCE
with a one-line summary, and each category with what it checks. For probes' parameters call it with
probes, e.g. {EXAMPLE_CALL} or probes=["postgres.*"]: those probes with their full
description and parameter JSON schema. Call it before probe or diagnose whenever you are not sure of
a name. On a large fleet 'agents' shows the first 'limit' (default {DEFAULT_AGENTS_SHOWN}) by name;
the probes and categories cover every agent."""


async def list_capabilities(call: ToolCall, args: CapabilitiesInput) -> CapabilitiesOutput:
    hub, caller = call.hub, call.caller
    records = visible_agents(hub, caller, args.tags)
    runnable: dict[str, dict[str, Any]] = {}  # every probe the key may run on these agents, by name
    # Agents share their packs' descriptions (`sonde.hub.shared_packs`): each is looked at once,
    # not once per agent (10,000 agents took 1.6 s of the event loop), and by its identity, which
    # stays its own while ``records`` holds it.
    pack_views: dict[int, PackOut] = {}
    category_views: dict[tuple[int, ...], list[str]] = {}
    agents: list[AgentCapabilities] = []
    used_categories: set[str] = set()
    for record in records:
        packs = []
        for pack in record.packs:
            view = pack_views.get(id(pack))
            if view is None:
                view = pack_views[id(pack)] = describe_pack(pack, caller, args.probes, runnable)
            if view.probes:  # a pack with nothing the key may run (or asked for) would only be noise
                packs.append(view)
        shared = tuple(id(pack) for pack in record.packs)  # its packs, at their versions
        categories = category_views.get(shared)
        if categories is None:
            categories = category_views[shared] = runnable_categories(hub, caller, record)
            used_categories.update(categories)
        if len(agents) < args.limit:
            status = hub.fleet.status(record.id)
            agents.append(
                AgentCapabilities(agent=record.name, status=status, packs=packs, categories=categories)
            )
    descriptions = describe_categories(hub)
    known = hub.packs.described()
    unmatched = unmatched_probe_globs(args.probes, runnable)
    listed = [name for name in sorted(runnable) if wanted(name, args.probes)]
    most = MAX_PROBES_DETAILED if args.probes else MAX_PROBES_LISTED
    left_out = max(0, len(listed) - most)
    return CapabilitiesOutput(
        agents=agents,
        matched=len(records),
        truncated=len(records) > args.limit,
        probes=[
            probe_info(in_hub_words(runnable[name], known.get(name)), detailed=bool(args.probes))
            for name in listed[:most]
        ],
        probes_left_out=left_out,
        categories=[
            CategoryInfo(category=c, description=descriptions.get(c, "")) for c in sorted(used_categories)
        ],
        unmatched_probes=unmatched,
        note=" ".join(
            note
            for note in (
                left_out_words(left_out, listed[most:]),
                next_step(
                    args.probes, unmatched, sorted(runnable), no_agent=not records, tagged=bool(args.tags)
                ),
            )
            if note
        )
        or None,
    )


def left_out_words(left_out: int, names: list[str]) -> str | None:
    """What to do about probes an answer had no room for; None when it listed them all."""
    if not left_out:
        return None
    packs = sorted({name.split(".", 1)[0] + ".*" for name in names})
    return (
        f"{left_out} more probes matched but are not listed (from {clipped(', '.join(packs), 400)}): "
        "ask for them with narrower 'probes' globs, e.g. probes=[\"" + packs[0] + '"].'
    )


def describe_pack(
    pack: dict[str, Any], caller: Caller, globs: list[str], runnable: dict[str, dict[str, Any]]
) -> PackOut:
    """``pack`` as an agent's entry shows it: the probes ``caller`` may run that match ``globs``
    (all of them when there is none); each probe ``caller`` may run is added to ``runnable``."""
    allowed = [probe for probe in pack.get("probes", []) if caller.allows_probe(probe["name"])]
    for probe in allowed:
        runnable.setdefault(probe["name"], probe)
    shown = [probe["name"] for probe in allowed if wanted(probe["name"], globs)]
    return PackOut(name=pack["name"], version=pack["version"], probes=shown)


def in_hub_words(probe: dict[str, Any], known: ProbeDescriptor | None) -> dict[str, Any]:
    """``probe`` as the model is told of it: in the words of the hub's own pack when it has the
    probe, never an agent's (whichever agent came first by name described it to the whole fleet,
    so one agent could rewrite what a model reads of a built-in probe: a hostile-agent review);
    a probe only agents have is marked as their words."""
    if known is not None:
        return {"name": probe["name"], "description": known.description, "paramsSchema": known.params_schema}
    return {**probe, "description": f"{AGENTS_WORDS}{probe['description']}"}


def wanted(name: str, globs: list[str]) -> bool:
    return not globs or any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def probe_info(probe: dict[str, Any], *, detailed: bool) -> ProbeInfo:
    """A probe with its whole description and schema, or (not ``detailed``) its one-line summary."""
    if detailed:
        return ProbeInfo(
            name=probe["name"], description=probe["description"], params_schema=probe["paramsSchema"]
        )
    return ProbeInfo(name=probe["name"], description=summary(probe["description"]))


# The end of a description's first sentence: a period ending a word, not the one of "e.g." or "i.e.".
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.(?=\s|$)")


def summary(description: str) -> str:
    """The first sentence of ``description`` on one line, cut at a word to `SUMMARY_CHARS`."""
    text = " ".join(description.split())
    if (end := SENTENCE_END.search(text)) is not None:
        text = text[: end.end()]
    if len(text) <= SUMMARY_CHARS:
        return text
    return text[: SUMMARY_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:(") + "…"


def next_step(
    globs: list[str],
    unmatched: list[str],
    runnable: list[str],
    *,
    no_agent: bool = False,
    tagged: bool = False,
) -> str | None:
    """What the model should read before it goes on: where the schemas are, or what its globs missed."""
    if no_agent:  # not the key's policy: there is no agent to run a probe on
        which = "has these tags" if tagged else "is enrolled"
        return f"No agent you can see {which}, so no probe is listed: list_agents() names the agents and their tags."
    if not globs:
        if not runnable:
            return "Your key runs no probe on these agents."
        example = EXAMPLE_PROBE if EXAMPLE_PROBE in runnable else runnable[0]  # one the key may run
        return (
            "Probes show their first sentence only. For full descriptions and parameter schemas call "
            f"{schema_call([example])} (globs work)."
        )
    if not unmatched:
        return None
    if not runnable:
        return f"No probe you can run on these agents matches {quoted(unmatched)}: your key runs none here."
    close = dict.fromkeys(
        name for glob in unmatched for name in difflib.get_close_matches(glob, runnable, n=3)
    )
    packs = sorted({name.split(".", 1)[0] + ".*" for name in runnable})
    nearby = f" Close: {', '.join(close)}." if close else ""
    return (
        f"No probe you can run on these agents matches {quoted(unmatched)}.{nearby} "
        f"Packs with probes you can run: {', '.join(packs)}."
    )


def quoted(globs: list[str]) -> str:
    return ", ".join(repr(glob) for glob in globs)


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("list_capabilities", LIST_CAPABILITIES, CapabilitiesInput, CapabilitiesOutput, list_capabilities)
]
