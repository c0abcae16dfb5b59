"""What a caller sends is taken as its schema says and repeated only in part, on the shared fleet.

- a probe name or a params key of any length comes back in an error as a short prefix;
- an integer, number or boolean argument must be one: "5" and true are refused, not coerced;
- a REST path naming an agent of any length is echoed cut, as the key and token routes do;
- tags that differ only in case are one tag, as matching them always was.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.harness import SharedFleet
from tests.e2e.mcpclient import call, call_error, mcp_client

pytestmark = pytest.mark.e2e

SHORT_ERROR_CHARS = 1000  # an error's own words: far from the megabyte a caller may send


async def test_a_long_probe_name_or_params_key_is_not_echoed_whole(fleet: SharedFleet) -> None:
    hub = fleet.hub
    long_probe = "system." + "a" * 200_000  # within MAX_MCP_BODY_BYTES: a longer body is refused whole (413)
    long_key = "x" * 100_000
    async with mcp_client(hub.url, hub.admin_key) as client:
        named = await call_error(client, "probe", agent="alpha", probe=long_probe)
        assert named.startswith("Invalid arguments for probe: probe: String should have at most")
        assert len(named) < SHORT_ERROR_CHARS
        # the hub knows system.cpu.usage's parameters: it refuses the key itself
        keyed = await call_error(
            client, "probe", agent="alpha", probe="system.cpu.usage", params={long_key: 1}
        )
        assert keyed.startswith("Invalid params for system.cpu.usage: " + "x" * 64 + "...")
        assert len(keyed) < SHORT_ERROR_CHARS
        # a probe of a pack the hub lacks: the agent refuses it, cutting the key as the hub does
        # (and the hub would pass on at most 1000 characters of an agent's own words)
        agent_side = await call_error(
            client, "probe", agent="alpha", probe="e2e.echo.value", params={long_key: 1, "value": 1}
        )
        prefix = "Probe e2e.echo.value failed on alpha (invalid_params): "
        assert agent_side.startswith(prefix + "invalid params for e2e.echo.value: " + "x" * 64 + "...")
        assert len(agent_side) < SHORT_ERROR_CHARS
        # an argument no tool takes, named at length
        unknown = await call_error(client, "list_agents", **{long_key: 1})
        assert unknown.startswith("Invalid arguments for list_agents: " + "x" * 64 + "...")
        assert len(unknown) < SHORT_ERROR_CHARS
    with hub.client() as http:
        rest = http.post("/api/v1/probe", json={"agent": "alpha", "probe": long_probe})
        assert rest.status_code == 400
        assert len(rest.text) < SHORT_ERROR_CHARS
        keyed_rest = http.post(
            "/api/v1/probe", json={"agent": "alpha", "probe": "system.cpu.usage", "params": {long_key: 1}}
        )
        assert keyed_rest.status_code == 400
        assert len(keyed_rest.text) < SHORT_ERROR_CHARS
        extra = http.post("/api/v1/probe", json={"agent": "alpha", "probe": "system.info", long_key: 1})
        assert extra.status_code == 400
        assert len(extra.text) < SHORT_ERROR_CHARS


WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("list_agents", {"limit": True}, "limit"),
    ("list_agents", {"limit": "5"}, "limit"),
    ("list_capabilities", {"limit": "5"}, "limit"),
    ("agent_overview", {"agent": "alpha", "recent": True}, "recent"),
    ("query_logs", {"source": "audit", "lines": "5"}, "lines"),
    ("health_check", {"agent": "alpha", "deadline_s": "5"}, "deadline_s"),
    ("health_check", {"agent": "alpha", "deadline_s": True}, "deadline_s"),
]


async def test_arguments_of_the_wrong_json_type_are_refused(fleet: SharedFleet) -> None:
    """Before: {"limit": true} ran as limit 1, and "5" as 5."""
    hub = fleet.hub
    async with mcp_client(hub.url, hub.admin_key) as client:
        schemas = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
        for tool, arguments, field in WRONG_TYPES:
            assert schemas[tool]["properties"][field]["type"] in ("integer", "number"), (tool, field)
            refused = await call_error(client, tool, **arguments)
            assert refused.startswith(f"Invalid arguments for {tool}: {field}: "), (tool, arguments, refused)
        # what the schemas allow still runs: a JSON integer for a number, a whole number for an integer
        report = await call(client, "health_check", agent="alpha", categories=["system"], deadline_s=5)
        assert report["summary"]["agents_checked"] == 1
        assert len((await call(client, "list_agents", limit=1))["agents"]) == 1
        assert len((await call(client, "list_agents", limit=1.0))["agents"]) == 1


def test_a_long_agent_name_in_a_rest_path_is_echoed_cut(fleet: SharedFleet) -> None:
    """Before: the 404 repeated all 5,000 characters."""
    long_name = "a" * 5000
    with fleet.hub.client() as http:
        for method, path, body in [
            ("GET", f"/api/v1/agents/{long_name}", None),
            ("DELETE", f"/api/v1/agents/{long_name}", None),
            ("PUT", f"/api/v1/agents/{long_name}/tags", {"tags": ["x"]}),
            ("POST", f"/api/v1/agents/{long_name}/attestation/accept", None),
        ]:
            answer = http.request(method, path, json=body)
            assert answer.status_code == 404, (method, answer.text[:200])
            message = answer.json()["error"]["message"]
            assert message.startswith(f"Unknown agent '{'a' * 64}'... (5000 characters)."), message[:200]
            assert len(message) < SHORT_ERROR_CHARS
        short = http.get("/api/v1/agents/nobody").json()["error"]["message"]
        assert short.startswith("Unknown agent 'nobody'. Agents you can reach: ")


def test_tags_that_differ_only_in_case_are_one_tag(fleet: SharedFleet) -> None:
    """Before: ["Prod", "prod"] were kept as two tags, though every tag match ignores case."""
    name = fleet.idle.name
    with fleet.hub.client() as http:
        try:
            put = http.put(
                f"/api/v1/agents/{name}/tags", json={"tags": ["Prod", "prod", "#PROD", " web", "Web"]}
            )
            assert put.status_code == 200, put.text
            assert put.json()["tags"] == ["Prod", "web"]  # the first spelling of each stays
            listed = {a["name"]: a["tags"] for a in http.get("/api/v1/agents").json()["agents"]}
            assert listed[name] == ["Prod", "web"]
            tagged = [a["name"] for a in http.get("/api/v1/agents", params={"tag": "PROD"}).json()["agents"]]
            assert name in tagged
        finally:
            assert http.put(f"/api/v1/agents/{name}/tags", json={"tags": []}).status_code == 200
