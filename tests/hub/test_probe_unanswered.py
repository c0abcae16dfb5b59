"""A probe its agent never answers fails at its deadline, saying which agent did not answer.

Regression: "probe system.block.devices got no answer within 30s. Check list_agents for its
status": a health check's or a model's transcript could not tell which machine hung.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.errors import HubError
from sonde.hub.keys import ApiKeyRecord
from sonde.hub.probing import run_probe_for
from tests.hub.test_agent_records import make_agent
from tests.hub.test_hub_races import PACKS, PROBE, FakeLink, seed, session


async def test_a_probe_with_no_answer_names_its_agent(tmp_path: Path) -> None:
    agent = make_agent("web-1", packs=PACKS, attestation={"codeHash": "sha256:a"}, last_seen=1.0)
    seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        caller = caller_for(
            ApiKeyRecord(id="k1", name="k1", prefix="sonde_k1", role="admin", created_at=time.time())
        )
        hung = FakeLink()  # takes the request, never answers
        await hub.fleet.attach(session(agent.id, hung))
        with trio.fail_after(10), pytest.raises(HubError) as refused:
            await run_probe_for(hub, caller, hub.fleet.records[agent.id], PROBE, {}, timeout_s=0.1)
        hung.close("test over")
    assert hung.sent == [PROBE]
    assert refused.value.message.startswith(f"probe {PROBE} on agent web-1 got no answer within 0.1s. ")
