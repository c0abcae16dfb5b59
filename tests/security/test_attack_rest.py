"""The REST API answers odd requests with a 4xx naming the problem, never a 500 (a real `sonde hub`).

Found by this sweep (each was a 500 and an ERROR traceback in the hub's log,
two of them on the unauthenticated enroll route, so anyone could fill the log):
a body that is not UTF-8, a body nested deeper than the JSON parser recurses,
an agent path segment no agent name can match, and a web UI file name too
long for the filesystem. A body escaping half a
surrogate pair is refused too: SQLite cannot store it.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import httpx
import pytest

from sonde.agent.enroll import build_request
from sonde.hub.audit import verify_audit
from sonde.hub.audit_budget import BURST, PER_S, SUPPRESSED_ACTION
from sonde.hub.db import open_database
from sonde.packs.registry import PackRegistry
from sonde.protocol.signing import new_private_key, public_key_to_text
from tests.e2e.harness import audit_rows
from tests.e2e.procs import RunningHub, running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

BODY_ROUTES = [
    ("POST", "/api/v1/agents/enroll"),
    ("POST", "/api/v1/api-keys"),
    ("POST", "/api/v1/enrollment-tokens"),
    ("POST", "/api/v1/diagnose"),
    ("POST", "/api/v1/health-check"),
    ("POST", "/api/v1/probe"),
]
PATH_ROUTES = [
    ("GET", "/api/v1/agents/{}"),
    ("DELETE", "/api/v1/agents/{}"),
    ("POST", "/api/v1/agents/{}/attestation/accept"),
    ("PUT", "/api/v1/agents/{}/tags"),
    ("DELETE", "/api/v1/api-keys/{}"),
    ("DELETE", "/api/v1/enrollment-tokens/{}"),
]
BODIES = [
    b"",
    b"null",
    b"[]",
    b'"x"',
    b"1e999",
    b'{"a":',
    b"\xff\xfe",
    b"\xc3\x28",
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"name":"\\ud800"}',
    b'{"agent":"x","probe":"\\udfff"}',
    b'{"agent":"x","probe":"system.info","params":{"\\ud800":1}}',
    b'{"tags":["\\ud800"]}',
    b'{"name":"x","role":"admin","agents":["\\ud800"]}',
    b'{"ttlSeconds":1e999}',
    b'{"name":' + b'"x"' * 2 + b"}",
]
SEGMENTS = [
    "%ED%A0%80",
    "%00",
    "..",
    "%2e%2e",
    "a" * 3000,
    "%FF%FE",
    "x%0Ay",
    "%C3%A9",
    "%F0%9F%98%80",
    "-",
    "%25",
    "%20",
]
QUERY_VALUES = ["", "x" * 3000, "-1", "1e999", "NaN", "99999999999999999999999", "[]", "%00", "%ED%A0%80"]
QUERY_NAMES = ["tag", "agent", "limit", "action", "since", "until", "actor", "outcome", "offset", "x"]


def server_errors(hub: RunningHub) -> list[str]:
    """Every request in the sweep whose answer was a 5xx."""
    found = []
    with hub.client() as http:

        def send(method: str, url: str, body: bytes = b"{}") -> None:
            answer = http.request(method, url, content=body, headers={"Content-Type": "application/json"})
            if answer.status_code >= 500:
                found.append(f"{method} {url[:60]} {body[:40]!r}: {answer.status_code} {answer.text[:100]}")

        for (method, path), body in itertools.product(BODY_ROUTES, BODIES):
            send(method, path, body)
        for (method, path), body in itertools.product(PATH_ROUTES, BODIES[:3]):
            send(method, path.format("x"), body)
        for (method, path), segment in itertools.product(PATH_ROUTES, SEGMENTS):
            send(method, path.format(segment))
        for path, name, value in itertools.product(
            ["/api/v1/agents", "/api/v1/audit"], QUERY_NAMES, QUERY_VALUES
        ):
            send("GET", f"{path}?{name}={value}")
        for segment in SEGMENTS:  # the web UI's files, without a key
            send("GET", f"/ui/{segment}")
    return found


def test_no_request_to_the_rest_api_gets_a_server_error(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        assert server_errors(hub) == []
        assert "Traceback" not in hub.proc.output
        with httpx.Client(base_url=hub.url, timeout=10) as anonymous:  # the unauthenticated route
            for body, says in [
                (b"\xff\xfe", "not valid JSON"),
                (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),  # too deep for any Python's json
                (b'{"token":"\\ud800"}', "lone UTF-16 surrogate"),
                (json.dumps({"token": 1}).encode(), "token"),
                (b'{"token":"enr_a","token":"enr_b"}', 'the key "token" appears twice'),
            ]:
                answer = anonymous.post("/api/v1/agents/enroll", content=body)
                assert answer.status_code == 400, answer.text
                assert answer.json()["error"]["code"] == "invalid_body"
                assert says in answer.json()["error"]["message"]
        with hub.client() as http:
            answer = http.get("/api/v1/agents/%ED%A0%80")
            assert answer.status_code == 404
            assert "Unknown agent" in answer.json()["error"]["message"]
            assert http.get("/api/v1/agents").status_code == 200
            # which of two values was meant is a guess: the last one ran, on another agent
            twice = b'{"agent":"web-1","probe":"system.memory.usage","params":{},"agent":"db-1"}'
            answer = http.post("/api/v1/probe", content=twice)
            assert answer.status_code == 400, answer.text
            assert 'the key "agent" appears twice' in answer.json()["error"]["message"]


def test_strangers_cannot_fill_the_audit_log(tmp_path: Path) -> None:
    """A refused enrollment costs a stranger one request (and any number of addresses can send them).
    Past a hub-wide budget such entries are counted, not kept: the count goes on the chain."""
    attempts = 400
    body = build_request(
        "enr_" + "x" * 32, "stranger", public_key_to_text(new_private_key().public_key()), PackRegistry.of([])
    )
    with running_hub(tmp_path) as hub:
        started = time.monotonic()
        with httpx.Client(base_url=hub.url, timeout=10) as http:
            for _ in range(attempts):
                answer = http.post("/api/v1/agents/enroll", content=body.model_dump_json(by_alias=True))
                assert answer.status_code == 401, answer.text  # every one is refused, as before
        elapsed = time.monotonic() - started
    kept = audit_rows(hub, "agent.enroll")  # the hub has stopped: everything is written
    (summary,) = audit_rows(hub, SUPPRESSED_ACTION)
    suppressed = json.loads(summary["detail"])["suppressed"]
    assert len(kept) <= BURST + PER_S * elapsed + 1
    assert len(kept) + suppressed["agent.enroll"] == attempts
    db = open_database(hub.data_dir / "sonde.db")
    try:
        assert verify_audit(db).ok
    finally:
        db.close()
