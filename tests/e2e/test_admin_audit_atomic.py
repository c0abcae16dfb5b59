"""An admin change made over REST and its audit row survive a crash together.

A real `sonde hub` is SIGKILLed the moment each admin answer arrives, started again on the
same data directory, and the database must hold the change's row. Before, each route
committed the change, then queued the row (`AuditQueue`: committed up to 50 ms later): the
kill kept the change and lost the row nearly every time (a new admin key that worked, with
no ``rest.api_key.create`` row), and `sonde hub audit verify` still said intact.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sonde.agent.enroll import build_request
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM_PACK
from sonde.protocol.signing import new_private_key, public_key_to_text
from tests.e2e.procs import URL_LINE, Proc, RunningHub, base_env, first_admin_key, spawn

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ROUNDS = 2
HELD_CLAIM = {"agentVersion": "9.9.9", "codeHash": "f" * 64, "os": "linux", "kernel": "6", "packs": {}}


class CrashingHub:
    """One data directory, and a `sonde hub` on it: started, SIGKILLed right after an answer, started again."""

    def __init__(self, tmp: Path) -> None:
        self.data_dir = tmp / "hubdata"
        self.env = base_env(tmp / "hubhome")
        self.proc: Proc | None = None
        self.lost: list[str] = []  # the rows a kill lost, as `expect_row` found them
        self.hub = self.start(first=True)

    def start(self, first: bool = False) -> RunningHub:
        self.proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(self.data_dir)], self.env)
        key = first_admin_key(self.proc, self.data_dir) if first else self.hub.admin_key
        url = self.proc.wait_for(URL_LINE).group(1)
        return RunningHub(self.proc, url, key, self.data_dir, self.env)

    def crash_after(self, method: str, path: str, status: int, body: Any = None) -> dict[str, Any]:
        """Send an admin request, SIGKILL the hub as soon as its answer arrives, start it again; the answer."""
        with self.hub.client() as http:
            answer = http.request(method, path, json=body)
            assert self.proc is not None
            self.proc.popen.send_signal(signal.SIGKILL)  # before anything the hub would do a moment later
        self.proc.stop()
        assert answer.status_code == status, answer.text
        self.hub = self.start()
        found: dict[str, Any] = answer.json()
        return found

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    @contextmanager
    def database(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(f"file:{self.data_dir / 'sonde.db'}?mode=ro", uri=True)
        try:
            yield db
        finally:
            db.close()

    def expect_row(self, action: str, target: str) -> None:
        """There must be one ``ok`` row of ``action`` on ``target``; one missing goes in ``lost``
        (the test says at its end which were, the kill of each action shown)."""
        with self.database() as db:
            query = "SELECT outcome FROM audit WHERE action = ? AND target = ? ORDER BY seq"
            outcomes = [row[0] for row in db.execute(query, [action, target])]
        if outcomes != ["ok"]:
            self.lost.append(f"{action} {target}: {outcomes}")

    def status(self, key: str | None = None, path: str = "/api/v1/agents") -> int:
        with self.hub.client(key) as http:
            return http.get(path).status_code


@pytest.fixture
def crashing(tmp_path: Path) -> Iterator[CrashingHub]:
    hub = CrashingHub(tmp_path)
    try:
        yield hub
    finally:
        hub.stop()


def test_key_and_token_changes_keep_their_rows_through_a_kill(crashing: CrashingHub) -> None:
    for round_ in range(ROUNDS):
        made = crashing.crash_after(
            "POST", "/api/v1/api-keys", 201, {"name": f"ops-{round_}", "role": "admin"}
        )
        key_id, secret = made["key"]["id"], made["secret"]
        assert crashing.status(secret) == 200  # the key survived the kill...
        crashing.expect_row("rest.api_key.create", key_id)  # ...and so did its row

        crashing.crash_after("DELETE", f"/api/v1/api-keys/{key_id}", 200)
        assert crashing.status(secret) == 401
        crashing.expect_row("rest.api_key.revoke", key_id)

        token = crashing.crash_after("POST", "/api/v1/enrollment-tokens", 201, {})
        token_id = token["token"]["id"]
        crashing.expect_row("rest.token.create", token_id)

        crashing.crash_after("DELETE", f"/api/v1/enrollment-tokens/{token_id}", 200)
        crashing.expect_row("rest.token.revoke", token_id)
        with crashing.hub.client() as http:
            tokens = {t["id"]: t for t in http.get("/api/v1/enrollment-tokens").json()["tokens"]}
        assert tokens[token_id]["state"] == "revoked"
    crashing.stop()
    assert crashing.lost == []
    verify_intact(crashing)


def test_agent_changes_keep_their_rows_through_a_kill(crashing: CrashingHub) -> None:
    for round_ in range(ROUNDS):
        name = f"crash-{round_}"
        with crashing.hub.client() as http:
            made = http.post("/api/v1/enrollment-tokens", json={"name": name})
        assert made.status_code == 201, made.text

        request = enroll_request(made.json()["secret"], name)
        enrolled = crashing.crash_after("POST", "/api/v1/agents/enroll", 201, request)
        crashing.expect_row("agent.enroll", name)
        assert crashing.status(path=f"/api/v1/agents/{name}") == 200

        crashing.crash_after("PUT", f"/api/v1/agents/{name}/tags", 200, {"tags": ["db"]})
        crashing.expect_row("rest.agent.tags", name)

        hold(crashing, enrolled["agentId"])  # as a reconnect with an unexplained change would
        accepted = crashing.crash_after("POST", f"/api/v1/agents/{name}/attestation/accept", 200)
        assert accepted["accepted"] is True
        crashing.expect_row("attestation.accept", name)

        crashing.crash_after("DELETE", f"/api/v1/agents/{name}", 200)
        assert crashing.status(path=f"/api/v1/agents/{name}") == 404
        crashing.expect_row("rest.agent.remove", name)
    crashing.stop()
    assert crashing.lost == []
    verify_intact(crashing)


def enroll_request(token: str, name: str) -> dict[str, Any]:
    """The body `sonde enroll` posts, with a fresh key pair."""
    key = public_key_to_text(new_private_key().public_key())
    request = build_request(token, name, key, PackRegistry.of([SYSTEM_PACK]))
    body: dict[str, Any] = request.model_dump(mode="json", by_alias=True)
    return body


def hold(crashing: CrashingHub, agent_id: str) -> None:
    """Hold the agent's attestation, in the file of a stopped hub, then start the hub again."""
    crashing.stop()
    db = sqlite3.connect(crashing.data_dir / "sonde.db")
    try:
        with db:
            db.execute(
                "UPDATE agents SET status = 'degraded', pending_attestation = ? WHERE id = ?",
                [json.dumps(HELD_CLAIM), agent_id],
            )
    finally:
        db.close()
    crashing.hub = crashing.start()


def verify_intact(crashing: CrashingHub) -> None:
    done = crashing.hub.cli("hub", "audit", "verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"intact", done.stdout + done.stderr), done.stdout + done.stderr
