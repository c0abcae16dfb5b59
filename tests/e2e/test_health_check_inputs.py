"""health_check refuses what it cannot answer, through a real hub, real agents and the real mcp client.

Two agents with the test-only `toolcheck` pack: web (#prod) and stage (#staging).
A named agent must carry the tags given too; a category no matching agent has
is refused (or, beside ones that exist, reported in categories_not_found), never
a silent all-clear; and the optional agent is validated like every tool's agent.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until
from tests.e2e.toolpack import write_toolpack

TAGS = {"web": ["prod"], "stage": ["staging"]}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    tmp = tmp_path_factory.mktemp("health-inputs")
    site = write_toolpack(tmp / "site")
    with running_hub(tmp, "--heartbeat-interval", "1", site=site) as running:
        agents = [enroll_agent(running, tmp, name, site) for name in TAGS]
        for agent in agents:
            agent.start()
        try:
            wait_until(lambda: running.statuses() == dict.fromkeys(TAGS, "online"), timeout=30)
            with running.client() as http:
                for name, tags in TAGS.items():
                    assert http.put(f"/api/v1/agents/{name}/tags", json={"tags": tags}).status_code == 200
            yield running
        finally:
            for agent in agents:
                agent.stop()


async def test_a_named_agent_must_carry_the_tags_given(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:
        refused = await call_error(
            client, "health_check", agent="stage", tags=["prod"], categories=["system"]
        )
        assert "Agent stage does not carry the tags #prod; its tags: #staging." in refused
        assert "Drop tags" in refused
        assert "pick an agent that has them" in refused
        report = await call(client, "health_check", agent="web", tags=["#prod"], categories=["system"])
        assert report["summary"]["agents_checked"] == 1
        assert report["summary"]["probes_run"] == 3


async def test_tags_no_agent_carries_are_refused_not_an_empty_all_clear(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:
        refused = await call_error(client, "health_check", tags=["#nosuch"])
        assert "No agent you can reach carries the tags #nosuch. Tags in use: #prod #staging." in refused
        report = await call(client, "health_check", tags=["prod"], categories=["system"])
        assert report["summary"]["agents_checked"] == 1


async def test_a_category_no_matching_agent_has_is_refused(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:
        one = await call_error(client, "health_check", agent="web", categories=["nosuch"])
        assert one.startswith("Agent web has no 'nosuch' category. Its categories: ")
        assert "system" in one
        assert "toolcheck" in one
        fleet = await call_error(client, "health_check", categories=["nosuch"])
        assert fleet.startswith("None of the 2 matching agents has a 'nosuch' category. Their categories: ")
        assert "toolcheck" in fleet


async def test_requested_categories_that_exist_run_and_the_others_are_named(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:  # the real client checks the output schema
        report = await call(client, "health_check", tags=["prod"], categories=["nosuch", "toolcheck"])
    assert report["categories_not_found"] == ["nosuch"]
    assert [(c["category"], c["status"]) for c in report["categories"]] == [("toolcheck", "critical")]
    assert report["summary"]["agents_checked"] == 1
    assert report["summary"]["critical"] == 1
    assert report["partial"] is False


@pytest.mark.parametrize("agent", ["", "x" * 5000, "wéb"])
async def test_the_optional_agent_is_validated_like_the_other_tools(hub: RunningHub, agent: str) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:
        refused = await call_error(client, "health_check", agent=agent, categories=["system"])
        probe_refused = await call_error(client, "probe", agent=agent, probe="system.info")
    assert refused.startswith("Invalid arguments for health_check: agent: ")
    assert refused.removeprefix("Invalid arguments for health_check") == probe_refused.removeprefix(
        "Invalid arguments for probe"
    )
    assert "Unknown agent" not in refused
    assert len(refused) < 200  # never the whole 5000 characters back


async def test_a_bad_argument_is_refused_in_words_not_a_pattern(hub: RunningHub) -> None:
    """pydantic said ``String should match pattern '^[a-z][a-z0-9_]{0,31}$'`` and ``Extra inputs are
    not permitted``: a model had to decode the one and guess at the other."""
    async with mcp_client(hub.url, hub.admin_key) as client:
        category = await call_error(client, "health_check", categories=["Disk-Usage"])
        extra = await call_error(client, "health_check", agents="web-*")
        probe = await call_error(client, "probe", agent="alpha", probe="System.Info")
    assert category == (
        "Invalid arguments for health_check: categories.0: must be 1 to 32 lowercase letters, digits and '_', "
        "the first a letter"
    )
    assert extra == (
        "Invalid arguments for health_check: agents: not a parameter; the parameters are: agent, tags, "
        "categories, deadline_s"
    )
    assert "list_capabilities names every probe" in probe
    assert "pattern" not in probe
