"""Every tool argument the input schema types as integer, number or boolean takes only that JSON type.

Before, pydantic's lax mode ran ``{"limit": true}`` as limit 1 and ``"5"`` as 5, values the
advertised schema rules out. What the schema allows must still pass: a JSON integer for a
number, and a whole number written ``5.0`` for an integer (JSON Schema counts it as one).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sonde.hub.tools import all_tools
from sonde.hub.tools.base import ToolSpec

VALID_ARGUMENTS: dict[str, dict[str, Any]] = {  # the least each tool needs to be valid
    "health_check": {},
    "list_capabilities": {},
    "diagnose": {"agent": "alpha", "category": "system"},
    "probe": {"agent": "alpha", "probe": "system.info"},
    "list_agents": {},
    "agent_overview": {"agent": "alpha"},
    "query_logs": {"source": "audit"},
}
SCALAR_TYPES = ("integer", "number", "boolean")


def typed_fields() -> list[tuple[ToolSpec[Any, Any], str, str, Any]]:
    """(tool, field, JSON type, default) of every integer, number or boolean argument."""
    found = []
    for spec in all_tools():
        for field, schema in spec.input_schema()["properties"].items():
            if schema.get("type") in SCALAR_TYPES:
                found.append((spec, field, schema["type"], schema["default"]))
    return found


def test_the_schemas_still_advertise_these_types() -> None:
    advertised = {(spec.name, field): kind for spec, field, kind, _ in typed_fields()}
    assert advertised == {
        ("health_check", "deadline_s"): "number",
        ("list_capabilities", "limit"): "integer",
        ("list_agents", "limit"): "integer",
        ("agent_overview", "recent"): "integer",
        ("query_logs", "lines"): "integer",
    }


@pytest.mark.parametrize(
    ("spec", "field", "kind", "default"), typed_fields(), ids=lambda v: getattr(v, "name", str(v))
)
def test_a_value_of_another_json_type_is_refused(
    spec: ToolSpec[Any, Any], field: str, kind: str, default: Any
) -> None:
    valid = VALID_ARGUMENTS[spec.name]
    wrong = [str(default), None, [default]] + ([True, False] if kind != "boolean" else [1, "true"])
    for value in wrong:
        with pytest.raises(ValidationError) as refused:
            spec.input_model.model_validate({**valid, field: value})
        assert [error["loc"] for error in refused.value.errors()] == [(field,)], value


@pytest.mark.parametrize(
    ("spec", "field", "kind", "default"), typed_fields(), ids=lambda v: getattr(v, "name", str(v))
)
def test_what_the_schema_allows_is_accepted(
    spec: ToolSpec[Any, Any], field: str, kind: str, default: Any
) -> None:
    valid = VALID_ARGUMENTS[spec.name]
    forms = {"integer": [int(default), float(default)], "number": [int(default), float(default)]}
    for value in forms.get(kind, [default]):
        parsed = spec.input_model.model_validate({**valid, field: value})
        assert getattr(parsed, field) == default
        assert type(getattr(parsed, field)) is type(default)
    if kind == "integer":
        with pytest.raises(ValidationError):
            spec.input_model.model_validate({**valid, field: default + 0.5})
