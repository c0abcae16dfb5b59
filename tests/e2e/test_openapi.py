"""The OpenAPI document a running `sonde hub` serves, against that hub.

It must be valid OpenAPI 3.1, have what a client generator needs, and be true: every
real answer below, successes and refusals, has a status the document declares for its
route and a body that fits the schema declared for that status. Most tests use the
session's shared fleet (agents ``alpha`` and ``beta``); the one that gets its address
blocked starts its own hub.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from tests.e2e.harness import SharedFleet, post_enroll
from tests.e2e.procs import running_hub

pytestmark = pytest.mark.e2e

DOCUMENT_URI = "urn:sonde:openapi"
OPEN_ROUTES = {"/api/v1/health", "/api/v1/openapi.json", "/api/v1/agents/enroll"}
AGENT = "openapi-agent"  # enrolled, tagged and removed here; no other test uses the name


class Spec:
    """The served document, and the check of a real answer against it."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.registry = Registry().with_resource(DOCUMENT_URI, DRAFT202012.create_resource(document))
        self.succeeded: set[tuple[str, str]] = set()

    def operations(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for path, operations in self.document["paths"].items():
            for method, operation in operations.items():
                yield method, path, operation

    def check(self, method: str, path: str, answer: httpx.Response) -> Any:
        """``answer``'s body, once its status is one the document declares for the route and
        the body fits the schema declared for that status."""
        responses = self.document["paths"][path][method]["responses"]
        status = str(answer.status_code)
        assert status in responses, f"{method} {path} answered {status}, not in {sorted(responses)}"
        pointer = f"/paths/{escaped(path)}/{method}/responses/{status}/content/application~1json/schema"
        validator = Draft202012Validator({"$ref": f"{DOCUMENT_URI}#{quote(pointer)}"}, registry=self.registry)
        body = answer.json()
        problems = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(body)]
        assert not problems, (method, path, status, problems)
        if answer.is_success:
            self.succeeded.add((method, path))
        return body


def escaped(path: str) -> str:
    """``path`` as one JSON Pointer token (RFC 6901)."""
    return path.replace("~", "~0").replace("/", "~1")


def fetch_spec(url: str) -> Spec:
    with httpx.Client(base_url=url, timeout=10) as anonymous:  # the document needs no key
        answer = anonymous.get("/api/v1/openapi.json")
    assert answer.status_code == 200, answer.text
    return Spec(answer.json())


@pytest.fixture(scope="module")
def spec(fleet: SharedFleet) -> Spec:
    return fetch_spec(fleet.hub.url)


