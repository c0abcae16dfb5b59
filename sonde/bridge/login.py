"""`sonde login`: remember a hub URL and an API key for `sonde mcp-bridge`.

They go into ``~/.sonde/config.json`` through `save_config`, which keeps every
other key (an enrolled agent's identity stays as it was) and the mode 0600.
Before saving, the key is tried once with ``GET /api/v1/agents``: a key the
hub refuses is not saved, nor is a URL under which no hub answers: a 404, as
`sonde enroll` says it, or a 200 that is not the hub's list of agents (JSON), said with
what answered instead (another web server's page). Nor is a key the hub did not get to judge:
a 429 (too many failed tries from this address: the hub's words say when to try again) or a
5xx (`--no-check` saves without checking). A hub that cannot be reached only earns a warning.
Exit codes: 0 saved, 1 refused or not saved, 2 a malformed URL or key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2

from sonde.agent.config import AgentConfig, ConfigError, config_path, load_config, save_config
from sonde.bridge.settings import check_api_key
from sonde.connect_failures import describe_failure, describe_tls_failure
from sonde.hub_url import normalize_hub_url, same_hub
from sonde.not_a_hub import (
    GATEWAY_STATUSES,
    described_answer,
    from_a_gateway,
    hubs_error_message,
    not_a_hub_url,
    not_the_hubs_answer,
    redirected,
)

CHECK_TIMEOUT_S = 10.0
AGENTS_PATH = "/api/v1/agents"


def say(message: str) -> None:
    print(f"sonde login: {message}", file=sys.stderr)


class KeyRefused(Exception):
    """The hub answered 401 or 403 for the key."""


class NotChecked(Exception):
    """The hub answered, but neither accepted nor refused the key: a 429, a 5xx, another error;
    ``then`` says what to do, after "nothing saved"."""

    def __init__(self, message: str, then: str = "") -> None:
        super().__init__(message)
        self.then = then


class NotAHub(Exception):
    """No hub answers under the URL: ``GET /api/v1/agents`` there is a 404, or a 200 that is not
    the hub's answer."""


def check_key(hub_url: str, api_key: str) -> str:
    """Try the key with ``GET /api/v1/agents``; return a line saying what the hub answered.

    Raises `KeyRefused` for 401/403, `NotChecked` for another error answer (`unchecked`),
    `NotAHub` for a 404 (the hub answers that route, so the URL
    leads elsewhere), a redirect (the hub makes none; not followed, the key would go along) or a
    200 that is not the hub's list of agents (another web server answered),
    and `httpx2.HTTPError` when the hub cannot be reached.
    """
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx2.Client(timeout=CHECK_TIMEOUT_S) as client:
        response = client.get(f"{hub_url}{AGENTS_PATH}", headers=headers)
    if response.status_code in (401, 403):
        raise KeyRefused(f"the hub at {hub_url} refused this API key (HTTP {response.status_code})")
    if response.status_code == 404:
        raise NotAHub(not_a_hub_url(hub_url, f"GET {hub_url}{AGENTS_PATH}"))
    if response.is_redirect:  # not followed: the key would go wherever it points
        location = response.headers.get("location", "")
        request = f"GET {hub_url}{AGENTS_PATH}"
        raise NotAHub(redirected(hub_url, request, response.status_code, location, AGENTS_PATH))
    if response.status_code != 200:
        raise unchecked(hub_url, response)
    agents = hubs_agents(response)
    if agents is None:
        answered = described_answer(
            response.headers.get("content-type"), response.content, response.headers.get("server")
        )
        request = f"GET {hub_url}{AGENTS_PATH}"
        raise NotAHub(not_the_hubs_answer(hub_url, request, 200, answered, "the hub's list of agents (JSON)"))
    count = len(agents)
    return f"the hub accepted the key ({count} agent{'s' if count != 1 else ''} visible to it)"


