"""Where the bridge finds its hub and API key: flags, then environment, then the config file.

`sonde login` writes ``hubUrl`` and ``apiKey`` into ``~/.sonde/config.json``;
``--hub`` / ``--api-key`` and ``SONDE_HUB_URL`` / ``SONDE_API_KEY`` override
them one by one. Only ``apiKey`` authenticates: an agent's enrollment
identity (its Ed25519 key) is never used as an MCP credential.

A secret given as a flag sits in the process's argv, which every local user
reads (``ps``, ``/proc/PID/cmdline``) while it runs: `read_secret` takes one
from the environment or stdin instead (`sonde login`, `sonde enroll`), and
`argv_secret_warning` says so when a flag was used anyway (kept, for scripts).
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from sonde.hub_url import normalize_hub_url

if TYPE_CHECKING:
    from sonde.agent.config import AgentConfig

HUB_ENV = "SONDE_HUB_URL"
KEY_ENV = "SONDE_API_KEY"
KEY_HOWTO = "an admin makes a key on the hub with `sonde hub key create --name NAME`"
SECRET_LINE_MAX_CHARS = 4096  # one line of stdin holds a token or a key: no more is read


class NoSecretGiven(ValueError):
    """No flag, environment variable or stdin gave the secret; the message says how to."""


class NotConfigured(Exception):
    """The bridge lacks a hub URL or an API key; the message says what to run."""


@dataclass(frozen=True)
class BridgeSettings:
    hub_url: str
    api_key: str

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
    hub = hub or environ.get(HUB_ENV) or None
    api_key = api_key or environ.get(KEY_ENV) or None
    if hub is not None and api_key is not None:
        return BridgeSettings(normalize_hub_url(hub), check_api_key(api_key))
    from sonde.agent.config import ConfigError, config_path, load_config

    try:
        config = (read_config or load_config)()
    except ConfigError as exc:
        raise NotConfigured(str(exc)) from None
    hub = hub or (config.hub_url if config else None)
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
    return BridgeSettings(normalize_hub_url(hub), check_api_key(api_key))


def read_secret(
    what: str,
    env_var: str,
    environ: Mapping[str, str],
    stdin: TextIO | None,
    ask: Callable[[str], str] = getpass.getpass,
) -> str:
    """The secret ``what`` (an API key, an enrollment token) when no flag gave it, stripped:
    ``env_var`` when set and not empty, else asked for with a hidden prompt when ``stdin`` is a
    terminal, else the first line of ``stdin`` (blocks until it comes, or EOF). Raises
    `NoSecretGiven`, saying how to give it, when none was given."""
    given = environ.get(env_var, "").strip()
    if given:
        return given
    if stdin is None:  # no fd 0 at all
        text = ""
    elif stdin.isatty():
        try:
            text = ask(f"{what} (input hidden): ")
        except EOFError:  # Ctrl-D at the prompt
            text = ""
    else:
        text = stdin.readline(SECRET_LINE_MAX_CHARS)
    if not text.strip():
        raise NoSecretGiven(
            f"no {what} given: give it on stdin (asked for on a terminal, or "
            f'`echo "$SECRET" | sonde ...`) or in {env_var}'
        )
    return text.strip()


def given_secret(flag: str, value: str | None, what: str, env_var: str, warn: Callable[[str], None]) -> str:
    """The secret ``value`` given as ``flag`` (``warn`` is told every local user could read it
    there), else `read_secret`'s from this process's environment and stdin; `NoSecretGiven`
    when none was given."""
    if value is None:
        return read_secret(what, env_var, os.environ, sys.stdin)
    warn(argv_secret_warning(flag, what, env_var))
    return value


def argv_secret_warning(flag: str, what: str, env_var: str) -> str:
    """The warning for a secret given as ``flag`` on the command line, which every local user
    could read while the command ran, and how to give it instead."""
    return (
        f"{flag} put the {what} on the command line, where every local user could read it "
        f"(ps, /proc/PID/cmdline) while this command ran; leave {flag} out and give it in {env_var} "
        f'or on stdin instead (asked for on a terminal, or `echo "$SECRET" | sonde ...`)'
    )
