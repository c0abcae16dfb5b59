"""Hostile values in every parameter of every probe of every installed pack.

The cases are built at collection time from `load_packs()`, so a probe added
to any pack is attacked without a change here. Each case runs the probe in
process through `execute_probe`, with one parameter set to an attack value
and the others at a harmless valid value, under an allow-list holding one
directory. Whatever the probe does, it must:

- never run a shell or a command of the caller's choosing: the canary file
  that every injection tries to create never appears;
- never read outside the allow-list: no result or error carries a line of
  /etc/passwd, /etc/shadow or the secret kept beside the allowed directory,
  and a path parameter pointed outside (``../``, absolute, through a symlink,
  by a sibling prefix) is refused;
- refuse numbers out of range and values of the wrong type as ``invalid_params``;
- finish in bounded time (a database it cannot reach is ``unavailable``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from pydantic import ValidationError

from sonde.packs.base import ProbeSpec
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, ProbeOutcome, execute_probe
from sonde.packs.registry import load_packs

# PyMySQL leaks the socket of a unix-socket connect that fails (it closes only a socket it
# has stored); whichever later test frees it gets the ResourceWarning. Reported to the pack.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket.socket fd=\d+, family=1:pytest.PytestUnraisableExceptionWarning"
)

REGISTRY = load_packs()
PROBE_TIMEOUT_S = 8.0  # each probe's own limit is capped to this
CALL_LIMIT_S = PROBE_TIMEOUT_S + 5.0  # and the whole call, cleanup included, to this
REFUSALS = {"invalid_params", "refused"}
# what a probe may answer to a hostile value it accepted: it ran (or tried to) without harm
HARMLESS_FAILURES = {
    *REFUSALS,
    "unavailable",
    "service_down",
    "service_full",
    "permission_denied",
    "probe_failed",
    "timeout",
}

INJECTIONS = [
    "; touch {canary}",
    "$(touch {canary})",
    "`touch {canary}`",
    "| touch {canary}",
    "&& touch {canary}",
    "x\ntouch {canary}",
    "x\r\n; touch {canary}",
    "'; touch {canary}; '",
    '"; touch {canary}; "',
    "${IFS}touch${IFS}{canary}",
    "%s%s%s%n{canary}",
    "{{0.__class__}}{canary}",
    "'; SELECT pg_sleep(30); --",
    "x' OR '1'='1",
    '" OR SLEEP(30) #',
]
OPTIONS = [
    "-oProxyCommand=touch {canary}",
    "--help",
    "-f",
    "--output={canary}",
    "-e touch {canary}",
    "--",
    "-",
    "--config={canary}",
]
PATHS = [
    "../../etc/passwd",
    "/etc/passwd",
    "/etc/shadow",
    "/proc/self/environ",
    "{allowed}/../../etc/passwd",
    "{allowed}/../outside/secret.txt",
    "{allowed}-sibling/secret.txt",
    "{allowed}/link",
    "{allowed}/link/passwd",
    "{allowed}/escape/secret.txt",
    "{allowed}/app.log\x00/etc/passwd",
    "file:///etc/passwd",
    "~root/.bashrc",
]
BAD_TYPES: list[Any] = [["x"], {"a": 1}]
BAD_BOOLEANS: list[Any] = ["yes; touch {canary}", ["true"], {"a": True}]
PATH_WORDS = ("path", "file", "dir", "log")
# harmless valid values for the fields a probe requires, tried in order
BENIGN_CANDIDATES: list[Any] = [
    "{allowed}/app.log",
    "sonde-attack-none",
    "sonde-attack-none.service",
    "127.0.0.1",
    "a",
    os.getpid(),
    1,
]
BENIGN_BY_PROBE = {  # a directory where a probe lists one
    "system.files.list": {"path": "{allowed}"},
    "system.files.directories": {"path": "{allowed}"},
}


# --- the machine the probes see --------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """An allowed directory with a log, symlinks out of it, and secrets beside it."""

    root: Path
    secret: str

    @property
    def allowed(self) -> Path:
        return self.root / "allowed"

    @classmethod
    def placeholder(cls) -> Layout:
        return cls(Path("/tmp/sonde-attack-placeholder"), "")

    @classmethod
    def create(cls, root: Path) -> Layout:
        layout = cls(root, f"sonde-attack-secret-{secrets.token_hex(8)}")
        layout.allowed.mkdir()
        (layout.allowed / "app.log").write_text("2024-05-01 10:00:00 info started\n" * 20)
        (layout.allowed / "link").symlink_to("/etc")
        (root / "outside").mkdir()
        (root / "outside" / "secret.txt").write_text(layout.secret + "\n")
        (layout.allowed / "escape").symlink_to(root / "outside")
        (root / "allowed-sibling").mkdir()
        (root / "allowed-sibling" / "secret.txt").write_text(layout.secret + "\n")
        return layout

    def canary(self, case: Case) -> Path:
        return self.root / f"canary-{abs(hash(case.id)):x}"

    def secrets(self) -> list[str]:
        found = [self.secret]
        for path in ("/etc/passwd", "/etc/shadow"):
            try:
                first = Path(path).read_text().splitlines()[0]
            except (OSError, IndexError):
                continue
            found.append(first)
        return found


def fill(value: Any, layout: Layout, canary: Path | None = None) -> Any:
    """``value`` with {allowed} and {canary} filled in (in strings, lists and dicts)."""
    if isinstance(value, str):
        return value.replace("{allowed}", str(layout.allowed)).replace("{canary}", str(canary or "canary"))
    if isinstance(value, list):
        return [fill(item, layout, canary) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, layout, canary) for key, item in value.items()}
    return value


# --- the schema, read at collection time --------------------------------------------------


def field_types(schema: dict[str, Any]) -> set[str]:
    """JSON types a property allows (through anyOf), without null."""
    options = schema.get("anyOf", [schema])
    return {option.get("type", "string" if "enum" in option else "") for option in options} - {"null", ""}


def bounds(schema: dict[str, Any]) -> tuple[float | None, float | None]:
    for option in schema.get("anyOf", [schema]):
        if option.get("type") in ("integer", "number"):
            return option.get("minimum"), option.get("maximum")
    return None, None


def is_path_field(name: str, schema: dict[str, Any]) -> bool:
    text = json.dumps(schema).lower()
    return "allowed path" in text or (any(word in name.lower() for word in PATH_WORDS) and "host" not in name)


def benign_params(spec: ProbeSpec[Any, Any]) -> dict[str, Any]:
    """Valid values for every required field (checked against the params model)."""
    schema = spec.params_schema()
    chosen = dict(BENIGN_BY_PROBE.get(spec.name, {}))
    for name in schema["required"]:
        if name in chosen:
            continue
        for candidate in BENIGN_CANDIDATES:
            if accepts(spec, {**chosen, name: candidate}, name):
                chosen[name] = candidate
                break
    return chosen


def accepts(spec: ProbeSpec[Any, Any], params: dict[str, Any], name: str) -> bool:
    shaped = fill(params, Layout.placeholder())
    try:
        spec.params.model_validate(shaped)
    except ValidationError as exc:
        return all(error["loc"][:1] != (name,) for error in exc.errors())
    return True


@dataclass(frozen=True)
class Case:
    probe: str
    field: str
    kind: str  # "string", "path" (a string field naming a file) or "number" / "boolean"
    value: Any
    base: tuple[tuple[str, Any], ...]

    @property
    def id(self) -> str:
        shown = re.sub(r"[^A-Za-z0-9._/{}$-]+", "_", str(self.value))[:40]
        return f"{self.probe}:{self.field}={shown}"


def cases() -> Iterator[Case]:
    for spec in sorted(REGISTRY.probes(), key=lambda s: s.name):
        base = tuple(sorted(benign_params(spec).items()))
        for name, schema in spec.params_schema()["properties"].items():
            types = field_types(schema)
            if "string" in types:
                kind = "path" if is_path_field(name, schema) else "string"
                for value in (*INJECTIONS, *OPTIONS, *PATHS):
                    yield Case(spec.name, name, kind, value, base)
            if types & {"integer", "number"}:
                yield from number_cases(spec.name, name, schema, types, base)
            if "boolean" in types:
                for wrong in BAD_BOOLEANS:
                    yield Case(spec.name, name, "boolean", wrong, base)


def number_cases(probe: str, name: str, schema: dict[str, Any], types: set[str], base: Any) -> Iterator[Case]:
    low, high = bounds(schema)
    assert low is not None, f"{probe}: number {name!r} must have a lower bound (ge)"
    assert high is not None, f"{probe}: number {name!r} must have an upper bound (le)"
    values: list[Any] = [
        high + 1,
        low - 1,
        10**30,
        -(10**30),
        float("inf"),
        float("nan"),
        "1; touch {canary}",
    ]
    values += BAD_TYPES
    if "number" not in types:
        values.append(low + 0.5)
    for value in values:
        yield Case(probe, name, "number", value, base)


CASES = list(cases())


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    made = Layout.create(tmp_path_factory.mktemp("attack-params"))
    yield made
    late = sorted(path.name for path in made.root.glob("canary-*"))
    assert not late, f"an injected command ran after its test ended: {late}"


# --- the attack ---------------------------------------------------------------------------------


async def run_case(case: Case, layout: Layout) -> tuple[ProbeOutcome | None, ProbeExecutionError | None]:
    canary = layout.canary(case)
    params = {**fill(dict(case.base), layout, canary), case.field: fill(case.value, layout, canary)}
    ctx = ProbeContext(settings=ProbeSettings(allowed_paths=(str(layout.allowed),)))
    try:
        with trio.fail_after(CALL_LIMIT_S):
            return await execute_probe(REGISTRY, case.probe, params, ctx, timeout_s=PROBE_TIMEOUT_S), None
    except ProbeExecutionError as exc:
        return None, exc


def test_every_probe_field_is_attacked() -> None:
    attacked = {(case.probe, case.field) for case in CASES}
    for spec in REGISTRY.probes():
        for name in spec.params_schema()["properties"]:
            assert (spec.name, name) in attacked, f"{spec.name}.{name} has a type the attack does not cover"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_hostile_parameter_value(case: Case, layout: Layout) -> None:
    spec = REGISTRY.probe(case.probe)
    assert spec is not None
    base = fill(dict(case.base), layout)
    assert set(spec.params_schema()["required"]) <= set(base), "no harmless value for a required field"
    outcome, error = await run_case(case, layout)

    assert not layout.canary(case).exists(), "an injected command ran"
    said = json.dumps(outcome.result) if outcome else error.message if error else ""
    leaked = [secret in said for secret in layout.secrets()]  # never show the secret in a report
    assert not any(leaked), "a file outside the allow-list was read"
    if case.kind in ("number", "boolean"):
        assert error is not None, f"accepted {case.value!r}"
        assert error.code == "invalid_params", error.message
    elif case.kind == "path" and case.value in PATHS:
        assert error is not None, f"a path outside the allow-list was served: {outcome}"
        assert error.code in REFUSALS, (error.code, error.message)
    elif error is not None:
        assert error.code in HARMLESS_FAILURES, (error.code, error.message)
