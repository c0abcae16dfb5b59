"""The hub over TLS: HTTPS, WSS agents trusting a private CA, and what each client says when they do not.

A throwaway CA (trustme) issues the hub's certificate for 127.0.0.1; clients
are given its certificate through SSL_CERT_FILE, as the README says.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from tests.e2e.procs import SONDE, RunningHub, base_env, running_hub, spawn, wait_until
from tests.subprocs import run_any, run_ok

pytestmark = pytest.mark.e2e

NOT_VERIFIED = "the hub's TLS certificate does not verify"


@dataclass
class TLSHub:
    hub: RunningHub
    ca_file: Path
    root: Path

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.hub.url,
            headers={"Authorization": f"Bearer {self.hub.admin_key}"},
            verify=ssl.create_default_context(cafile=str(self.ca_file)),
            timeout=10,
        )

    def trusting(self, home: Path) -> dict[str, str]:
        return {**base_env(home), "SSL_CERT_FILE": str(self.ca_file)}


def write_certificates(where: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, hub certificate chain, hub key) for 127.0.0.1, as PEM files."""
    where.mkdir(parents=True)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = where / "ca.pem", where / "hub.pem", where / "hub.key"
    ca.cert_pem.write_to_path(str(ca_file))
    issued.private_key_pem.write_to_path(str(key_file))
    cert_file.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    return ca_file, cert_file, key_file


@pytest.fixture(scope="module")
def tls_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSHub]:
    root = tmp_path_factory.mktemp("tls")
    ca_file, cert_file, key_file = write_certificates(root / "certs")
    with running_hub(root, "--tls-cert", str(cert_file), "--tls-key", str(key_file)) as hub:
        yield TLSHub(hub, ca_file, root)


def test_the_hub_serves_https_and_an_agent_trusting_its_ca_works_over_wss(tls_hub: TLSHub) -> None:
    assert tls_hub.hub.url.startswith("https://127.0.0.1:")
    with tls_hub.client() as http:
        assert http.get("/api/v1/health").json()["status"] == "ok"
    home = tls_hub.root / "home-trusting"
    home.mkdir()
    env = tls_hub.trusting(home)
    token = tls_hub.hub.token()
    run_ok([*SONDE, "enroll", "--hub", tls_hub.hub.url, "--token", token, "--name", "secure"], env=env)
    agent = spawn(["start", "--allow-root"], env)
    try:
        with tls_hub.client() as http:
            wait_until(lambda: http.get("/api/v1/agents/secure").json().get("status") == "online")
            reading = http.post("/api/v1/probe", json={"agent": "secure", "probe": "system.memory.usage"})
        assert reading.status_code == 200, reading.text
        assert reading.json()["result"]["total_bytes"] > 0
    finally:
        agent.stop()


def test_clients_without_the_ca_name_the_certificate_as_the_cause(tls_hub: TLSHub) -> None:
    hub = tls_hub.hub
    home = tls_hub.root / "home-untrusting"
    home.mkdir()
    env = base_env(home)
    token = hub.token()
    refused = run_any(
        [*SONDE, "enroll", "--hub", hub.url, "--token", token, "--name", "untrusting"],
        env=env,
        timeout=30,
    )
    assert refused.returncode == 1
    assert NOT_VERIFIED in refused.stderr
    assert "SSL_CERT_FILE" in refused.stderr

    # enrolled with the CA, started without it: the agent says why at once, not a handshake timeout
    run_ok(
        [*SONDE, "enroll", "--hub", hub.url, "--token", token, "--name", "untrusting"],
        env=tls_hub.trusting(home),
    )
    agent = spawn(["start", "--allow-root"], env)
    try:
        agent.wait_for(re.compile(re.escape(NOT_VERIFIED)), timeout=8)
    finally:
        agent.stop()

    login = run_any(
        [*SONDE, "login", "--hub", hub.url, "--api-key", hub.admin_key],
        env=base_env(tls_hub.root / "home-login"),
        timeout=30,
    )
    assert login.returncode == 1
    assert NOT_VERIFIED in login.stderr
    assert "nothing saved" in login.stderr

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25"},
    }
    bridged = run_any(
        [*SONDE, "mcp-bridge", "--hub", hub.url, "--api-key", hub.admin_key],
        env=base_env(tls_hub.root / "home-bridge"),
        input=json.dumps(initialize) + "\n",
        timeout=30,
    )
    answer = json.loads(bridged.stdout.splitlines()[0])
    assert answer["error"]["code"] == -32603
    assert NOT_VERIFIED in answer["error"]["message"]


def tls_flags(cert: Path, key: Path) -> list[str]:
    return ["--tls-cert", str(cert), "--tls-key", str(key)]


def hub_refuses(tmp_path: Path, cert: Path, key: Path) -> str:
    done = run_any(
        [*SONDE, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), *tls_flags(cert, key)],
        env=base_env(tmp_path / "home"),
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made
    return done.stderr


def test_a_certificate_and_key_that_cannot_serve_are_named_before_anything_starts(tmp_path: Path) -> None:
    _, cert, key = write_certificates(tmp_path / "certs")
    _, _, other_key = write_certificates(tmp_path / "other")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert (
        f"--tls-key {other_key} is not the private key of the certificate in --tls-cert {cert}"
        in hub_refuses(tmp_path, cert, other_key)
    )
    assert f"--tls-cert {garbage} holds no PEM certificate" in hub_refuses(tmp_path, garbage, key)
    assert f"--tls-key {garbage} holds no usable PEM private key" in hub_refuses(tmp_path, cert, garbage)
    assert f"--tls-cert {key} holds no PEM certificate" in hub_refuses(tmp_path, key, cert)  # swapped


def test_a_first_start_that_fails_leaves_no_admin_key_nobody_saw(tmp_path: Path) -> None:
    with running_hub(tmp_path / "first") as first:
        taken = first.url.removeprefix("http://")
        failed = run_any(
            [*SONDE, "hub", "--bind", taken, "--data-dir", str(tmp_path / "second" / "hubdata")],
            env=base_env(tmp_path / "home"),
            timeout=60,
        )
    assert failed.returncode == 1, failed.stderr
    assert "sonde_" not in failed.stderr
    with running_hub(tmp_path / "second") as second:  # the next start shows the first admin key
        with second.client() as http:
            assert http.get("/api/v1/agents").status_code == 200
