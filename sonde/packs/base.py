"""What a pack and a probe are.

A pack groups probes under a name and a version, says what it needs on the
machine (commands, files, groups) and how to tell whether it applies here.
A probe is an async function with a typed params model and a typed result
model; its name has the shape ``pack.area.metric``.

    PACK = Pack("system", "1.0.0", "CPU, memory, disks ...")

    @PACK.probe("system.memory.usage", "RAM and swap in bytes ...")
    async def memory_usage(ctx: ProbeContext, params: NoParams) -> MemoryUsage: ...
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import re
import shutil
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

from sonde.packs.packages import install_hint
from sonde.packs.runbook import SERVICE_DOWN, SERVICE_FULL
from sonde.protocol.names import PROBE_NAME_PATTERN

if typing.TYPE_CHECKING:
    from sonde.packs.context import ProbeContext
    from sonde.packs.runbook import Runbook
    from sonde.protocol.messages import PackDescriptor, ProbeDescriptor

log = logging.getLogger(__name__)
DEFAULT_PROBE_TIMEOUT_S = 15.0


class Params(BaseModel):
    """Base of probe params: frozen, no unknown fields. Bound every number, pattern every string.

    Built on first use (``defer_build``), not at import: a process loads every
    probe of a pack but runs few of them, and building them all costs time and RSS.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class NoParams(Params):
    """For probes that take nothing."""


class Result(BaseModel):
    """Base of probe results, built on first use like `Params`."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    _newest_last: frozenset[str] = PrivateAttr(default=frozenset())

    def newest_last(self, *fields: str) -> Self:
        """Mark top-level list ``fields`` as "the last N", oldest first: when the result is
        cut to fit the agent's size cap, they lose their oldest items, not their newest."""
        unknown = set(fields) - set(type(self).model_fields)
        if unknown:
            raise ValueError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        self._newest_last = frozenset(fields)
        return self

    @property
    def lists_keeping_their_end(self) -> frozenset[str]:
        return self._newest_last


class OutOfTime(Exception):
    """A probe saw its deadline come before it could do its work, and says why (its message): it
    ends as a probe past its deadline does (code ``timeout``), with that reason added."""


class ProbeUnavailable(Exception):
    """The probe cannot run on this machine (missing command, service or permission)."""


class ServiceRefused(ProbeUnavailable):
    """The server a pack talks to took no connection: nothing accepts one where it is configured
    (down: stopped, crashed, starting or shutting down) or it turns new clients away at its
    connection limit (full). Unlike a missing driver or a refused login, that is the outage
    itself, which a runbook reports as a critical finding (`sonde.packs.runbook`)."""

    def __init__(self, message: str, *, full: bool) -> None:
        super().__init__(message)
        self.code = SERVICE_FULL if full else SERVICE_DOWN


class PackLoadError(Exception):
    """A pack's probe modules would not import: its files changed under this process, or are broken."""


@dataclass(frozen=True)
class Requirements:
    commands: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        """What is absent on this machine, as short phrases."""
        gaps = [f"command {c!r}{install_hint(c)}" for c in self.commands if shutil.which(c) is None]
        gaps += [f"file {f!r}" for f in self.files if not os.path.exists(f)]
        return gaps


P = TypeVar("P", bound=Params)
R = TypeVar("R", bound=BaseModel)
ProbeFunction = Callable[["ProbeContext", P], Awaitable[R]]


@dataclass(frozen=True)
class ProbeSpec(Generic[P, R]):
    name: str
    description: str
    params: type[P]
    result: type[R]
    run: ProbeFunction[P, R]
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    requires: Requirements = Requirements()

    def params_schema(self) -> dict[str, Any]:
        schema = self.params.model_json_schema()
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
        schema["additionalProperties"] = False
        return schema

    def descriptor(self) -> ProbeDescriptor:
        from sonde.protocol.messages import ProbeDescriptor  # the wire models, only when needed

        return ProbeDescriptor(
            name=self.name,
            description=self.description,
            params_schema=self.params_schema(),
            timeout_s=self.timeout_s,
        )


@dataclass(frozen=True)
class Detection:
    detected: bool
    reason: str


