"""The OpenAPI document names exactly the routes the REST app serves, with their methods."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from quart_trio import QuartTrio

from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.rest import create_rest_app

IGNORED_METHODS = {"HEAD", "OPTIONS"}  # Quart adds them to every rule; they answer no body of ours


def shape(path: str) -> str:
    """A path with its parameters unnamed: the rule's ``<key_id>`` is the document's ``{id}``."""
    return re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[QuartTrio]:
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        yield create_rest_app(hub)


async def served_document(app: QuartTrio) -> dict[str, Any]:
    answer = await app.test_client().get("/api/v1/openapi.json")
    assert answer.status_code == 200
    document: dict[str, Any] = await answer.get_json()
    return document


async def test_the_document_has_every_route_the_app_serves_and_no_other(app: QuartTrio) -> None:
    served: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/"):
            served.setdefault(shape(rule.rule), set()).update(set(rule.methods or ()) - IGNORED_METHODS)
    documented: dict[str, set[str]] = {}
    for path, operations in (await served_document(app))["paths"].items():
        documented.setdefault(shape(path), set()).update(method.upper() for method in operations)
    assert documented == served


async def test_each_path_parameter_is_declared_and_described(app: QuartTrio) -> None:
    for path, operations in (await served_document(app))["paths"].items():
        for method, operation in operations.items():
            declared = [p for p in operation.get("parameters", []) if p["in"] == "path"]
            assert [p["name"] for p in declared] == re.findall(r"\{([^}]+)\}", path), (method, path)
            assert all(p["required"] and p["description"] for p in declared), (method, path)


async def test_health_declares_its_problem_a_string_it_never_sends_null(app: QuartTrio) -> None:
    document = await served_document(app)
    responses = document["paths"]["/api/v1/health"]["get"]["responses"]
    for status in ("200", "503"):
        schema = responses[status]["content"]["application/json"]["schema"]
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        problem = schema["properties"]["problem"]
        assert problem["type"] == "string", problem
        assert "problem" not in schema.get("required", []), schema


async def test_every_route_that_reads_a_key_declares_the_database_refusal(app: QuartTrio) -> None:
    # the key is looked up in sonde.db: a damaged, full or locked file answers 503 on any such route,
    # a GET as much as a write (`GET /api/v1/audit/verify` on a damaged page, say)
    for path, operations in (await served_document(app))["paths"].items():
        for method, operation in operations.items():
            if operation["security"]:
                assert "503" in operation["responses"], (method, path)
