"""All seven MCP tools against a real hub with real agents, through the mcp SDK client.

Three agents: alpha (#prod #web), beta (#staging) and gamma (#prod), whose
`toolcheck` probe hangs, so a health_check over #prod must come back partial
at its deadline with everything else in it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from sonde.bridge.sse import SSEParser
from tests.e2e.harness import audit_rows, eventually
from tests.e2e.mcpclient import call, call_error, initialize_request, mcp_client
from tests.e2e.procs import EnrolledAgent, RunningHub, enroll_agent, running_hub, wait_until
from tests.e2e.toolpack import write_toolpack

TAGS = {"alpha": ["prod", "web"], "beta": ["staging"], "gamma": ["#prod"]}


def allow_paths(agent: EnrolledAgent, directory: Path) -> None:
    config_file = agent.home / ".sonde" / "config.json"
    config = json.loads(config_file.read_text())
    config["allowedPaths"] = [str(directory)]
    config_file.write_text(json.dumps(config))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningHub, dict[str, EnrolledAgent]]]:
    tmp = tmp_path_factory.mktemp("tools")
    site = write_toolpack(tmp / "site")
    with running_hub(tmp, "--heartbeat-interval", "1", "--probe-timeout", "20", site=site) as hub:
        agents = {
            name: enroll_agent(
                hub, tmp, name, site, {"SONDE_TOOLCHECK_HANG": "1"} if name == "gamma" else None
            )
            for name in TAGS
        }
        logs = tmp / "logs"
        logs.mkdir()
        (logs / "app.log").write_text(
            "".join(f"line {i} {'ERROR' if i % 3 == 0 else 'ok'}\n" for i in range(30))
        )
        allow_paths(agents["alpha"], logs)
        for agent in agents.values():
            agent.start()
        wait_until(lambda: hub.statuses() == dict.fromkeys(TAGS, "online"), timeout=30)
        with hub.client() as http:
            for name, tags in TAGS.items():
                assert http.put(f"/api/v1/agents/{name}/tags", json={"tags": tags}).status_code == 200
        try:
            yield hub, agents
        finally:
            for agent in agents.values():
                if agent.proc is not None:
                    agent.stop()


async def test_list_agents_and_tag_filtering(fleet: tuple[RunningHub, dict[str, EnrolledAgent]]) -> None:
    hub, _ = fleet
    async with mcp_client(hub.url, hub.admin_key) as client:
        listed = await call(client, "list_agents")
        assert [a["name"] for a in listed["agents"]] == ["alpha", "beta", "gamma"]
        alpha = listed["agents"][0]
        assert alpha["status"] == "online"
        assert alpha["tags"] == ["prod", "web"]
        assert any(p.startswith("system@") for p in alpha["packs"])
        assert alpha["os"]
        assert alpha["agent_version"]
        assert alpha["last_seen"]
        names = lambda result: [a["name"] for a in result["agents"]]  # noqa: E731
        assert names(await call(client, "list_agents", tags=["#prod"])) == ["alpha", "gamma"]
        assert names(await call(client, "list_agents", tags=["prod", "web"])) == ["alpha"]
        assert names(await call(client, "list_agents", tags=["PROD", "#Web"])) == ["alpha"]
        assert names(await call(client, "list_agents", tags=["nope"])) == []
        # a large fleet: counts for all, the first 'limit' by name, filters to narrow it
        assert listed["by_status"] == {"online": 3}
        assert (listed["total"], listed["matched"], listed["truncated"]) == (3, 3, False)
        limited = await call(client, "list_agents", limit=2)
        assert names(limited) == ["alpha", "beta"]
        assert (limited["total"], limited["matched"], limited["truncated"]) == (3, 3, True)
        assert names(await call(client, "list_agents", name="?a*")) == ["gamma"]
        assert names(await call(client, "list_agents", name="*a", status="online", tags=["#prod"])) == [
            "alpha",
            "gamma",
        ]
        assert names(await call(client, "list_agents", status="offline")) == []
        assert "limit" in await call_error(client, "list_agents", limit=0)


async def test_list_capabilities_names_every_probe_once(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, _ = fleet
    async with mcp_client(hub.url, hub.admin_key) as client:
        caps = await call(client, "list_capabilities", tags=["staging"])
        assert [a["agent"] for a in caps["agents"]] == ["beta"]
        beta = caps["agents"][0]
        assert set(beta["categories"]) >= {"system", "toolcheck"}
        probe_names = [p["name"] for p in caps["probes"]]
        assert len(probe_names) == len(set(probe_names))
        assert "system.memory.usage" in probe_names
        assert {name for pack in beta["packs"] for name in pack["probes"]} == set(probe_names)
        cpu = next(p for p in caps["probes"] if p["name"] == "system.cpu.usage")
        assert cpu["description"].startswith("CPU load and utilisation")
        assert cpu["params_schema"] is None  # the overview names probes; 'probes' asks for schemas
        named = await call(client, "list_capabilities", tags=["staging"], probes=["system.cpu.usage"])
        (cpu,) = named["probes"]
        assert cpu["params_schema"]["additionalProperties"] is False
        assert "interval_s" in cpu["params_schema"]["properties"]
        assert {c["category"] for c in caps["categories"]} >= {"system", "toolcheck"}
        assert (caps["matched"], caps["truncated"]) == (1, False)
        first = await call(client, "list_capabilities", limit=1)
        assert [a["agent"] for a in first["agents"]] == ["alpha"]
        assert (first["matched"], first["truncated"]) == (3, True)
        assert {c["category"] for c in first["categories"]} >= {"system", "toolcheck"}  # still every agent's


# Claude Code saves a tool result over about 50,000 characters to a file and shows the model a
# 2 KB preview of it. The overview must stay well inside that, with room for more packs and agents,
# or the probe names the instructions send a model to list_capabilities for are out of its sight
# (it was ~60,000 characters with the built-in packs, every probe's schema in it).
OVERVIEW_MAX_CHARS = 20_000


async def test_the_overview_stays_readable_and_a_named_probe_has_its_schema(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, _ = fleet
    async with mcp_client(hub.url, hub.admin_key) as client:
        overview = await client.call_tool("list_capabilities", {})
        named = await call(client, "list_capabilities", probes=["system.files.read"])
        missed = await call(client, "list_capabilities", probes=["system.file.read"])
        untagged = await call(client, "list_capabilities", probes=["system.*"], tags=["no-such-tag"])
    assert not overview.is_error
    text = overview.content[0].text  # type: ignore[union-attr]
    assert len(text) < OVERVIEW_MAX_CHARS, len(text)
    listed = json.loads(text)
    assert len(listed["agents"]) == 3
    assert {"system.files.read", "system.memory.usage"} <= {p["name"] for p in listed["probes"]}
    assert all(p["params_schema"] is None for p in listed["probes"])
    assert 'list_capabilities(probes=["system.files.read"])' in listed["note"]
    (read,) = named["probes"]
    assert read["name"] == "system.files.read"
    assert read["params_schema"]["additionalProperties"] is False
    assert {"path", "max_bytes"} <= set(read["params_schema"]["properties"])
    assert len(read["description"]) > len(
        next(p for p in listed["probes"] if p["name"] == read["name"])["description"]
    )
    assert [[p["probes"] for p in a["packs"]] for a in named["agents"]] == [[["system.files.read"]]] * 3
    assert (named["unmatched_probes"], named["note"]) == ([], None)
    assert (missed["probes"], missed["unmatched_probes"]) == ([], ["system.file.read"])
    assert "Close: system.files.read" in missed["note"]
    # no agent has the tag: that is what the note says, not that the key runs no such probe
    assert (untagged["matched"], untagged["unmatched_probes"]) == (0, ["system.*"])
    assert untagged["note"].startswith("No agent you can see has these tags"), untagged["note"]


async def test_health_check_is_partial_at_the_deadline_with_progress(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, _ = fleet
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with mcp_client(hub.url, hub.admin_key) as client:
        started = time.monotonic()
        result = await client.call_tool(
            "health_check",
            {"tags": ["#prod"], "categories": ["system", "toolcheck"], "deadline_s": 5},
            progress_callback=on_progress,
        )
        elapsed = time.monotonic() - started
    assert not result.is_error
    report = result.structured_content
    assert report is not None
    assert 4.5 < elapsed < 12
    assert report["partial"] is True
    assert report["summary"]["agents_checked"] == 2
    severities = [f["severity"] for f in report["findings"]]
    assert severities == sorted(severities, key=["critical", "warning", "info"].index)
    alpha_toolcheck = [
        f for f in report["findings"] if f["agent"] == "alpha" and f["category"] == "toolcheck"
    ]
    assert [f["severity"] for f in alpha_toolcheck] == ["critical", "warning", "info"]
    assert all(f["probe"] == "toolcheck.state.read" for f in alpha_toolcheck)
    assert not [f for f in report["findings"] if f["agent"] == "gamma" and f["category"] == "toolcheck"]
    assert report["summary"]["critical"] >= 1
    assert report["summary"]["probes_failed"] >= 1  # gamma's hung probe
    # each probe that did not answer is named, with why: here gamma's hung one
    failed = {(f["agent"], f["probe"]): f for f in report["failed"]}
    hung = failed[("gamma", "toolcheck.state.read")]
    assert hung["status"] == "timeout"
    assert hung["reason"] == "no answer before the deadline"
    assert len(report["failed"]) == report["summary"]["probes_failed"]
    statuses_by_category = {c["category"]: c["status"] for c in report["categories"]}
    assert statuses_by_category["toolcheck"] == "critical"
    assert report["unreachable"] == []
    # progress came as agents finished: alpha finished, gamma never did
    assert progress
    assert progress[0][1] == 2
    assert any("alpha" in (message or "") for _, _, message in progress)


async def test_health_check_whole_fleet_one_category(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, _ = fleet
    async with mcp_client(hub.url, hub.admin_key) as client:
        report = await call(client, "health_check", categories=["system"])
        assert report["partial"] is False
        assert report["summary"]["agents_checked"] == 3
        assert report["summary"]["probes_run"] == 9
        assert report["summary"]["probes_failed"] == 0
        assert [c["category"] for c in report["categories"]] == ["system"]
        single = await call(client, "health_check", agent="beta", categories=["system"])
        assert single["summary"]["agents_checked"] == 1


def to_hundredths(ms: float) -> bool:
    """A duration as the tools give it: to the hundredth of a millisecond, not 15 digits."""
    return ms == round(ms, 2)


async def test_diagnose_returns_findings_and_readings(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, _ = fleet
    async with mcp_client(hub.url, hub.admin_key) as client:
        report = await call(client, "diagnose", agent="alpha", category="system", description="slow site")
        assert report["complete"] is True
        assert [r["probe"] for r in report["readings"]] == [
            "system.disk.usage",
            "system.memory.usage",
            "system.cpu.usage",
        ]
        assert all(r["status"] == "ok" and r["result"] for r in report["readings"])
        assert all(to_hundredths(r["duration_ms"]) for r in report["readings"])
        toolcheck = await call(client, "diagnose", agent="alpha", category="toolcheck")
        assert [f["title"] for f in toolcheck["findings"]] == [
            "toolcheck critical",
            "toolcheck warning",
            "toolcheck info",
        ]
        text = await call_error(client, "diagnose", agent="alpha", category="nosuch")
        assert "system" in text
        assert "toolcheck" in text


async def test_probe_overview_and_audit_logs(fleet: tuple[RunningHub, dict[str, EnrolledAgent]]) -> None:
    hub, _ = fleet
    async with mcp_client(hub.url, hub.admin_key) as client:
        info = await call(client, "probe", agent="beta", probe="system.info")
        assert info["agent"] == "beta"
        assert info["result"]["kernel"]
        overview = await call(client, "agent_overview", agent="beta")
        assert overview["name"] == "beta"
        assert overview["status"] == "online"
        assert abs(overview["uptime_s"] - info["result"]["uptime_seconds"]) < 5  # one machine here
        assert overview["attestation"]["code_hash"].startswith("sha256:")
        assert overview["attestation"]["pending_change"] is False
        assert "system" in overview["categories"]
        assert overview["recent_probes"][0]["probe"] == "system.info"
        audit = await call(client, "query_logs", source="audit", agent="beta", lines=5)
        assert audit["audit"]
        assert all(e["target"] == "beta" for e in audit["audit"])
        durations = [info["duration_ms"], *(p["duration_ms"] for p in overview["recent_probes"])]
        durations += [e["duration_ms"] for e in audit["audit"] if e["duration_ms"] is not None]
        assert all(to_hundredths(ms) for ms in durations), durations
        text = await call_error(client, "query_logs", source="systemd")
        assert "needs an agent" in text


async def test_query_logs_reads_an_allowed_log_file(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, agents = fleet
    log_file = agents["alpha"].home.parent / "logs" / "app.log"
    async with mcp_client(hub.url, hub.admin_key) as client:
        found = await call(
            client, "query_logs", source="system", agent="alpha", path=str(log_file), grep="ERROR", lines=5
        )
        assert found["probe"] == "system.logs.tail"
        text = json.dumps(found["result"])
        assert "line 27 ERROR" in text
        assert "line 28 ok" not in text
        refused = await call_error(client, "query_logs", source="system", agent="alpha", path="/etc/shadow")
        assert "allowed" in refused


async def test_offline_agent_is_reported_unreachable(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    hub, agents = fleet
    agents["beta"].stop()
    try:
        wait_until(lambda: hub.statuses()["beta"] == "offline", timeout=10)
        async with mcp_client(hub.url, hub.admin_key) as client:
            report = await call(client, "health_check", categories=["system"])
            assert [u["agent"] for u in report["unreachable"]] == ["beta"]
            assert "offline since" in report["unreachable"][0]["reason"]
            assert report["summary"]["agents_checked"] == 2
            text = await call_error(client, "diagnose", agent="beta", category="system")
            assert "offline" in text
    finally:  # back, for the module's tests that a worker runs after this one (worksteal)
        agents["beta"].start()
        wait_until(lambda: hub.statuses()["beta"] == "online", timeout=30)


# --- a dropped event stream, resumed ----------------------------------------------

RESUMABLE_PROTOCOL = "2025-11-25"  # the SDK primes event streams (an id before any data) from here on


async def open_raw_session(http: httpx2.AsyncClient) -> dict[str, str]:
    """initialize + initialized by hand; the headers every later request of the session carries."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    hello = json.dumps(initialize_request(RESUMABLE_PROTOCOL))
    opened = await http.post("/mcp", content=hello, headers=headers)
    assert opened.status_code == 200, opened.text
    headers |= {
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": RESUMABLE_PROTOCOL,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", content=json.dumps(initialized), headers=headers)).status_code == 202
    return headers