@dataclass
class Pack:
    """A named, versioned group of probes. Built at import, read-only afterwards.

    ``modules`` names the modules that declare the pack's probes and runbooks,
    in declaration order. They are imported on the first use of `probes` or
    `runbooks`, not with the pack: telling whether a pack applies here
    (`detection`) must not cost its probe models, so a process pays only for
    the packs it offers. Probes keep the order of ``modules`` whatever imported
    one of them first (another pack's helper import, a test).
    """

    name: str
    version: str
    description: str
    requires: Requirements = Requirements()
    detect: Callable[[], Detection] | None = None
    categories: tuple[str, ...] = ()
    # the names it reads under ``packs.<name>`` in the agent config: another name there is a typo
    settings: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    # `describe()` saved as JSON (`python -m sonde.packs.describe` writes it): the register
    # is built from it without importing the probe modules, which wait for a probe to run.
    described_by: Path | None = None
    _probes: dict[str, ProbeSpec[Any, Any]] = field(default_factory=dict, init=False, repr=False)
    _runbooks: dict[str, Runbook] = field(default_factory=dict, init=False, repr=False)
    _loaded: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def probes(self) -> dict[str, ProbeSpec[Any, Any]]:
        self._load_modules()
        return self._probes

    @property
    def runbooks(self) -> dict[str, Runbook]:
        self._load_modules()
        return self._runbooks

    def _load_modules(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # first: the modules being imported register through this pack
        module = ""
        try:
            for module in self.modules:
                importlib.import_module(module)
        except Exception as exc:
            self._loaded = False  # the next use raises again rather than offering half a pack
            raise PackLoadError(
                f"pack {self.name} {self.version} could not load its probe code"
                f" ({module}: {type(exc).__name__}: {exc}). If Sonde or this pack was upgraded"
                " or removed while this process ran, restart it (sonde-agent.service under"
                " systemd); otherwise reinstall the pack"
            ) from exc
        except BaseException:
            self._loaded = False
            raise
        rank = {module: i for i, module in enumerate(self.modules)}
        ordered = sorted(self._probes.values(), key=lambda spec: rank.get(spec.run.__module__, len(rank)))
        self._probes.clear()
        self._probes.update((spec.name, spec) for spec in ordered)

    def probe(
        self,
        name: str,
        description: str,
        *,
        timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
        requires: Requirements = Requirements(),
    ) -> Callable[[ProbeFunction[P, R]], ProbeFunction[P, R]]:
        """Declare a probe; params and result models come from the annotations."""
        if not re.fullmatch(PROBE_NAME_PATTERN, name) or not name.startswith(self.name + "."):
            raise ValueError(f"probe name {name!r} must look like '{self.name}.area.metric'")

        def register(function: ProbeFunction[P, R]) -> ProbeFunction[P, R]:
            hints = typing.get_type_hints(function)
            params_model = hints["params"]
            result_model = hints["return"]
            if name in self._probes:
                raise ValueError(f"probe {name!r} declared twice")
            self._probes[name] = ProbeSpec(
                name, inspect.cleandoc(description), params_model, result_model, function, timeout_s, requires
            )
            return function

        return register

    def detection(self) -> Detection:
        gaps = self.requires.missing()
        if gaps:
            return Detection(False, "missing " + ", ".join(gaps))
        if self.detect is not None:
            try:
                return self.detect()
            except Exception as exc:  # a broken third-party detector must not take the agent down
                return Detection(False, f"detection failed: {type(exc).__name__}: {exc}")
        return Detection(True, "always available")

    def describe(self) -> dict[str, Any]:
        """What the register tells of this pack beyond its name, version and description, as JSON."""
        return {
            "categories": sorted({*self.categories, *self.runbooks}),
            "probes": [spec.descriptor().model_dump(mode="json") for spec in self.probes.values()],
        }

    def descriptor(self) -> PackDescriptor:
        """The pack as the register describes it; from `described_by` while no probe module is loaded."""
        from sonde.protocol.messages import PackDescriptor  # the wire models, only when needed

        described = None if self._loaded else self._saved_description()
        if described is None:
            described = self.describe()
        return PackDescriptor.model_validate(
            {
                "name": self.name,
                "version": self.version,
                "description": self.description,
                "categories": described["categories"],
                "probes": described["probes"],
            }
        )

    def _saved_description(self) -> dict[str, Any] | None:
        if self.described_by is None:
            return None
        try:
            saved = json.loads(self.described_by.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning(
                "pack %s: cannot read %s (%s); loading its probes to describe it",
                self.name,
                self.described_by,
                exc,
            )
            return None
        if not isinstance(saved, dict) or not {"categories", "probes"} <= saved.keys():
            log.warning(
                "pack %s: %s is not a pack description; loading its probes", self.name, self.described_by
            )
            return None
        return saved

    def groups_needed(self) -> set[str]:
        needed = set(self.requires.groups)
        for spec in self.probes.values():
            needed.update(spec.requires.groups)
        return needed
