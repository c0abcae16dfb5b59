"""The agent config file: round trip, merging, modes, errors that name the file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sonde.agent.config import AgentConfig, ConfigError, config_path, load_config, save_config
from sonde.protocol.signing import new_private_key, private_key_to_text, public_key_to_text
from tests.conftest import require


def identity() -> AgentConfig:
    return AgentConfig(
        hub_url="https://hub.example.com/",
        agent_id="agent-1",
        name="web-1",
        private_key=private_key_to_text(new_private_key()),
        hub_public_key=public_key_to_text(new_private_key().public_key()),
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_config_path_follows_sonde_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SONDE_HOME", str(tmp_path))
    assert config_path() == tmp_path / "config.json"
    monkeypatch.delenv("SONDE_HOME")
    assert config_path() == Path.home() / ".sonde" / "config.json"


def test_round_trip_with_camel_case_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    saved = save_config(identity(), path)
    loaded = load_config(path)
    assert loaded == saved
    assert loaded is not None
    assert loaded.hub_url == "https://hub.example.com"  # trailing slash dropped
    assert loaded.enrolled
    data = json.loads(path.read_text())
    assert set(data) == {"hubUrl", "agentId", "name", "privateKey", "hubPublicKey"}


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert load_config(tmp_path / "nope.json") is None


def test_login_only_config_is_valid_but_not_enrolled(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hubUrl": "http://127.0.0.1:3000", "apiKey": "sk_123"}))
    config = load_config(path)
    assert config is not None
    assert not config.enrolled
    assert config.missing_identity() == ["agentId", "name", "privateKey", "hubPublicKey"]
    assert config.allowed_paths == ["/var/log"]
    assert config.enabled_packs is None


def test_save_merges_and_keeps_keys_written_by_others(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hubUrl": "http://old:3000", "apiKey": "sk_other", "allowedPaths": ["/srv"]}))
    merged = save_config(identity(), path)
    data = json.loads(path.read_text())
    assert data["apiKey"] == "sk_other"
    assert data["allowedPaths"] == ["/srv"]
    assert data["hubUrl"] == "https://hub.example.com"
    assert merged.api_key == "sk_other"
    # a config that sets only apiKey leaves the identity alone
    save_config(AgentConfig(api_key="sk_new"), path)
    again = load_config(path)
    assert again is not None
    assert again.api_key == "sk_new"
    assert again.agent_id == "agent-1"


def test_file_is_0600_and_new_directory_0700(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        path = tmp_path / "home" / ".sonde" / "config.json"
        save_config(identity(), path)
    finally:
        os.umask(old_umask)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert mode(path.parent.parent) == 0o755  # missing parents get the usual mode
    assert [p.name for p in path.parent.iterdir()] == ["config.json"]  # no temp file left


def test_rewrite_of_an_open_file_keeps_0600(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    path.chmod(0o644)
    save_config(identity(), path)
    assert mode(path) == 0o600


def test_bad_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=f"config {path}: not valid JSON"):
        load_config(path)
    with pytest.raises(ConfigError, match=str(path)):
        save_config(identity(), path)  # never overwrite a file we cannot read
    assert path.read_text() == "{not json"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ({"allowedPaths": "/var/log"}, "allowedPaths"),
        ({"surprise": 1}, "surprise"),
        ({"hubUrl": "ftp://hub"}, "hubUrl"),
        ({"privateKey": "short"}, "privateKey"),
        ({"hubPublicKey": "AAAA"}, "hubPublicKey"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_fields_name_the_file_and_field(tmp_path: Path, content: object, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert words in str(caught.value)


def test_probe_settings_come_from_the_config() -> None:
    config = AgentConfig(allowed_paths=["/srv/logs"], packs={"docker": {"socket": "/run/docker.sock"}})
    settings = config.probe_settings()
    assert settings.allowed_paths == ("/srv/logs",)
    assert settings.for_pack("docker") == {"socket": "/run/docker.sock"}


# --- who may change the config -------------------------------------------------


def saved(tmp_path: Path) -> tuple[Path, AgentConfig]:
    path = tmp_path / ".sonde" / "config.json"
    return path, save_config(identity(), path)


@pytest.mark.parametrize("file_mode", [0o620, 0o602, 0o666])
def test_a_config_others_may_write_is_refused(tmp_path: Path, file_mode: int) -> None:
    path, config = saved(tmp_path)
    path.chmod(file_mode)
    with pytest.raises(ConfigError, match=rf"config {path} has mode {file_mode:o}: others can change it"):
        load_config(path)
    path.chmod(0o600)
    assert load_config(path) == config


def test_a_config_in_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    path, config = saved(tmp_path)
    path.parent.chmod(0o777)
    with pytest.raises(
        ConfigError, match=rf"directory {path.parent} has mode 777.*`chmod go-w {path.parent}`"
    ):
        load_config(path)
    path.parent.chmod(0o1777)  # sticky, like /tmp: others may not replace the file
    assert load_config(path) == config


def test_a_config_others_may_read_is_loaded_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, config = saved(tmp_path)
    path.chmod(0o644)
    assert load_config(path) == config
    assert f"config {path} has mode 644; it holds a private key, run `chmod 600 {path}`" in caplog.text


@pytest.mark.parametrize(
    ("content", "held"),
    [
        ({"hubUrl": "https://hub.example.com", "apiKey": "sk-test"}, "an API key"),
        (
            {"privateKey": private_key_to_text(new_private_key()), "apiKey": "k"},
            "a private key and an API key",
        ),
    ],
)
def test_a_readable_config_warning_names_what_it_holds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: dict[str, str], held: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(content))
    path.chmod(0o644)
    load_config(path)
    assert f"config {path} has mode 644; it holds {held}, run `chmod 600 {path}`" in caplog.text


def test_a_readable_config_without_keys_loads_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"allowedPaths": ["/var/log"], "scrubPatterns": ["x"]}))
    path.chmod(0o644)
    assert load_config(path) == AgentConfig(allowed_paths=["/var/log"], scrub_patterns=["x"]).read_from(path)
    assert caplog.text == ""


def test_a_config_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "giving a file to another user needs root")
    path, config = saved(tmp_path)
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match=rf"config {path} belongs to uid 65534, not to this user \(uid 0\)"):
        load_config(path)
    os.chown(path, 0, 0)
    assert load_config(path) == config


def test_a_relative_allowed_path_is_refused_naming_it(tmp_path: Path) -> None:
    # read from the agent's working directory it would allow whatever lies there (/ under systemd)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"allowedPaths": ["/var/log", "relative/path"]}))
    path.chmod(0o600)
    with pytest.raises(
        ConfigError, match=r"allowedPaths: 'relative/path' is not an absolute path: write it from /"
    ):
        load_config(path)
