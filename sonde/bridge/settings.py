"""Where the bridge finds its hub and API key: flags, then environment, then the config file.

`sonde login` writes ``hubUrl`` and ``apiKey`` into ``~/.sonde/config.json``;
``--hub`` / ``--api-key`` and ``SONDE_HUB_URL`` / ``SONDE_API_KEY`` override
them one by one. Only ``apiKey`` authenticates: an agent's enrollment
identity (its Ed25519 key) is never used as an MCP credential.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sonde.hub_url import normalize_hub_url, same_hub

if TYPE_CHECKING:
    from sonde.agent.config import AgentConfig

HUB_ENV = "SONDE_HUB_URL"
KEY_ENV = "SONDE_API_KEY"
KEY_HOWTO = "an admin makes a key on the hub with `sonde hub key create --name NAME`"


class NotConfigured(Exception):
    """The bridge lacks a hub URL or an API key; the message says what to run."""


@dataclass(frozen=True)
class BridgeSettings:
    hub_url: str
    api_key: str
    key_origin: str = "--api-key"  # or SONDE_API_KEY, or the config file's path (then key_file)
    key_file: Path | None = None  # the config file the key came from: read again when the hub refuses it

    @property
    def mcp_url(self) -> str:
        return f"{self.hub_url}/mcp"


def check_api_key(key: str) -> str:
    """The key, stripped; raises `ValueError` if it is empty or holds whitespace."""
    key = key.strip()
    if not key:
        raise ValueError("the API key is empty")
    if any(ch.isspace() for ch in key):
        raise ValueError("an API key has no spaces in it")
    return key


def check_key_is_for(hub: str, config: AgentConfig) -> None:
    """`NotConfigured` when the config's API key was saved for another hub than ``hub`` (a
    --hub or SONDE_HUB_URL naming another): a key is never sent to a hub it is not for."""
    from sonde.agent.config import config_path

    if config.hub_url is not None and not same_hub(config.hub_url, hub):
        raise NotConfigured(
            f"the API key in {config_path()} is for hub {config.hub_url}, not {hub}: it is not sent "
            f"to another hub. Run `sonde login --hub {hub}` (it asks for that hub's key; {KEY_HOWTO}), "
            f"or set {KEY_ENV} in the MCP client's env."
        )


def resolve_settings(
    hub: str | None,
    api_key: str | None,
    environ: Mapping[str, str],
    read_config: Callable[[], AgentConfig | None] | None = None,
) -> BridgeSettings:
    """Pick the hub URL and key (flag > environment > config file).

    The config file is read only when the flags and environment leave a gap.
    Raises `NotConfigured` with instructions (or naming an unreadable config
    file) and `ValueError` for a bad URL or key.
    """
    origin = "--api-key" if api_key else KEY_ENV
    hub = hub or environ.get(HUB_ENV) or None
    api_key = api_key or environ.get(KEY_ENV) or None
    if hub is not None and api_key is not None:
        return BridgeSettings(normalize_hub_url(hub), check_api_key(api_key), origin)
    from sonde.agent.config import ConfigError, config_path, load_config

    try:
        config = (read_config or load_config)()
    except ConfigError as exc:
        raise NotConfigured(str(exc)) from None
    if hub is not None and api_key is None and config is not None and config.api_key is not None:
        check_key_is_for(normalize_hub_url(hub), config)
    hub = hub or (config.hub_url if config else None)
    key_file = config_path() if api_key is None and config and config.api_key else None
    api_key = api_key or (config.api_key if config else None)
    if hub is None:
        raise NotConfigured(
            f"no hub URL and API key in {config_path()}. Run `sonde login --hub URL` once (it asks "
            f"for the key; {KEY_HOWTO}), or set {HUB_ENV} and {KEY_ENV} in the MCP client's env."
        )
    if api_key is None:
        enrolled = (
            " This machine's agent is enrolled with it, but an agent's enrollment identity is not an MCP key."
            if config is not None and config.enrolled
            else ""
        )
        raise NotConfigured(
            f"no API key for hub {hub}.{enrolled} Run `sonde login --hub {hub}` (it asks for the "
            f"key; {KEY_HOWTO}), or set {KEY_ENV} in the MCP client's env."
        )
    origin = str(key_file) if key_file is not None else origin
    return BridgeSettings(normalize_hub_url(hub), check_api_key(api_key), origin, key_file)