def test_the_document_is_valid_openapi_with_what_a_client_generator_needs(spec: Spec) -> None:
    validate(spec.document)  # the OpenAPI 3.1 meta-schema, and every $ref resolves
    operation_ids = [operation["operationId"] for _, _, operation in spec.operations()]
    assert len(set(operation_ids)) == len(operation_ids)
    for method, path, operation in spec.operations():
        where = (method, path)
        responses = operation["responses"]
        assert all(status.isdigit() for status in responses), where  # real statuses, not 2XX
        assert all("schema" in answer["content"]["application/json"] for answer in responses.values()), where
        assert any(status.startswith("2") for status in responses), where
        if "429" in responses:
            assert "Retry-After" in responses["429"]["headers"], where
        if path in OPEN_ROUTES:
            assert operation["security"] == [], where
        else:
            assert operation["security"] == [{"bearer": []}], where
            assert {"401", "429"} <= set(responses), where
            assert (
                responses["401"]["headers"]["WWW-Authenticate"]["schema"]["const"] == 'Bearer realm="sonde"'
            )
    assert spec.document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_every_route_answers_as_the_document_declares(fleet: SharedFleet, spec: Spec) -> None:
    hub = fleet.hub
    with hub.client() as http, httpx.Client(base_url=hub.url, timeout=10) as anonymous:
        spec.check("get", "/api/v1/health", anonymous.get("/api/v1/health"))
        spec.check("get", "/api/v1/openapi.json", anonymous.get("/api/v1/openapi.json"))
        spec.check("get", "/api/v1/agents", http.get("/api/v1/agents"))
        spec.check("get", "/api/v1/agents/{agent}", http.get("/api/v1/agents/alpha"))
        spec.check("get", "/api/v1/packs", http.get("/api/v1/packs"))
        echo = {"agent": "alpha", "probe": "e2e.echo.value", "params": {"value": 7}}
        assert (
            spec.check("post", "/api/v1/probe", http.post("/api/v1/probe", json=echo))["result"]["value"] == 7
        )
        runbook = {"agent": "alpha", "category": "system"}
        spec.check("post", "/api/v1/diagnose", http.post("/api/v1/diagnose", json=runbook))
        checked = http.post("/api/v1/health-check", json={"agent": "alpha", "categories": ["system"]})
        assert spec.check("post", "/api/v1/health-check", checked)["summary"]["agents_checked"] == 1

        key = spec.check("post", "/api/v1/api-keys", http.post("/api/v1/api-keys", json={"name": "openapi"}))
        spec.check("get", "/api/v1/api-keys", http.get("/api/v1/api-keys"))
        spec.check("delete", "/api/v1/api-keys/{id}", http.delete(f"/api/v1/api-keys/{key['key']['id']}"))

        made = http.post("/api/v1/enrollment-tokens", json={"name": AGENT})
        token = spec.check("post", "/api/v1/enrollment-tokens", made)
        spec.check("get", "/api/v1/enrollment-tokens", http.get("/api/v1/enrollment-tokens"))
        spec.check("post", "/api/v1/agents/enroll", post_enroll(hub, token["secret"], AGENT))
        tags = {"tags": ["openapi", "docs"]}
        spec.check("put", "/api/v1/agents/{agent}/tags", http.put(f"/api/v1/agents/{AGENT}/tags", json=tags))
        for wanted, found in [(["openapi", "docs"], [AGENT]), (["openapi", "nope"], [])]:
            answer = http.get(
                "/api/v1/agents", params=[("tag", tag) for tag in wanted]
            )  # style form, explode
            assert [agent["name"] for agent in spec.check("get", "/api/v1/agents", answer)["agents"]] == found
        accepted = http.post(f"/api/v1/agents/{AGENT}/attestation/accept")
        spec.check("post", "/api/v1/agents/{agent}/attestation/accept", accepted)
        spec.check("delete", "/api/v1/agents/{agent}", http.delete(f"/api/v1/agents/{AGENT}"))
        spare = http.post("/api/v1/enrollment-tokens", json={}).json()["token"]["id"]
        revoked = http.delete(f"/api/v1/enrollment-tokens/{spare}")
        spec.check("delete", "/api/v1/enrollment-tokens/{id}", revoked)

        spec.check("get", "/api/v1/audit", http.get("/api/v1/audit", params={"limit": 50}))
        spec.check("get", "/api/v1/audit/verify", http.get("/api/v1/audit/verify"))
    assert spec.succeeded == {(method, path) for method, path, _ in spec.operations()}


def test_refusals_have_the_declared_status_and_shape(fleet: SharedFleet, spec: Spec) -> None:
    hub = fleet.hub
    with hub.client() as http:
        member = http.post("/api/v1/api-keys", json={"name": "openapi-member"}).json()
        with hub.client(member["secret"]) as limited, hub.client("sonde_not-a-key") as stranger:
            for method, path, answer, status in [
                ("get", "/api/v1/packs", stranger.get("/api/v1/packs"), 401),
                ("get", "/api/v1/audit", limited.get("/api/v1/audit"), 403),
                ("get", "/api/v1/agents/{agent}", http.get("/api/v1/agents/nope"), 404),
                ("post", "/api/v1/probe", http.post("/api/v1/probe", json={"agent": "alpha"}), 400),
                ("post", "/api/v1/probe", http.post("/api/v1/probe", content=b"x" * (300 * 1024)), 413),
                ("post", "/api/v1/agents/enroll", post_enroll(hub, "t" * 32, "openapi-nobody"), 401),
                ("delete", "/api/v1/api-keys/{id}", http.delete("/api/v1/api-keys/nope"), 404),
                (
                    "delete",
                    "/api/v1/enrollment-tokens/{id}",
                    http.delete("/api/v1/enrollment-tokens/nope"),
                    404,
                ),
            ]:
                assert answer.status_code == status, (method, path, answer.text)
                spec.check(method, path, answer)
        http.delete(f"/api/v1/api-keys/{member['key']['id']}")


