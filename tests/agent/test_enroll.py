"""Enrollment against a tiny real HTTP server on 127.0.0.1 (stdlib, in a thread)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sonde.agent.config import AgentConfig, load_config, save_config
from sonde.agent.enroll import EnrollError, clock_skew_warning, enroll
from sonde.protocol.enrollment import EnrollRequest
from sonde.protocol.signing import (
    new_private_key,
    private_key_from_text,
    private_key_to_text,
    public_key_to_text,
)
from tests.agent.probes import registry_for_tests
from tests.ports import free_port

TOKEN = "tok_0123456789abcdef"
HUB_PUBLIC_KEY = public_key_to_text(new_private_key().public_key())


@dataclass
class ScriptedHub:
    """Answers every POST with ``status`` and ``body``; records what it received."""

    url: str = ""
    status: int = 201
    body: bytes = b""
    date: str | None = None  # the Date header to send; None: the real time
    received: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def answer_json(self, status: int, data: Any) -> None:
        self.status, self.body = status, json.dumps(data).encode()

    def answer_success(self, name: str = "web-1") -> None:
        self.answer_json(
            201,
            {"agentId": "agent-42", "name": name, "hubPublicKey": HUB_PUBLIC_KEY, "heartbeatIntervalS": 30},
        )

    def answer_error(self, status: int, code: str, message: str) -> None:
        self.answer_json(status, {"error": {"code": code, "message": message}})


@pytest.fixture
def hub() -> Iterator[ScriptedHub]:
    scripted = ScriptedHub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            scripted.received.append((self.path, dict(self.headers), self.rfile.read(length)))
            self.send_response(scripted.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(scripted.body)))
            self.end_headers()
            self.wfile.write(scripted.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            return scripted.date or super().date_time_string(timestamp)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    scripted.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield scripted
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def do_enroll(hub: ScriptedHub, path: Path, **kw: Any) -> AgentConfig:
    kw.setdefault("name", "web-1")
    return enroll(hub.url, TOKEN, config_path=path, registry=registry_for_tests(), timeout_s=5, **kw)


def test_success_saves_the_identity(hub: ScriptedHub, tmp_path: Path) -> None:
    hub.answer_success()
    path = tmp_path / "sonde" / "config.json"
    config = do_enroll(hub, path)
    assert config.agent_id == "agent-42"
    assert config.name == "web-1"
    assert config.hub_url == hub.url
    assert config.hub_public_key == HUB_PUBLIC_KEY
    assert load_config(path) == config
    request_path, headers, body = hub.received[0]
    assert request_path == "/api/v1/agents/enroll"
    assert headers["Content-Type"] == "application/json"
    sent = EnrollRequest.model_validate_json(body)
    assert sent.token == TOKEN
    assert "publicKey" in json.loads(body)  # camelCase on the wire
    assert config.private_key is not None
    # only the public half left the machine, and it matches the saved private key
    assert sent.public_key == public_key_to_text(private_key_from_text(config.private_key).public_key())
    assert config.private_key not in body.decode()
    assert {p.name for p in sent.packs} == {"system", "testpack"}
    assert sent.attestation.packs["testpack"] == "0.0.1"


def test_success_keeps_other_keys_and_replaces_an_old_identity(hub: ScriptedHub, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    old_key = private_key_to_text(new_private_key())
    save_config(AgentConfig(hub_url=hub.url, agent_id="old", private_key=old_key, api_key="sk_1"), path)
    hub.answer_success()
    config = do_enroll(hub, path)
    assert config.agent_id == "agent-42"
    assert config.private_key != old_key
    assert config.api_key == "sk_1"  # `sonde login`'s key for this hub


def test_an_api_key_saved_for_another_hub_is_removed_saying_so(hub: ScriptedHub, tmp_path: Path) -> None:
    """It was kept beside the new hub's URL, and the bridge sent it there (an operator-day review)."""
    path = tmp_path / "config.json"
    save_config(AgentConfig(hub_url="http://old:1", api_key="sonde_" + "k" * 43), path)
    hub.answer_success()
    warned: list[str] = []
    config = do_enroll(hub, path, warn=warned.append)
    assert (config.hub_url, config.api_key) == (hub.url, None)
    assert "apiKey" not in json.loads(path.read_text())
    assert warned == [
        f"the API key `sonde login` saved was for http://old:1, not this hub: it is removed from {path}. "
        f"Run `sonde login --hub {hub.url}` to save this hub's"
    ]


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (401, "token_used", "this enrollment token was already used"),
        (401, "token_expired", "this enrollment token expired 3 minutes ago"),
        (409, "name_taken", "an agent named web-1 already exists"),
    ],
)
def test_hub_refusal_carries_its_code_and_writes_nothing(
    hub: ScriptedHub, tmp_path: Path, status: int, code: str, message: str
) -> None:
    hub.answer_error(status, code, message)
    path = tmp_path / "config.json"
    with pytest.raises(EnrollError) as caught:
        do_enroll(hub, path)
    assert (caught.value.code, caught.value.message) == (code, message)
    assert not path.exists()


