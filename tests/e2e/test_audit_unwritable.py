"""A hub that cannot write its audit log refuses calls, loses no entry, and serves again once it can.

An agent whose attestation must be recorded meanwhile is told why it is
refused, and comes in once the hub can write. The real `sonde hub` is made
unable to write by its file-size limit
(RLIMIT_FSIZE, set from outside with prlimit): past it every write fails, as
on a full disk. Before, the hub went on answering calls while their audit
entries were dropped (an ERROR line each) — calls off the record.
"""

from __future__ import annotations

import re
import resource
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.harness import audit_rows, enroll_named, status_of
from tests.e2e.mcpclient import mcp_client
from tests.e2e.procs import RunningHub, running_hub, wait_until, with_site
from tests.e2e.toolpack import write_toolpack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TINY_FILES = 4096  # no file of the hub's may grow past this: every append to the WAL fails
PROBE = {"agent": "scribe", "probe": "system.memory.usage"}


def limit_file_size(hub: RunningHub, soft: int) -> None:
    resource.prlimit(hub.proc.popen.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))


class Caller:
    """Calls the probe tool and remembers each outcome as the audit should record it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.seen: list[str] = []

    async def until(self, refused: bool) -> str:
        """Call until the answer is (or is no longer) a refusal for the audit log; its text."""
        with trio.fail_after(20):
            while True:
                result = await self.client.call_tool("probe", PROBE)
                text = result.content[0].text
                was_refused = "cannot write its audit log" in text
                self.seen.append(
                    "audit_unavailable" if was_refused else "ok" if not result.is_error else text
                )
                if was_refused == refused:
                    return str(text)
                await trio.sleep(0.1)


async def test_calls_are_refused_while_the_audit_log_cannot_be_written_and_none_is_lost(
    tmp_path: Path,
) -> None:
    with running_hub(tmp_path) as hub:
        agent = enroll_named(hub, tmp_path / "home-scribe", "scribe")
        # first connects while nothing can be written, with a pack its enrollment did not have:
        # the new baseline is a write
        late = enroll_named(hub, tmp_path / "home-late", "late")
        late.env = with_site(late.env, write_toolpack(tmp_path / "site"))
        agent.start()
        try:
            wait_until(lambda: status_of(hub, "scribe") == "online")
            async with mcp_client(hub.url, hub.admin_key) as client:
                caller = Caller(client)
                await caller.until(refused=False)
                limit_file_size(hub, TINY_FILES)
                try:
                    refusal = await caller.until(refused=True)
                    assert "database or disk is full" in refusal or "disk I/O error" in refusal, refusal
                    with hub.client() as http:
                        posted = http.post("/api/v1/probe", json=PROBE)
                        assert posted.status_code == 503
                        assert posted.json()["error"]["code"] == "audit_unavailable"
                        assert http.get("/api/v1/agents").status_code == 200  # reads go on
                        health = http.get("/api/v1/health")  # what monitoring sees
                        assert health.status_code == 503
                        assert health.json()["status"] == "degraded"
                        assert "audit log cannot be written" in health.json()["problem"]
                    late.start()
                    hub.proc.wait_for(
                        re.compile(r"agent late could not be brought online: the hub cannot write")
                    )
                finally:
                    limit_file_size(hub, resource.RLIM_INFINITY)
                await caller.until(refused=False)
                wait_until(lambda: status_of(hub, "late") == "online", timeout=40)
            with hub.client() as http:
                assert http.get("/api/v1/health").json()["status"] == "ok"
                verified = http.get("/api/v1/audit/verify").json()  # (flushes what waits)
            assert verified["ok"], verified
            # every call is on the record, in order: those answered before the hub knew, the refused, the rest
            assert [row["outcome"] for row in audit_rows(hub, "mcp.call.probe")] == caller.seen
            assert "audit_unavailable" in caller.seen
            assert not audit_rows(hub, "audit.gap")  # nothing had to be dropped
            log = hub.proc.output
            assert log.count("cannot write the audit log") == 1
            assert "the audit log is written again" in log
            assert "Traceback" not in log
        finally:
            agent.stop()
            if late.proc is not None:
                late.stop()
