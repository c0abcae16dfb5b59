"""Where the bridge's hub URL and API key come from, and `sonde login` storing them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import trio

from sonde.agent.config import AgentConfig, load_config
from sonde.bridge import login as login_module
from sonde.bridge.login import login
from sonde.bridge.settings import NotConfigured, resolve_settings
from sonde.hub_url import normalize_hub_url
from sonde.protocol.signing import new_private_key, private_key_to_text, public_key_to_text
from tests.bridge.fakehub import GOOD_KEY, fake_hub
from tests.ports import free_port

FROM_CONFIG = AgentConfig(hub_url="http://config.example:3000", api_key="sonde_config")
ENV = {"SONDE_HUB_URL": "http://env.example:3000", "SONDE_API_KEY": "sonde_env"}


def enrolled(hub_url: str = "http://hub.example:3000") -> AgentConfig:
    hub_key = new_private_key().public_key()
    return AgentConfig(
        hub_url=hub_url,
        agent_id="a1",
        name="alpha",
        private_key=private_key_to_text(new_private_key()),
        hub_public_key=public_key_to_text(hub_key),
    )


def test_flags_beat_environment_beat_config() -> None:
    assert resolve_settings(None, None, {}, lambda: FROM_CONFIG).hub_url == "http://config.example:3000"
    from_env = resolve_settings(None, None, ENV, lambda: FROM_CONFIG)
    assert (from_env.hub_url, from_env.api_key) == ("http://env.example:3000", "sonde_env")
    flags = resolve_settings("http://flag.example:1/", "sonde_flag", ENV, lambda: FROM_CONFIG)
    assert (flags.hub_url, flags.api_key) == ("http://flag.example:1", "sonde_flag")
    assert flags.mcp_url == "http://flag.example:1/mcp"
    mixed = resolve_settings(None, None, {"SONDE_API_KEY": "sonde_env"}, lambda: FROM_CONFIG)
    assert (mixed.hub_url, mixed.api_key) == ("http://config.example:3000", "sonde_env")


@pytest.mark.parametrize(
    ("flag", "environ"),
    [("http://other.example:3000", {}), (None, {"SONDE_HUB_URL": "http://other.example:3000/mcp"})],
)
def test_the_configs_key_is_never_sent_to_another_hub(flag: str | None, environ: dict[str, str]) -> None:
    """A --hub or SONDE_HUB_URL naming another hub got the key `sonde login` saved for its own."""
    with pytest.raises(NotConfigured) as refused:
        resolve_settings(flag, None, environ, lambda: FROM_CONFIG)
    said = str(refused.value)
    assert "is for hub http://config.example:3000, not http://other.example:3000: it is not sent" in said
    assert "sonde login --hub http://other.example:3000" in said
    assert "sonde_config" not in said
    same = resolve_settings("HTTP://Config.Example:3000/", None, {}, lambda: FROM_CONFIG)  # spelled otherwise
    assert same.api_key == "sonde_config"
    keyed = resolve_settings(flag, "sonde_flag", environ, lambda: FROM_CONFIG)  # a key of its own: taken
    assert keyed.api_key == "sonde_flag"


def test_the_config_is_not_read_when_flags_say_everything() -> None:
    def no_config() -> AgentConfig:
        raise AssertionError("read the config")

    assert resolve_settings("http://h:1", "sonde_k", {}, no_config).api_key == "sonde_k"


def test_nothing_configured_says_to_run_login() -> None:
    with pytest.raises(NotConfigured, match=r"sonde login --hub URL` once \(it asks for the key") as caught:
        resolve_settings(None, None, {}, lambda: None)
    assert "SONDE_HUB_URL" in str(caught.value)
    assert "sonde hub key create" in str(caught.value)


def test_an_enrolled_agent_without_an_api_key_is_not_an_mcp_client() -> None:
    with pytest.raises(NotConfigured) as caught:
        resolve_settings(None, None, {}, lambda: enrolled())
    message = str(caught.value)
    assert "no API key for hub http://hub.example:3000" in message
    assert "enrollment identity is not an MCP key" in message
    assert "`sonde login --hub http://hub.example:3000` (it asks for the key" in message


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("http://h:3000", "http://h:3000"),
        ("https://h:3000/", "https://h:3000"),
        ("http://h:3000/mcp", "http://h:3000"),
        ("http://h/prefix/mcp/", "http://h/prefix"),
        (" http://h:1 ", "http://h:1"),
    ],
)
def test_hub_urls_are_normalized(raw: str, normal: str) -> None:
    assert normalize_hub_url(raw) == normal


@pytest.mark.parametrize("bad", ["h:3000", "ftp://h", "http://", "http://h/?q=1"])
def test_bad_hub_urls_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="hub URL"):
        normalize_hub_url(bad)


def test_login_stores_url_and_key_keeping_what_enrollment_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sonde" / "config.json"
    path.parent.mkdir(mode=0o700)
    path.write_text(json.dumps({"allowedPaths": ["/srv/log"], "name": "alpha"}))
    assert login("http://hub.example:3000/", " sonde_abc ", check=False, path=path) == 0
    stored = json.loads(path.read_text())
    assert stored == {
        "allowedPaths": ["/srv/log"],
        "name": "alpha",
        "hubUrl": "http://hub.example:3000",
        "apiKey": "sonde_abc",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    err = capsys.readouterr()
    assert err.out == ""
    assert "not checking the key" in err.err
    assert f"saved the hub URL and API key in {path}" in err.err


def test_login_keeps_an_enrolled_identity_for_the_same_hub(tmp_path: Path) -> None:
    from sonde.agent.config import save_config

    path = tmp_path / "config.json"
    identity = save_config(enrolled(), path)
    assert login("http://hub.example:3000", "sonde_abc", check=False, path=path) == 0
    after = load_config(path)
    assert after is not None
    assert after.api_key == "sonde_abc"
    assert after.private_key == identity.private_key
    assert after.enrolled


def test_login_refuses_to_repoint_an_agent_enrolled_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sonde.agent.config import save_config

    path = tmp_path / "config.json"
    save_config(enrolled("http://hub-a.example:3000"), path)
    before = path.read_text()
    assert login("http://hub-b.example:3000", "sonde_abc", check=False, path=path) == 1
    assert path.read_text() == before
    said = capsys.readouterr().err
    assert "enrolled with http://hub-a.example:3000" in said
    assert "give --hub http://hub-a.example:3000" in said  # for that hub under another spelling


@pytest.mark.parametrize(
    "spelled", ["https://LOCALHOST:39443/", "https://localhost", "HTTPS://localhost:443"]
)
def test_login_takes_the_enrolled_hub_spelled_otherwise(tmp_path: Path, spelled: str) -> None:
    """It refused https://LOCALHOST:39443/ for an agent enrolled with https://localhost:39443."""
    from sonde.agent.config import save_config

    path = tmp_path / "config.json"
    enrolled_with = "https://localhost:39443" if "39443" in spelled else "https://localhost"
    save_config(enrolled(enrolled_with), path)
    assert login(spelled, "sonde_abc", check=False, path=path) == 0
    assert login("https://127.0.0.1:39443", "sonde_abc", check=False, path=path) == 1  # another name


