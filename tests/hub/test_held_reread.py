"""A held agent's record is re-read on every view (the CLI may have accepted it), and that
re-read must not undo an accept made while it ran.

The dashboard showed it: a view asked for just before an admin pressed "accept" read the held
record, the accept was stored and kept, and then the view's re-read put the held record back
in the hub's memory (the agent held again, in memory only, until the next re-read), while the
view answered "online" beside "pending_change": true.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from sonde.hub.agent_records import insert_agent
from sonde.hub.attestation import accept_held
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.db import open_database
from sonde.hub.probing import current_status
from tests.hub.test_agent_records import make_agent


async def test_a_reread_that_began_before_an_accept_keeps_the_accept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_database(tmp_path / "sonde.db")
    try:
        agent = make_agent(
            "delta",
            status="degraded",
            attestation={"codeHash": "sha256:a"},
            pending_attestation={"codeHash": "sha256:b"},
        )
        insert_agent(db, agent)
    finally:
        db.close()
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        held = hub.fleet.records[agent.id]
        assert hub.fleet.status(agent.id) == "degraded"
        read_done, accepted = trio.Event(), trio.Event()
        real_read = hub.store.read

        async def read_until_accepted(fn: Any, *args: Any) -> Any:
            # the schedule under test: the read has its answer (the held record) before the
            # accept is stored, and the view goes on only after the accept is kept
            answer = await real_read(fn, *args)
            read_done.set()
            await accepted.wait()
            return answer

        monkeypatch.setattr(hub.store, "read", read_until_accepted)
        seen: list[tuple[Any, str]] = []
        async with trio.open_nursery() as nursery:

            async def view() -> None:
                seen.append(await current_status(hub, held))

            nursery.start_soon(view)
            await read_done.wait()
            assert await accept_held(hub, held, "admin-key") is not None
            accepted.set()
        [(record, status)] = seen
        assert (record.pending_attestation, status) == (None, "offline")
        assert hub.fleet.records[agent.id].attestation == {"codeHash": "sha256:b"}
        assert hub.fleet.status(agent.id) == "offline"
