"""Behind a reverse proxy the operator names (`--trusted-proxy`), the hub sees each client's own
address: in the audit log, in the failed-login limit, on the agent socket. Without the flag, an
X-Forwarded-For header is the client's own words and is ignored."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sonde.hub.ratelimit import MAX_FAILURES
from tests.e2e.harness import audit_rows, register_frame, send_register
from tests.e2e.procs import SONDE, base_env, running_hub, wait_until
from tests.subprocs import run_any

pytestmark = pytest.mark.e2e
BAD_KEY = {"Authorization": "Bearer sonde_not-a-key"}


def denied_clients(hub, action: str, field: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [json.loads(row["detail"])[field] for row in audit_rows(hub, action)]


TRUSTING = ("--trusted-proxy", "127.0.0.1, 10.0.0.0/8")


def test_a_trusted_proxy_names_the_client_in_the_audit_and_the_failed_login_limit(tmp_path: Path) -> None:
    with running_hub(tmp_path, *TRUSTING) as hub, httpx.Client(base_url=hub.url, timeout=10) as http:
        # the client wrote 1.2.3.4 itself; the proxy (127.0.0.1) appended whom it heard from
        forwarded = {**BAD_KEY, "X-Forwarded-For": "1.2.3.4, 203.0.113.7"}
        assert http.get("/api/v1/agents", headers=forwarded).status_code == 401
        wait_until(lambda: denied_clients(hub, "rest.auth", "client") == ["203.0.113.7"])

        # the limit counts per client behind the proxy, not for all of them at once
        guesser = {**BAD_KEY, "X-Forwarded-For": "203.0.113.8"}
        answers = [http.get("/api/v1/agents", headers=guesser).status_code for _ in range(MAX_FAILURES + 1)]
        assert answers[-1] == 429, answers
        neighbour = {**BAD_KEY, "X-Forwarded-For": "203.0.113.9"}
        assert http.get("/api/v1/agents", headers=neighbour).status_code == 401
        assert http.post("/mcp", headers=neighbour, json={}).status_code == 401
        assert http.post("/mcp", headers=guesser, json={}).status_code == 429


async def test_a_trusted_proxy_names_the_agent_behind_it(tmp_path: Path) -> None:
    with running_hub(tmp_path, *TRUSTING) as hub:
        frame = register_frame(uuid.uuid4().hex, "stranger", Ed25519PrivateKey.generate())
        answer = await send_register(hub.url, frame, forwarded_for="203.0.113.10")
        assert answer.first is not None
        assert answer.first.type == "hub.reject"
        wait_until(lambda: denied_clients(hub, "agent.connect", "peer") == ["203.0.113.10"])
        assert any(
            re.search(r"refused agent connection from 203\.0\.113\.10\b", line) for line in hub.proc.lines
        )


def test_without_the_flag_the_header_is_ignored(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub, httpx.Client(base_url=hub.url, timeout=10) as http:
        spoofed = {**BAD_KEY, "X-Forwarded-For": "203.0.113.7"}
        assert http.get("/api/v1/agents", headers=spoofed).status_code == 401
        wait_until(lambda: denied_clients(hub, "rest.auth", "client") == ["127.0.0.1"])


def test_a_trusted_proxy_that_is_no_address_is_refused_at_start(tmp_path: Path) -> None:
    argv = [*SONDE, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    done = run_any([*argv, "--trusted-proxy", "proxy.example"], env=base_env(tmp_path), timeout=30)
    assert done.returncode == 2, done.stderr
    assert "--trusted-proxy 'proxy.example' is not an IP address or network" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made
