"""An agent held as degraded stays held whatever it claims next, an upgrade too: only an
admin's accept clears a hold.

Regression (a hostile-agent review): a held agent that reconnected claiming a new agent
version, with any code hash, was taken as upgraded: its claim became the baseline and it was
online again, with no admin, where SECURITY.md says its probes are refused until one accepts.
"""

from __future__ import annotations

from pathlib import Path

from sonde.hub.agent_records import get_agent
from sonde.hub.attestation import check_attestation
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from tests.hub.test_agent_records import make_agent
from tests.hub.test_hub_races import seed

ACCEPTED = {"os": "linux", "kernel": "6.1", "agentVersion": "0.1.0", "codeHash": "sha256:a", "packs": {}}
HELD_FOR = {**ACCEPTED, "codeHash": "sha256:b"}


async def test_a_held_agent_claiming_an_upgrade_stays_held(tmp_path: Path) -> None:
    agent = make_agent(
        "web-1", attestation=ACCEPTED, pending_attestation=HELD_FOR, status="degraded", last_seen=1.0
    )
    seed(tmp_path, agent)
    upgrade = {**ACCEPTED, "agentVersion": "0.1.1", "codeHash": "sha256:anything"}
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        after = await check_attestation(hub, hub.fleet.records[agent.id], upgrade)
        stored = await hub.store.read(lambda db: get_agent(db, agent.id))
    assert (after.status, after.attestation, after.pending_attestation) == ("degraded", ACCEPTED, upgrade)
    assert stored is not None
    assert (stored.status, stored.attestation) == ("degraded", ACCEPTED)