@pytest.mark.parametrize(
    ("hub", "key"), [("hub.example:3000", "sonde_x"), ("http://h:1", "  "), ("http://h:1", "a b")]
)
def test_login_validates_before_writing(tmp_path: Path, hub: str, key: str) -> None:
    path = tmp_path / "config.json"
    assert login(hub, key, check=False, path=path) == 2  # a usage error
    assert not path.exists()


async def test_login_checks_the_key_with_the_hub(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    async with fake_hub() as (hub, url):
        assert await trio.to_thread.run_sync(lambda: login(url, GOOD_KEY, path=path)) == 0
        assert "the hub accepted the key (1 agent visible to it)" in capsys.readouterr().err
        [check] = hub.seen("GET")
        assert check.headers["authorization"] == f"Bearer {GOOD_KEY}"
        path.unlink()
        assert await trio.to_thread.run_sync(lambda: login(url, "sonde_wrong", path=path)) == 1
        assert "refused this API key (HTTP 401); nothing saved" in capsys.readouterr().err
        assert not path.exists()


def test_login_saves_anyway_when_the_hub_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    path = tmp_path / "config.json"
    assert login(f"http://127.0.0.1:{port}", "sonde_abc", path=path) == 0
    assert "could not reach" in capsys.readouterr().err
    assert json.loads(path.read_text())["apiKey"] == "sonde_abc"


async def test_login_saves_nothing_where_something_speaking_no_http_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL's port, say: it was 'could not reach ...; saving it anyway', the key sent there."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()

    async def hang_up_on_everyone() -> None:
        while True:
            peer, _ = await listener.accept()
            await peer.recv(1024)
            peer.close()

    path = tmp_path / "config.json"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hang_up_on_everyone)
        port = listener.getsockname()[1]
        assert (
            await trio.to_thread.run_sync(lambda: login(f"http://127.0.0.1:{port}", "sonde_abc", path=path))
            == 1
        )
        nursery.cancel_scope.cancel()
    listener.close()
    said = capsys.readouterr().err
    assert f"something at http://127.0.0.1:{port} took the connection but gave no HTTP answer" in said
    assert "is it the hub's URL? nothing saved" in said
    assert not path.exists()


async def test_login_saves_nothing_where_something_takes_the_connection_and_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port that accepts and never answers: it was 'no connection within the time allowed (the
    host down ...); saving it anyway', though it took the connection and the key."""
    monkeypatch.setattr(login_module, "CHECK_TIMEOUT_S", 0.5)
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    held = []

    async def say_nothing() -> None:
        while True:
            peer, _ = await listener.accept()
            held.append(peer)

    path = tmp_path / "config.json"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(say_nothing)
        port = listener.getsockname()[1]
        done = await trio.to_thread.run_sync(
            lambda: login(f"http://127.0.0.1:{port}", "sonde_abc", path=path)
        )
        nursery.cancel_scope.cancel()
    for peer in held:
        peer.close()
    listener.close()
    said = capsys.readouterr().err
    assert done == 1, said
    assert f"something at http://127.0.0.1:{port} took the connection but gave no answer within 0.5 s" in said
    assert "saving it anyway" not in said
    assert not path.exists()


def test_the_settings_say_where_the_key_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SONDE_HOME", str(tmp_path))
    from_file = resolve_settings(None, None, {}, lambda: FROM_CONFIG)
    assert (from_file.key_origin, from_file.key_file) == (
        str(tmp_path / "config.json"),
        tmp_path / "config.json",
    )
    from_env = resolve_settings(None, None, {"SONDE_API_KEY": "sonde_env"}, lambda: FROM_CONFIG)
    assert (from_env.key_origin, from_env.key_file) == ("SONDE_API_KEY", None)
    from_flag = resolve_settings("http://h:1", "sonde_flag", ENV)
    assert (from_flag.key_origin, from_flag.key_file) == ("--api-key", None)