def unchecked(hub_url: str, response: httpx2.Response) -> NotChecked | NotAHub:
    """Why an error answer other than 401/403/404 checked nothing: a 429 in the hub's own words
    (when to try again), a 5xx with what answered and `--no-check`; an error page that is not the
    hub's, but for a proxy's gateway failure (the hub behind it down), is another server's
    (`NotAHub`)."""
    status, request = response.status_code, f"GET {hub_url}{AGENTS_PATH}"
    message = hubs_error_message(response.content)
    answered = described_answer(
        response.headers.get("content-type"), response.content, response.headers.get("server")
    )
    if status == 429:
        retry = response.headers.get("retry-after")
        later = message or f"too many requests; try again {f'in {retry} s' if retry else 'later'}"
        return NotChecked(f"the hub at {hub_url} did not check the key: {later}")
    if message is None and status not in GATEWAY_STATUSES:
        return NotAHub(
            not_the_hubs_answer(hub_url, request, status, answered, "the hub's list of agents (JSON)")
        )
    if status >= 500:
        what = f"the hub's error {message!r}" if message else from_a_gateway(answered)
        return NotChecked(
            f"could not check the key: {request} answered {status} with {what}",
            "Try again, or `sonde login --no-check` saves the URL and key without checking them",
        )
    return NotChecked(f"the hub at {hub_url} did not check the key: it answered {status}: {message}")


def hubs_agents(response: httpx2.Response) -> list[object] | None:
    """The agents of the hub's answer to ``GET /api/v1/agents`` (JSON: ``{"agents": [...]}``);
    None when ``response`` is not that answer."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return None
    try:
        agents = response.json()["agents"]
    except (ValueError, KeyError, TypeError):
        return None
    return agents if isinstance(agents, list) else None


def enrolled_elsewhere(path: Path, hub_url: str) -> str | None:
    """A reason to refuse when this config's agent is enrolled with another hub."""
    existing = load_config(path)
    if (
        existing is None
        or not existing.enrolled
        or existing.hub_url is None
        or same_hub(existing.hub_url, hub_url)
    ):
        return None
    return (
        f"this machine's agent is enrolled with {existing.hub_url}, and `sonde login` would point it "
        f"at {hub_url}. For that hub under the name the agent uses, give --hub {existing.hub_url}; for "
        "another hub, set SONDE_HUB_URL and SONDE_API_KEY in the MCP client's env config for "
        "`sonde mcp-bridge`, or use a separate SONDE_HOME."
    )


def login(hub: str, api_key: str, *, check: bool = True, path: Path | None = None) -> int:
    """Check and store the hub URL and key; return the exit code (diagnostics on stderr)."""
    path = path or config_path()
    try:
        hub_url, key = normalize_hub_url(hub), check_api_key(api_key)
    except ValueError as exc:  # a URL or key that could never work: a usage error
        say(str(exc))
        return 2
    try:
        refusal = enrolled_elsewhere(path, hub_url)
    except ConfigError as exc:
        say(str(exc))
        return 1
    if refusal:
        say(refusal)
        return 1
    if check:
        try:
            say(check_key(hub_url, key))
        except KeyRefused as exc:
            say(f"{exc}; nothing saved. Check the key, or create one with `sonde hub key create`.")
            return 1
        except NotChecked as exc:
            say(f"{exc}; nothing saved" + (f". {exc.then}" if exc.then else ""))
            return 1
        except NotAHub as exc:
            say(f"{exc}; nothing saved")
            return 1
        except httpx2.HTTPError as exc:
            tls = describe_tls_failure(exc)
            if tls is not None:  # not an outage: this machine would never get through
                say(f"cannot check the key at {hub_url}: {tls}; nothing saved (or pass --no-check)")
                return 1
            if isinstance(exc, httpx2.RemoteProtocolError):  # reached, and it speaks no HTTP: not a hub
                say(
                    f"something at {hub_url} took the connection but gave no HTTP answer "
                    f"({describe_failure(exc)}): is it the hub's URL? nothing saved (or pass --no-check)"
                )
                return 1
            if isinstance(exc, httpx2.ReadTimeout | httpx2.WriteTimeout):  # connected: it was reached
                say(
                    f"something at {hub_url} took the connection but gave no answer within "
                    f"{CHECK_TIMEOUT_S:g} s (a hub answers at once): is it the hub's URL, and is the hub "
                    "well? nothing saved (or pass --no-check)"
                )
                return 1
            say(f"could not reach {hub_url} to check the key ({describe_failure(exc)}); saving it anyway")
    else:
        say("not checking the key against the hub (--no-check)")
    try:
        save_config(AgentConfig(hub_url=hub_url, api_key=key), path)
    except ConfigError as exc:
        say(str(exc))
        return 1
    say(f"saved the hub URL and API key in {path}")
    say("connect an MCP client through it, e.g. `claude mcp add sonde -- sonde mcp-bridge`")
    return 0
