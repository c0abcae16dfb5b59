"""The policy matrix: a scoped member key through every MCP tool and every REST route.

The key may see agent alpha only, and run system.memory.* and system.info
only. Nothing about beta, and no other probe, may be seen or run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sonde.hub.ratelimit import MAX_FAILURES
from tests.e2e.mcpclient import call, call_error, initialize_request, mcp_client
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until

ALLOWED_PROBES = {"system.memory.usage", "system.info"}


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningHub, str]]:
    tmp = tmp_path_factory.mktemp("policy")
    with running_hub(tmp, "--heartbeat-interval", "1") as hub:
        agents = [enroll_agent(hub, tmp, name) for name in ("alpha", "beta")]
        for agent in agents:
            agent.start()
        wait_until(lambda: hub.statuses() == {"alpha": "online", "beta": "online"}, timeout=30)
        done = hub.cli(
            "hub",
            "key",
            "create",
            "--name",
            "scoped",
            "--agents",
            "alpha",
            "--probes",
            "system.memory.*",
            "--probes",
            "system.info",
        )
        assert done.returncode == 0, done.stderr
        try:
            yield hub, done.stdout.strip()
        finally:
            for agent in agents:
                agent.stop()


def mentions_beta(value: object) -> bool:
    return "beta" in json.dumps(value)


def latest_seq(hub: RunningHub) -> int:
    """The audit log's last row's number: the rows after it are a test's own, whatever the module's
    other tests on this hub did before it."""
    with hub.client() as admin:
        entries = admin.get("/api/v1/audit", params={"limit": 1}).json()["entries"]
    return int(entries[0]["seq"]) if entries else 0


async def test_every_tool_stays_inside_the_policy(scoped: tuple[RunningHub, str]) -> None:
    hub, key = scoped
    before = latest_seq(hub)
    async with mcp_client(hub.url, key) as client:
        listed = await call(client, "list_agents")
        assert [a["name"] for a in listed["agents"]] == ["alpha"]

        caps = await call(client, "list_capabilities")
        assert [a["agent"] for a in caps["agents"]] == ["alpha"]
        assert {p["name"] for p in caps["probes"]} == ALLOWED_PROBES
        # the other packs hold nothing the key may run: left out, not shown with no probes
        assert [(p["name"], set(p["probes"])) for p in caps["agents"][0]["packs"]] == [
            ("system", ALLOWED_PROBES)
        ]
        named = await call(client, "list_capabilities", probes=["system.disk.usage", "system.info"])
        assert [p["name"] for p in named["probes"]] == ["system.info"]
        assert named["probes"][0]["params_schema"] is not None
        assert named["unmatched_probes"] == ["system.disk.usage"]  # as if it did not exist
        assert named["note"].count("system.disk.usage") == 1

        report = await call(client, "health_check")
        assert report["summary"]["agents_checked"] == 1
        assert not mentions_beta(report)
        skipped = {s["probe"] for s in report["skipped"]}
        assert {"system.disk.usage", "system.cpu.usage"} <= skipped
        assert not skipped & ALLOWED_PROBES
        assert report["summary"]["probes_run"] == 1  # only the memory probe ran
        by_category = {c["category"]: c["status"] for c in report["categories"]}
        # two of its three probes were skipped: incomplete, unless a finding of the memory probe
        # that ran decides it (an OOM kill on this machine in the last hour: the packs' tests make one)
        severities = {f["severity"] for f in report["findings"] if f["category"] == "system"}
        decided = next((s for s in ("critical", "warning") if s in severities), "incomplete")
        assert by_category.pop("system") == decided
        assert set(by_category.values()) <= {"not_checked"}  # other packs' categories: none ran

        diag = await call(client, "diagnose", agent="alpha", category="system")
        ran = {r["probe"]: r["status"] for r in diag["readings"]}
        assert ran == {
            "system.disk.usage": "skipped",
            "system.memory.usage": "ok",
            "system.cpu.usage": "skipped",
        }
        assert diag["complete"] is False

        assert (await call(client, "probe", agent="alpha", probe="system.memory.usage"))["agent"] == "alpha"
        denied = await call_error(client, "probe", agent="alpha", probe="system.disk.usage")
        assert "policy does not allow" in denied

        overview = await call(client, "agent_overview", agent="alpha")
        assert {p["probe"] for p in overview["recent_probes"]} <= ALLOWED_PROBES

        own = await call(client, "query_logs", source="audit", lines=50)
        actors = {e["actor"] for e in own["audit"]}
        assert len(actors) == 1  # only this key's own calls

        for tool, args in [
            ("probe", {"agent": "beta", "probe": "system.memory.usage"}),
            ("diagnose", {"agent": "beta", "category": "system"}),
            ("agent_overview", {"agent": "beta"}),
            ("health_check", {"agent": "beta"}),
            ("query_logs", {"source": "system", "agent": "beta"}),
            ("query_logs", {"source": "audit", "agent": "beta"}),
        ]:
            text = await call_error(client, tool, **args)
            assert "Unknown agent 'beta'" in text, (tool, text)
            assert "Agents you can reach: alpha." in text

    # the caller reads a hidden agent as unknown; the audit log says it was the policy
    with hub.client() as admin:
        key_id = next(k["id"] for k in admin.get("/api/v1/api-keys").json()["keys"] if k["name"] == "scoped")
        rows = admin.get("/api/v1/audit", params={"key": key_id, "limit": 1000}).json()["entries"]
    refusals = [
        (row["action"], row["target"], row["outcome"], row["detail"]["code"], row["detail"]["reason"])
        for row in sorted(rows, key=lambda row: row["seq"])
        if row["seq"] > before and row["action"].startswith("mcp.call.") and "reason" in row["detail"]
    ]
    # outcome `denied`, as a refused REST request's row says it: one search finds both
    assert refusals == [
        ("mcp.call.probe", "alpha", "denied", "forbidden", "probe_not_allowed"),
        ("mcp.call.probe", "beta", "denied", "not_found", "agent_not_allowed"),
        ("mcp.call.diagnose", "beta", "denied", "not_found", "agent_not_allowed"),
        ("mcp.call.agent_overview", "beta", "denied", "not_found", "agent_not_allowed"),
        ("mcp.call.health_check", "beta", "denied", "not_found", "agent_not_allowed"),
        ("mcp.call.query_logs", "beta", "denied", "not_found", "agent_not_allowed"),
        ("mcp.call.query_logs", "beta", "denied", "not_found", "agent_not_allowed"),
    ]


async def test_the_key_reads_its_refusals_of_a_hidden_agent_as_of_an_unknown_one(
    scoped: tuple[RunningHub, str],
) -> None:
    """The row of a refused call names the policy (for admins); its caller's own audit log must not,
    or the key learns that a hidden agent exists: shown as an unknown agent's row, and searched so."""
    hub, key = scoped
    with hub.client() as admin:
        beta_id = next(a["id"] for a in admin.get("/api/v1/agents").json()["agents"] if a["name"] == "beta")
    async with mcp_client(hub.url, key) as client:
        await call_error(client, "probe", agent="beta", probe="system.memory.usage")
        await call_error(client, "probe", agent="nobody-here", probe="system.memory.usage")
        with hub.client(key) as member:
            for name in ("beta", "nobody-either"):
                answer = member.post("/api/v1/probe", json={"agent": name, "probe": "system.memory.usage"})
                assert answer.status_code == 404, answer.text
        own = (await call(client, "query_logs", source="audit", lines=1000))["audit"]
        as_read = {
            row["target"]: (row["action"], row["outcome"], row["detail"])
            for row in sorted(own, key=lambda row: row["seq"])
            if row["action"] in ("mcp.call.probe", "rest.probe")
        }
        assert as_read["beta"] == as_read["nobody-here"] == ("mcp.call.probe", "not_found", {"tool": "probe"})
        assert "nobody-either" not in as_read  # an unknown agent leaves no REST row
        assert not [row for row in own if row["action"] == "rest.probe" and row["target"] == "beta"]
        for telling in ("agent_not_allowed", "denied", beta_id, '"reason"', '"agentId"'):
            found = await call(client, "query_logs", source="audit", lines=1000, grep=telling)
            assert not [row for row in found["audit"] if row["target"] == "beta"], telling
        found = await call(client, "query_logs", source="audit", lines=1000, grep="not_found")
        assert {"beta", "nobody-here"} <= {row["target"] for row in found["audit"]}
    with hub.client() as admin:  # an admin still reads what happened
        rows = admin.get("/api/v1/audit", params={"agent": "beta", "limit": 1000}).json()["entries"]
    told = {(row["action"], row["outcome"], row["detail"].get("reason")) for row in rows}
    assert {
        ("mcp.call.probe", "denied", "agent_not_allowed"),
        ("rest.probe", "denied", "agent_not_allowed"),
    } <= told