async def read_events(
    response: httpx2.Response, until: Any = None
) -> tuple[list[tuple[str | None, dict[str, Any] | None]], str | None]:
    """(id, message) for each SSE event until ``until(message)`` is true or the body ends; the last id."""
    parser, seen = SSEParser(), []
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            message = json.loads(event.data) if event.data.strip() else None
            seen.append((event.id, message))
            if until is not None and until(message):
                return seen, parser.last_event_id
    return seen, parser.last_event_id


async def test_a_dropped_health_check_stream_is_resumed_with_last_event_id(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    """The POST's event stream is dropped after its first event; a GET with Last-Event-ID gets the rest.

    gamma's toolcheck hangs, so the answer comes only at the 3 s deadline,
    long after the connection that asked for it is gone.
    """
    hub, _ = fleet
    call_body = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {
            "name": "health_check",
            "arguments": {"tags": ["#prod"], "categories": ["system", "toolcheck"], "deadline_s": 3},
            "_meta": {"progressToken": "resume-me"},
        },
    }
    auth = {"Authorization": f"Bearer {hub.admin_key}"}
    async with httpx2.AsyncClient(base_url=hub.url, headers=auth, timeout=30) as http:
        headers = await open_raw_session(http)
        with trio.fail_after(20):
            async with http.stream("POST", "/mcp", content=json.dumps(call_body), headers=headers) as posted:
                assert posted.headers["content-type"].startswith("text/event-stream")
                first, last_id = await read_events(posted, until=lambda _message: True)
            # the connection is closed here, before any answer
            assert first == [(last_id, None)]  # the priming event: an id, no data
            assert last_id is not None
            resume = headers | {"Last-Event-ID": last_id, "Accept": "text/event-stream"}
            async with http.stream("GET", "/mcp", headers=resume) as resumed:
                assert resumed.status_code == 200
                rest, _ = await read_events(resumed, until=lambda m: m is not None and m.get("id") == 41)

            other = await open_raw_session(http)  # another session cannot read this one's events
            peek = other | {"Last-Event-ID": last_id, "Accept": "text/event-stream"}
            stolen: list[tuple[str | None, dict[str, Any] | None]] = []
            async with http.stream("GET", "/mcp", headers=peek) as foreign:
                with trio.move_on_after(2):  # a replay stays open for what comes next: stop reading
                    await read_events(foreign, until=lambda m: stolen.append((None, m)) and False)
            assert [m for _, m in stolen if m is not None] == []

    messages = [m for _, m in rest if m is not None]
    assert all(event_id is not None and int(event_id) > int(last_id) for event_id, _ in rest)
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert progress
    assert {m["params"]["progressToken"] for m in progress} == {"resume-me"}
    answer = messages[-1]
    assert answer["id"] == 41
    report = answer["result"]["structuredContent"]
    assert report["partial"] is True
    assert report["summary"]["agents_checked"] == 2