def test_the_query_parameters_declared_are_the_ones_the_hub_takes(fleet: SharedFleet, spec: Spec) -> None:
    audit = {p["name"]: p for p in spec.document["paths"]["/api/v1/audit"]["get"]["parameters"]}
    assert set(audit) == {"agent", "key", "action", "since", "until", "limit"}
    assert all(p["in"] == "query" and not p["required"] and p["description"] for p in audit.values())
    tag, status, most = spec.document["paths"]["/api/v1/agents"]["get"]["parameters"]
    assert (tag["name"], tag["in"], tag["schema"]["type"]) == ("tag", "query", "array")
    assert (status["name"], most["name"]) == ("status", "limit")
    assert (tag["style"], tag["explode"]) == ("form", True)
    samples = {"string": "alpha", "number": 0, "integer": 1}
    moments = {"since", "until"}  # a number (unix seconds) or a string: a duration ago, an ISO time
    limit = audit["limit"]["schema"]["maximum"]
    with fleet.hub.client() as http:
        for name, parameter in audit.items():
            for option in parameter["schema"].get("anyOf", [parameter["schema"]]):
                sample = "2h" if name in moments and option["type"] == "string" else samples[option["type"]]
                sample = "hub" if name == "key" else sample  # an actor there is: an unknown key is refused
                taken = http.get("/api/v1/audit", params={name: sample})
                assert taken.status_code == 200, (name, sample, taken.text)
                spec.check("get", "/api/v1/audit", taken)
        assert http.get("/api/v1/audit", params={"since": "2026-01-31T09:15:00Z"}).status_code == 200
        for params in [
            {"limit": limit + 1},
            {"limit": "many"},
            {"since": -1},
            {"nope": "1"},
            {"since": 1764000000000},  # milliseconds: no time before year 10000
            {"until": "inf"},
            {"since": "nan"},
            {"since": "yesterday"},  # none of unix seconds, a duration ago, an ISO time
            {"since": 1764000000, "until": 1763000000},  # a range holding no time
            {"key": "alpha"},  # no key has that id or name
        ]:
            refused = http.get("/api/v1/audit", params=params)
            assert refused.status_code == 400, (params, refused.text)
            assert spec.check("get", "/api/v1/audit", refused)["error"]["code"] == "invalid_query"
        inverted = http.get("/api/v1/audit", params={"since": 2, "until": 1}).json()["error"]["message"]
        assert "since (2) must come before until (1)" in inverted
        assert http.get("/api/v1/audit", params={"limit": limit}).status_code == 200
        for blank in ["", "#", "  "]:  # a blank tag would match every agent: refused, as by the tools
            refused = http.get("/api/v1/agents", params={"tag": blank})
            assert refused.status_code == 400, (blank, refused.text)
            assert spec.check("get", "/api/v1/agents", refused)["error"]["code"] == "invalid_query"
        assert http.get("/api/v1/agents", params={"tag": "#openapi"}).status_code == 200
        for params in [{"status": "offline"}, {"limit": 1}]:
            spec.check("get", "/api/v1/agents", http.get("/api/v1/agents", params=params))


def test_a_blocked_address_is_told_when_to_retry_as_declared(tmp_path: Path) -> None:
    """Own hub: afterwards 127.0.0.1 may not authenticate on it for a minute."""
    with running_hub(tmp_path) as hub:
        spec = fetch_spec(hub.url)
        with hub.client("sonde_not-a-key") as stranger:
            for _ in range(40):
                answer = stranger.get("/api/v1/agents")
                if answer.status_code != 401:
                    break
        assert answer.status_code == 429, answer.text
        spec.check("get", "/api/v1/agents", answer)
        declared = spec.document["paths"]["/api/v1/agents"]["get"]["responses"]["429"]["headers"]
        retry_after = Draft202012Validator(declared["Retry-After"]["schema"])
        assert retry_after.is_valid(int(answer.headers["Retry-After"]))