def test_refused_re_enrollment_keeps_the_old_identity(hub: ScriptedHub, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    old = save_config(AgentConfig(hub_url="http://old:1", agent_id="old", name="web-1"), path)
    before = path.read_bytes()
    hub.answer_error(401, "token_unknown", "no such enrollment token")
    with pytest.raises(EnrollError, match="no such enrollment token"):
        do_enroll(hub, path)
    assert path.read_bytes() == before
    assert load_config(path) == old


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (201, b"<html>hello</html>", "bad_response"),
        (200, b'{"agentId": "a"}', "bad_response"),
        (
            201,
            b'{"agentId": "a", "name": "n", "hubPublicKey": "AAAA", "heartbeatIntervalS": 30}',
            "bad_response",
        ),
        (500, b"<html>Internal Server Error</html>", "http_500"),
        (404, b"", "http_404"),
    ],
)
def test_garbage_answers_are_clear_errors(
    hub: ScriptedHub, tmp_path: Path, status: int, body: bytes, code: str
) -> None:
    hub.status, hub.body = status, body
    path = tmp_path / "config.json"
    with pytest.raises(EnrollError) as caught:
        do_enroll(hub, path)
    assert caught.value.code == code
    assert not path.exists()


def test_unreachable_hub(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(EnrollError) as caught:
        enroll(url, TOKEN, "web-1", config_path=tmp_path / "c.json", registry=registry_for_tests())
    assert caught.value.code == "unreachable"
    assert caught.value.message.startswith(f"cannot reach the hub at {url}: ")


@pytest.mark.parametrize("url", ["ftp://hub", "hub.example.com", "http://", "https://hub/?x=1"])
def test_bad_hub_url(tmp_path: Path, url: str) -> None:
    with pytest.raises(EnrollError) as caught:
        enroll(url, TOKEN, "web-1", config_path=tmp_path / "c.json", registry=registry_for_tests())
    assert caught.value.code == "invalid_url"


def test_malformed_token_or_name_never_reaches_the_hub(hub: ScriptedHub, tmp_path: Path) -> None:
    with pytest.raises(EnrollError) as caught:
        enroll(hub.url, "short", "web-1", config_path=tmp_path / "c.json", registry=registry_for_tests())
    assert caught.value.code == "invalid_token"
    with pytest.raises(EnrollError) as caught:
        do_enroll(hub, tmp_path / "c.json", name="-bad name")
    assert caught.value.code == "invalid_name"
    assert hub.received == []


def test_a_malformed_token_or_name_is_said_first_as_a_usage_error(hub: ScriptedHub, tmp_path: Path) -> None:
    """Before the config is read: a machine enrolled already, or a broken config, is not the
    mistake to report for an argument that could never enroll (`sonde enroll` exits 2 for it)."""
    path = tmp_path / "config.json"
    key = private_key_to_text(new_private_key())
    identity = AgentConfig(hub_url=hub.url, agent_id="a1", name="web-1", private_key=key)
    save_config(identity.model_copy(update={"hub_public_key": HUB_PUBLIC_KEY}), path)  # enrolled
    with pytest.raises(EnrollError) as caught:
        enroll(hub.url, "short", "web-1", config_path=path, replace=False, registry=registry_for_tests())
    assert (caught.value.code, caught.value.malformed_argument) == ("invalid_token", True)
    path.write_text("{broken")
    with pytest.raises(EnrollError) as caught:
        do_enroll(hub, path, name="bad name")
    assert (caught.value.code, caught.value.malformed_argument) == ("invalid_name", True)
    assert hub.received == []


def test_enrolled_is_called_once_the_hub_said_yes_before_the_identity_is_saved(
    hub: ScriptedHub, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    seen: list[bool] = []
    hub.answer_error(403, "token_used", "used")
    with pytest.raises(EnrollError):
        do_enroll(hub, path, enrolled=lambda: seen.append(path.exists()))
    assert seen == []  # refused: nothing was enrolled
    hub.answer_success()
    do_enroll(hub, path, enrolled=lambda: seen.append(path.exists()))
    assert seen == [False]
    assert path.exists()


def test_broken_config_fails_before_the_token_is_spent(hub: ScriptedHub, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{broken")
    hub.answer_success()
    with pytest.raises(EnrollError) as caught:
        do_enroll(hub, path)
    assert caught.value.code == "bad_config"
    assert str(path) in caught.value.message
    assert hub.received == []


# --- the MCP URL, a 404, and a clock the hub would refuse -----------------------------------


@pytest.mark.parametrize("suffix", ["/mcp", "/mcp/", "/"])
def test_the_mcp_url_enrolls_with_the_hub_it_names(hub: ScriptedHub, tmp_path: Path, suffix: str) -> None:
    """`make run` prints the MCP URL; login and mcp-bridge take it, and so does enroll."""
    hub.answer_success()
    config = enroll(
        hub.url + suffix, TOKEN, "web-1", config_path=tmp_path / "c.json", registry=registry_for_tests()
    )
    assert hub.received[0][0] == "/api/v1/agents/enroll"
    assert config.hub_url == hub.url


def test_a_404_says_the_url_is_no_hub_base_url(hub: ScriptedHub, tmp_path: Path) -> None:
    """Quart's own 404 text ("If you entered the URL manually...") tells the operator nothing."""
    hub.answer_error(404, "not_found", "The requested URL was not found on the server. If you entered...")
    with pytest.raises(EnrollError) as caught:
        enroll(
            hub.url + "/api", TOKEN, "web-1", config_path=tmp_path / "c.json", registry=registry_for_tests()
        )
    assert caught.value.code == "http_404"
    assert caught.value.message.startswith(f"{hub.url}/api is not a Sonde hub's base URL: ")
    assert "requested URL" not in caught.value.message


@pytest.mark.parametrize(
    ("offset_s", "said"),
    [
        # the Date header is to the second: each offset is half a minute off a round figure
        (-86400 - 30, "1 day 0 h behind the hub's"),  # this machine a day behind
        (40 * 86400 + 3600 + 30, "40 days 1 h ahead of the hub's"),
        (-215, "3 min 3"),  # 3 min 34 or 35 s
    ],
)
def test_a_clock_far_from_the_hubs_is_warned_of_and_enrollment_goes_on(
    hub: ScriptedHub, tmp_path: Path, offset_s: int, said: str
) -> None:
    hub.answer_success()
    hub.date = formatdate(time.time() - offset_s, usegmt=True)  # the hub's clock, seen from ours
    warnings: list[str] = []
    config = do_enroll(hub, tmp_path / "c.json", warn=warnings.append)
    assert config.agent_id == "agent-42"
    [warning] = warnings
    assert said in warning
    assert "±120 s" in warning
    assert "NTP" in warning


@pytest.mark.parametrize("date", [None, "garbage", "100 s ahead", "100 s behind"])
def test_a_clock_within_the_window_or_no_readable_date_is_no_warning(
    hub: ScriptedHub, tmp_path: Path, date: str | None
) -> None:
    hub.answer_success()
    offsets = {"100 s ahead": -100, "100 s behind": 100}  # this machine's clock against the hub's
    hub.date = formatdate(time.time() + offsets[date], usegmt=True) if date in offsets else date
    warnings: list[str] = []
    do_enroll(hub, tmp_path / "c.json", warn=warnings.append)
    assert warnings == []


def test_a_refusal_still_warns_of_the_clock(hub: ScriptedHub, tmp_path: Path) -> None:
    hub.answer_error(401, "token_used", "this enrollment token was already used")
    hub.date = formatdate(time.time() + 3630, usegmt=True)
    warnings: list[str] = []
    with pytest.raises(EnrollError, match="already used"):
        do_enroll(hub, tmp_path / "c.json", warn=warnings.append)
    assert ["1 h 0 min behind the hub's" in w for w in warnings] == [True]


def test_clock_skew_words() -> None:
    hub_now = 1_800_000_000.0
    date = formatdate(hub_now, usegmt=True)
    assert clock_skew_warning(date, hub_now + 120) is None
    assert clock_skew_warning(date, hub_now - 120) is None
    ahead = clock_skew_warning(date, hub_now + 121)
    assert ahead is not None
    assert ahead.startswith("this machine's clock is 2 min 1 s ahead of the hub's")