# --- an event stream whose client goes, not resumable: the call is cancelled -------------


async def test_a_health_check_whose_client_goes_is_cancelled_unless_it_can_be_resumed(
    fleet: tuple[RunningHub, dict[str, EnrolledAgent]],
) -> None:
    """On 2025-06-18 nothing primes the stream, so no one can resume it: the call is cancelled.

    gamma's toolcheck hangs: its probe held its slot on gamma until the hub's 20 s probe
    timeout (the call's deadline is 60 s), long after the client that asked had gone; now
    it is cancelled as the client goes.
    """
    hub, _ = fleet
    protocol = "2025-06-18"
    call_body = {
        "jsonrpc": "2.0",
        "id": 51,
        "method": "tools/call",
        "params": {
            "name": "health_check",
            "arguments": {"tags": ["#prod"], "categories": ["toolcheck"], "deadline_s": 60},
            "_meta": {"progressToken": "goes-away"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    auth = {"Authorization": f"Bearer {hub.admin_key}"}

    def cancelled() -> bool:  # gamma's hung probe, cancelled for the caller
        return any(
            row["target"] == "gamma" and row["outcome"] == "cancelled" and "toolcheck" in row["detail"]
            for row in audit_rows(hub, "mcp.health_check")
        )

    async with httpx2.AsyncClient(base_url=hub.url, headers=auth, timeout=30) as http:
        opened = await http.post("/mcp", content=json.dumps(initialize_request(protocol)), headers=headers)
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": protocol}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post("/mcp", content=json.dumps(initialized), headers=headers)
        with trio.fail_after(20):
            async with http.stream("POST", "/mcp", content=json.dumps(call_body), headers=headers) as posted:
                assert posted.headers["content-type"].startswith("text/event-stream")
        # the connection is closed here, long before the deadline
        await eventually(cancelled, timeout_s=15)

    def call_cancelled() -> bool:  # and the call's own row says so (its nursery was cancelled whole)
        rows = audit_rows(hub, "mcp.call.health_check")
        return any(row["outcome"] == "cancelled" for row in rows)

    await eventually(call_cancelled, timeout_s=15)