async def test_a_category_the_key_may_run_none_of_is_not_checked_never_ok(
    scoped: tuple[RunningHub, str],
) -> None:
    hub, _ = scoped
    created = hub.cli(
        "hub", "key", "create", "--name", "web-only", "--agents", "alpha", "--probes", "nginx.*"
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    async with mcp_client(hub.url, key) as client:
        report = await call(client, "health_check", agent="alpha", categories=["system"])
        assert report["summary"]["probes_run"] == 0
        assert [(c["category"], c["status"]) for c in report["categories"]] == [("system", "not_checked")]
        refused = await call_error(client, "diagnose", agent="alpha", category="system")
        assert "allows none of the 'system' category's probes" in refused
    with hub.client(key) as http:
        answer = http.post("/api/v1/diagnose", json={"agent": "alpha", "category": "system"})
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "forbidden"


def test_every_rest_route_stays_inside_the_policy(scoped: tuple[RunningHub, str]) -> None:
    hub, key = scoped
    with hub.client(key) as http:
        assert [a["name"] for a in http.get("/api/v1/agents").json()["agents"]] == ["alpha"]
        assert http.get("/api/v1/agents/alpha").status_code == 200
        assert http.get("/api/v1/agents/beta").status_code == 404
        packs = http.get("/api/v1/packs").json()["packs"]
        assert {p["name"] for pack in packs for p in pack["probes"]} == ALLOWED_PROBES
        ok = http.post("/api/v1/probe", json={"agent": "alpha", "probe": "system.info"})
        assert ok.status_code == 200
        assert (
            http.post("/api/v1/probe", json={"agent": "alpha", "probe": "system.disk.usage"}).status_code
            == 403
        )
        unknown = http.post("/api/v1/probe", json={"agent": "beta", "probe": "system.info"})
        assert unknown.status_code == 404
        # the refusal the tools share names the route a REST caller looks agents up with
        assert unknown.json()["error"]["message"].endswith("Call GET /api/v1/agents for details.")
        diag = http.post("/api/v1/diagnose", json={"agent": "alpha", "category": "system"}).json()
        assert {r["probe"] for r in diag["readings"] if r["status"] == "ok"} == {"system.memory.usage"}
        assert http.post("/api/v1/diagnose", json={"agent": "beta", "category": "system"}).status_code == 404
        checked = http.post("/api/v1/health-check", json={}).json()
        assert checked["summary"]["agents_checked"] == 1  # beta is not this key's to see
        assert checked["summary"]["probes_succeeded"] == 1  # system.memory.usage: the one it may run
        assert http.post("/api/v1/health-check", json={"agent": "beta"}).status_code == 404
        admin_only = [
            ("DELETE", "/api/v1/agents/alpha", None),
            ("PUT", "/api/v1/agents/alpha/tags", {"tags": ["x"]}),
            ("GET", "/api/v1/audit", None),
            ("GET", "/api/v1/audit/verify", None),
            ("GET", "/api/v1/api-keys", None),
            ("POST", "/api/v1/api-keys", {"name": "sneaky", "role": "admin"}),
            ("DELETE", "/api/v1/api-keys/whatever", None),
            ("GET", "/api/v1/enrollment-tokens", None),
            ("POST", "/api/v1/enrollment-tokens", {}),
        ]
        for method, path, body in admin_only:
            answer = http.request(method, path, json=body)
            assert answer.status_code == 403, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "forbidden"
    # nothing changed: alpha still there with no tags, no key named sneaky
    with hub.client() as admin:
        assert hub.statuses() == {"alpha": "online", "beta": "online"}
        assert "sneaky" not in {k["name"] for k in admin.get("/api/v1/api-keys").json()["keys"]}


def test_every_rest_refusal_of_a_key_is_on_the_record(scoped: tuple[RunningHub, str]) -> None:
    """A key's role or policy refusing it over REST leaves a denied row, as a refused MCP call does."""
    hub, _ = scoped
    created = hub.cli(
        "hub", "key", "create", "--name", "refused", "--agents", "alpha", "--probes", "system.info"
    )
    assert created.returncode == 0, created.stderr
    with hub.client(created.stdout.strip()) as http:
        refusals = [
            ("POST", "/api/v1/api-keys", {"name": "sneaky", "role": "admin"}, 403),
            ("DELETE", "/api/v1/agents/beta", None, 403),
            ("GET", "/api/v1/agents/beta", None, 404),
            ("POST", "/api/v1/probe", {"agent": "beta", "probe": "system.info"}, 404),
            ("POST", "/api/v1/probe", {"agent": "alpha", "probe": "system.disk.usage"}, 403),
            ("POST", "/api/v1/diagnose", {"agent": "beta", "category": "system"}, 404),
            ("POST", "/api/v1/health-check", {"agent": "beta"}, 404),
        ]
        for method, path, body, status in refusals:
            assert http.request(method, path, json=body).status_code == status, (method, path)
        # not refusals of this key: no agent by that name, a body that is not valid, a probe it may run
        assert http.get("/api/v1/agents/nobody").status_code == 404
        assert http.post("/api/v1/probe", json={"agent": "beta"}).status_code == 400
        assert http.post("/api/v1/probe", json={"agent": "alpha", "probe": "system.info"}).status_code == 200
    with hub.client() as admin:
        key_id = next(k["id"] for k in admin.get("/api/v1/api-keys").json()["keys"] if k["name"] == "refused")
        rows = admin.get("/api/v1/audit", params={"key": key_id}).json()["entries"]
    assert {row["actor"] for row in rows} == {key_id}  # as its probe's own row names it
    assert [row["outcome"] for row in rows].count("ok") == 1
    denied = [
        (row["action"], row["target"], row["detail"]["code"], row["detail"]["reason"])
        for row in sorted(rows, key=lambda row: row["seq"])
        if row["outcome"] == "denied"
    ]
    assert denied == [
        ("rest.api_key.create", "/api/v1/api-keys", "forbidden", "admin_required"),
        ("rest.agent.remove", "/api/v1/agents/beta", "forbidden", "admin_required"),
        ("rest.agent.overview", "beta", "not_found", "agent_not_allowed"),
        ("rest.probe", "beta", "not_found", "agent_not_allowed"),
        ("rest.probe", "alpha", "forbidden", "probe_not_allowed"),
        ("rest.diagnose", "beta", "not_found", "agent_not_allowed"),
        ("rest.health_check", "beta", "not_found", "agent_not_allowed"),
    ]
    probe_refused = next(row for row in rows if row["detail"].get("reason") == "probe_not_allowed")
    assert probe_refused["detail"]["probe"] == "system.disk.usage"


def test_method_not_allowed_says_which_methods_are(scoped: tuple[RunningHub, str]) -> None:
    """RFC 9110: a 405 carries an Allow header listing the methods the route takes."""
    hub, key = scoped
    with hub.client(key) as http:
        for method, path, allowed in [
            ("DELETE", "/api/v1/health", "GET, HEAD, OPTIONS"),
            ("GET", "/api/v1/probe", "OPTIONS, POST"),
            ("PUT", "/api/v1/api-keys", "GET, HEAD, OPTIONS, POST"),
            ("PATCH", "/api/v1/agents/alpha", "DELETE, GET, HEAD, OPTIONS"),
            ("POST", "/", "GET, HEAD, OPTIONS"),
        ]:
            answer = http.request(method, path)
            assert answer.status_code == 405, (method, path, answer.text)
            assert answer.headers.get("allow") == allowed, (method, path)
            assert answer.json()["error"]["code"] == "method_not_allowed"
        mcp = http.put("/mcp", headers={"Accept": "application/json, text/event-stream"})
        assert mcp.status_code == 405, mcp.text
        assert mcp.headers.get("allow") == "GET, POST, DELETE"
        # an MCP client given the hub's address without /mcp: told where MCP is (before, werkzeug's
        # "The method is not allowed for the requested URL.")
        root = http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
        message = root.json()["error"]["message"]
        assert message.startswith("POST is not served at / (it takes GET, HEAD, OPTIONS): "), message
        assert "the hub serves MCP at /mcp" in message


def test_a_path_the_hub_does_not_serve_is_answered_with_where_its_endpoints_are(
    scoped: tuple[RunningHub, str],
) -> None:
    hub, key = scoped
    with hub.client(key) as http:
        for path in ("/api/mcp", "/api/v1/nope", "/ui/nope.js"):
            answer = http.post(path) if path.endswith("mcp") else http.get(path)
            assert answer.status_code == 404, (path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "not_found"
            # before: "The requested URL was not found on the server. If you entered the URL manually..."
            assert error["message"].startswith(f"nothing is served at {path}: the hub serves MCP at /mcp"), (
                error
            )


def test_rest_errors_have_one_shape(scoped: tuple[RunningHub, str]) -> None:
    hub, _ = scoped
    with hub.client() as http:
        for answer, status in [
            (http.get("/api/v1/nope"), 404),
            (http.delete("/api/v1/health"), 405),
            (http.post("/api/v1/probe", content=b"x" * (300 * 1024)), 413),
            (http.post("/api/v1/probe", json={"agent": "alpha"}), 400),
            (http.get("/api/v1/agents", headers={"Authorization": "Bearer wrong"}), 401),
        ]:
            assert answer.status_code == status, answer.text
            assert set(answer.json()["error"]) == {"code", "message"}
        for headers in ({}, {"Authorization": "Bearer wrong"}):  # RFC 9110: a 401 says how to authenticate
            unauthorized = httpx.get(f"{hub.url}/api/v1/agents", headers=headers)
            assert unauthorized.status_code == 401
            assert unauthorized.headers["www-authenticate"] == 'Bearer realm="sonde"'
        assert http.get("/api/v1/health").json()["status"] == "ok"
        assert "agents" not in http.get("/api/v1/health").text
        spec = http.get("/api/v1/openapi.json").json()
        assert "/api/v1/audit/verify" in spec["paths"]


def test_key_routes_refuse_what_would_lock_out_or_mislead_an_admin(scoped: tuple[RunningHub, str]) -> None:
    hub, _ = scoped
    with hub.client() as http:
        blank = http.post("/api/v1/api-keys", json={"name": "   "})
        assert blank.status_code == 400, blank.text
        assert "invalid API key name" in blank.json()["error"]["message"]
        wide = http.post(
            "/api/v1/api-keys", json={"name": "wide", "role": "admin", "policy": {"agents": ["a*"]}}
        )
        assert wide.status_code == 400, wide.text
        assert "whatever its policy says" in wide.json()["error"]["message"]
        admins = [k for k in http.get("/api/v1/api-keys").json()["keys"] if k["role"] == "admin"]
        assert len(admins) == 1
        last = http.delete(f"/api/v1/api-keys/{admins[0]['id']}")
        assert last.status_code == 409, last.text
        assert last.json()["error"]["code"] == "last_admin_key"
        assert http.get("/api/v1/api-keys").status_code == 200  # still an admin
        created = http.post("/api/v1/api-keys", json={"name": "ops2", "role": "admin"})
        assert created.status_code == 201
        entries = http.get("/api/v1/audit", params={"action": "rest.api_key.create", "limit": 1}).json()[
            "entries"
        ]
        assert entries[0]["detail"]["role"] == "admin"
        assert http.delete(f"/api/v1/api-keys/{created.json()['key']['id']}").status_code == 200
        long_path = "/api/v1/agents/" + "z" * 10000
        assert http.get(long_path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        denied = http.get("/api/v1/audit", params={"action": "rest.auth", "limit": 1}).json()["entries"][0]
        assert denied["target"] == long_path[:200] + "..."  # an unauthenticated caller does not size the rows
        diag = http.post("/api/v1/diagnose", json={"agent": "alpha", "category": "system"})
        assert diag.status_code == 200
        assert http.get("/api/v1/audit", params={"action": "rest.diagnose"}).json()["entries"]


def test_openapi_documents_every_body_a_route_takes(scoped: tuple[RunningHub, str]) -> None:
    hub, _ = scoped
    with hub.client() as http:
        spec = http.get("/api/v1/openapi.json").json()
        schemas = spec["components"]["schemas"]
        refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(spec))
        assert refs
        assert set(refs) <= set(schemas)  # every reference resolves inside the document
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                takes_body = method in ("post", "put") and path not in (
                    "/api/v1/agents/{agent}/attestation/accept"
                )
                assert ("requestBody" in operation) == takes_body, (method, path)
        # the field names a REST caller reads there are the ones the route accepts
        token_body = schemas["NewEnrollmentToken"]["properties"]
        ttl_field = next(name for name, field in token_body.items() if "minimum" in field)
        created = http.post("/api/v1/enrollment-tokens", json={ttl_field: token_body[ttl_field]["minimum"]})
        assert created.status_code == 201, created.text


def test_audit_chain_detects_edits_and_deletions(scoped: tuple[RunningHub, str]) -> None:
    hub, _ = scoped
    from sonde.hub.db import open_database

    with hub.client() as http:
        http.post("/api/v1/probe", json={"agent": "alpha", "probe": "system.info"})
        wait_until(lambda: http.get("/api/v1/audit/verify").json()["rows"] > 3)
        assert http.get("/api/v1/audit/verify").json()["ok"] is True
        assert hub.cli("hub", "audit", "verify").returncode == 0
        db = open_database(hub.data_dir / "sonde.db")
        try:
            victim, outcome = db.execute(
                "SELECT seq, outcome FROM audit ORDER BY seq LIMIT 1 OFFSET 2"
            ).fetchone()
            db.execute("UPDATE audit SET outcome = 'edited' WHERE seq = ?", [victim])
            edited = http.get("/api/v1/audit/verify").json()
            assert edited["ok"] is False
            assert edited["firstBadSeq"] == victim
            done = hub.cli("hub", "audit", "verify")
            assert done.returncode == 1
            assert f"seq {victim}" in done.stderr
            db.execute("UPDATE audit SET outcome = ? WHERE seq = ?", [outcome, victim])
            assert http.get("/api/v1/audit/verify").json()["ok"] is True  # restored: the chain is whole again
            db.execute("DELETE FROM audit WHERE seq = ?", [victim + 1])
            deleted = http.get("/api/v1/audit/verify").json()
            assert deleted["ok"] is False
            assert hub.cli("hub", "audit", "verify").returncode == 1
        finally:
            db.close()


def test_failed_authentication_is_rate_limited(tmp_path: Path) -> None:
    """On a hub of its own: afterwards 127.0.0.1 is blocked for a minute (for bad keys), which
    would refuse the other tests' bad keys with 429 where they expect 401, in whatever order a
    worker runs them."""
    with running_hub(tmp_path) as hub:
        limited(hub, hub.admin_key)


def limited(hub: RunningHub, key: str) -> None:
    with hub.client("sonde_wrong-key") as http:
        codes = [http.get("/api/v1/agents").status_code for _ in range(32)]
        first_block = codes.index(429)
        assert first_block == MAX_FAILURES
        assert set(codes[:first_block]) == {401}
        assert set(codes[first_block:]) == {429}
        refused = http.get("/api/v1/agents")
        wait_s = int(refused.headers["retry-after"])
        assert 0 < wait_s <= 61
        assert f"try again in {wait_s} s" in refused.json()["error"]["message"]
        blocked = http.post(f"{hub.url}/mcp", json={}, headers={"Authorization": "Bearer sonde_wrong-key"})
        assert blocked.status_code == 429  # /mcp shares the address's count
        assert int(blocked.headers["retry-after"]) > 0
    # A valid key from the same address is served all the same: the address may be a
    # proxy or a NAT shared with whoever keeps failing.
    with hub.client(key) as http:
        assert http.get("/api/v1/agents").status_code == 200
        served = http.post(
            f"{hub.url}/mcp",
            json=initialize_request("2025-11-25"),
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert served.status_code == 200, served.text
        assert (
            http.get("/api/v1/agents", headers={"Authorization": "Bearer sonde_wrong-key"}).status_code == 429
        )
