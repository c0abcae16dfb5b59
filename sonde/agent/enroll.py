"""`sonde enroll`: trade a one-time token for an agent identity, once.

The agent makes an Ed25519 key pair here and sends only the public key to
``POST {hub}/api/v1/agents/enroll``. The hub answers with the agent's id and
its own public key, which the agent pins. Nothing is written to the config
unless the hub said yes; a machine already enrolled keeps its old identity
until then. This is a one-shot CLI action, so it is plain blocking code.
Ctrl-C while the request is out is said (`interrupted_advice`): the hub may have
used the token, and what to do then; so is a hub that took the request and sent no
answer in time (`NO_ANSWER`), which was reached, whatever it did with the token.
"""

from __future__ import annotations

import http.client
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from email.utils import parsedate_to_datetime
from pathlib import Path

from pydantic import ValidationError

import sonde
from sonde.agent.config import AgentConfig, ConfigError, load_config, save_config
from sonde.agent.config import config_path as config_path_default
from sonde.agent.identity import active_packs, attestation, default_agent_name, machine_facts
from sonde.connect_failures import describe_tls_failure
from sonde.echo import clipped
from sonde.hub_url import normalize_hub_url as base_hub_url
from sonde.hub_url import same_hub
from sonde.name_rules import invalid_agent_name, secret_shaped
from sonde.not_a_hub import (
    GATEWAY_STATUSES,
    described_answer,
    from_a_gateway,
    not_a_hub_url,
    not_the_hubs_answer,
)
from sonde.packs.registry import PackRegistry, load_packs
from sonde.protocol.codec import describe_validation_error
from sonde.protocol.enrollment import TOKEN_PATTERN, EnrollRequest, EnrollResponse, ErrorResponse
from sonde.protocol.names import NAME_PATTERN
from sonde.protocol.signing import (
    TIMESTAMP_WINDOW_S,
    new_private_key,
    private_key_to_text,
    public_key_to_text,
)

log = logging.getLogger(__name__)

ENROLL_PATH = "/api/v1/agents/enroll"
ENROLL_TIMEOUT_S = 15.0
MAX_ANSWER_BYTES = 256 * 1024


# the codes of an argument that could never enroll (`sonde enroll` exits 2 for them, a usage error)
MALFORMED_ARGUMENT_CODES = frozenset({"invalid_url", "invalid_token", "invalid_name"})
NO_ANSWER = "no_answer"  # the request reached the hub, no answer came back: the token may be used


class EnrollError(Exception):
    """Enrollment failed; ``code`` is the hub's error code or one of ours, ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def malformed_argument(self) -> bool:
        """Whether an argument as given could never enroll (a usage error), not a refusal."""
        return self.code in MALFORMED_ARGUMENT_CODES


def enroll(
    hub_url: str,
    token: str,
    name: str | None = None,
    *,
    config_path: Path | None = None,
    timeout_s: float = ENROLL_TIMEOUT_S,
    registry: PackRegistry | None = None,
    replace: bool = True,
    warn: Callable[[str], None] = log.warning,
    enrolled: Callable[[], None] = lambda: None,
) -> AgentConfig:
    """Enroll this machine with the hub at ``hub_url`` and save the identity; returns the config.

    ``name`` defaults to the hostname; ``registry`` to the installed packs.
    Raises `EnrollError` (with the hub's code and message when the hub said
    no) and writes nothing in that case; without ``replace``, also when this
    machine is enrolled already (before the token is spent). What the operator
    should know but does not stop it (the hub's clock far from this machine's)
    goes to ``warn``, and so does a Ctrl-C (KeyboardInterrupt, re-raised) while the request is out:
    the hub may have used the token (`interrupted_advice`). ``enrolled`` is called once the hub
    has enrolled this machine, before the identity is saved (`sonde enroll` stops taking Ctrl-C
    there: cut short, the save would lose an identity the hub holds). Blocks for at most about
    ``timeout_s`` per network operation.
    """
    hub_url = normalize_hub_url(hub_url)
    token = token.strip()  # pasted with the newline `sonde hub token create` printed after it
    check_arguments(token, name)  # a usage error first, before anything is read or asked
    existing = read_existing(config_path)
    if existing is not None and existing.enrolled and not replace:
        raise EnrollError(
            "already_enrolled",
            f"this machine is already enrolled as {existing.name} (agent id {existing.agent_id}) with "
            f"{existing.hub_url}; enrolling again makes a new identity (unless the hub removed "
            f"{existing.name}, the old one stays enrolled there until an admin removes it). Pass "
            f"--replace to enroll anyway, and --name {existing.name} to keep its name (the token was not used)",
        )
    name = name or default_agent_name()
    check_can_save(config_path or config_path_default())
    registry = active_packs(registry or load_packs(), existing.enabled_packs if existing else None)
    key = new_private_key()
    request = build_request(token, name, public_key_to_text(key.public_key()), registry)
    if existing is not None and existing.agent_id is not None:
        log.info("re-enrolling: agent %s will be replaced once the hub accepts", existing.agent_id)
    try:
        answer = post_enroll(hub_url, request, timeout_s, warn)
        enrolled()
    except KeyboardInterrupt:
        warn(interrupted_advice(name))
        raise
    except EnrollError as exc:
        if exc.code != NO_ANSWER:
            raise
        raise EnrollError(NO_ANSWER, f"{exc.message}: {token_may_be_used(name)}") from None
    try:
        identity = AgentConfig(
            hub_url=hub_url,
            agent_id=answer.agent_id,
            name=answer.name,
            private_key=private_key_to_text(key),
            hub_public_key=answer.hub_public_key,
        )
    except ValidationError as exc:
        raise EnrollError("bad_response", f"the hub's answer is unusable: {exc.errors()[0]['msg']}") from None
    # an MCP key `sonde login` saved for another hub: never to be sent to this one (the bridge would)
    keys_hub = existing.hub_url if existing is not None and existing.api_key is not None else None
    other_hubs_key = keys_hub is not None and not same_hub(keys_hub, hub_url)
    try:
        saved = save_config(identity, config_path, drop=("api_key",) if other_hubs_key else ())
    except OSError as exc:  # the check above passed, then the disk failed: say what was lost
        raise EnrollError(
            "cannot_save",
            f"the hub enrolled {answer.name} (agent id {answer.agent_id}), but saving the identity failed: "
            f"{exc}; an admin must remove that agent (DELETE /api/v1/agents/{answer.name}) before it is "
            "enrolled again",
        ) from None
    log.info("enrolled as %s (agent %s) with hub %s", answer.name, answer.agent_id, hub_url)
    if other_hubs_key:
        warn(
            f"the API key `sonde login` saved was for {keys_hub}, not this hub: it is removed from "
            f"{config_path or config_path_default()}. Run `sonde login --hub {hub_url}` to save this hub's"
        )
    return saved


def interrupted_advice(name: str) -> str:
    """What a Ctrl-C while the enrollment request is out leaves: the hub may have enrolled ``name``
    and spent the token (the request may have reached it), but nothing is saved here; what to do."""
    return f"interrupted while waiting for the hub's answer: {token_may_be_used(name)}"


def token_may_be_used(name: str) -> str:
    """What a request the hub may have acted on, with no answer seen here, leaves; what to do."""
    return (
        f"the hub may have enrolled this machine as {name} and used the token, but nothing was saved "
        "here. To finish, run the same `sonde enroll` "
        "again; if the hub answers that the token was already used, ask an admin for a new token for "
        f"{name} (`sonde hub token create --name {name}`), which replaces what the hub holds, and "
        "enroll with it"
    )


def check_can_save(path: Path) -> None:
    """`EnrollError` unless the identity can be written at ``path``: checked before the token
    is spent, as a hub that enrolled an agent whose identity was lost keeps its name taken."""
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the directory that save_config would create it in
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        why = "is not a directory" if not existing.is_dir() else "is not writable by this user"
        raise EnrollError(
            "cannot_save",
            f"cannot save the identity in {path}: {existing} {why} (a read-only file system, "
            "or the wrong HOME?); fix that and enroll again (the token was not used)",
        )


def normalize_hub_url(hub_url: str) -> str:
    """The hub's base URL as `sonde login` and `sonde mcp-bridge` take it (a pasted MCP URL,
    ``.../mcp``, is its base URL); `EnrollError` unless it is http(s) with a host."""
    try:
        return base_hub_url(hub_url)
    except ValueError as exc:
        raise EnrollError("invalid_url", str(exc)) from None


def read_existing(config_path: Path | None) -> AgentConfig | None:
    """The current config, read before the token is spent so a broken file fails first."""
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise EnrollError("bad_config", str(exc)) from None


def check_arguments(token: str, name: str | None) -> None:
    """`EnrollError` for a token or an agent name that could never enroll (None: the hostname's)."""
    if not re.fullmatch(TOKEN_PATTERN, token):
        raise EnrollError("invalid_token", "the enrollment token is malformed (16-128 of A-Z a-z 0-9 _ -)")
    check_name(name)


def check_name(name: str | None) -> None:
    """`EnrollError` for an agent name that could never enroll (None: the hostname's); `sonde
    enroll` asks it before it reads a token from stdin or asks for one."""
    if name is not None and not re.fullmatch(NAME_PATTERN, name):
        raise EnrollError("invalid_name", invalid_agent_name(name))
    if name is not None and (refusal := secret_shaped("agent name", name)) is not None:
        raise EnrollError("invalid_name", refusal)


def build_request(token: str, name: str, public_key: str, registry: PackRegistry) -> EnrollRequest:
    """The enrollment body for this machine; `EnrollError` for a malformed token or name."""
    check_arguments(token, name)
    facts = machine_facts()
    try:
        return EnrollRequest(
            token=token,
            name=name,
            public_key=public_key,
            hostname=facts["hostname"],
            os=facts["os"],
            os_version=facts["os_version"],
            kernel=facts["kernel"],
            arch=facts["arch"],
            agent_version=sonde.__version__,
            packs=tuple(pack.descriptor() for pack in registry.packs.values()),
            attestation=attestation(registry, facts),
        )
    except ValidationError as exc:
        raise EnrollError("invalid_request", describe_validation_error(exc)[1]) from None


@dataclass(frozen=True)
class HubAnswer:
    """An HTTP answer from the hub: its status, the start of its body, and its headers."""

    status: int
    body: bytes
    headers: Message

    def described(self) -> str:
        """What answered, for a person (`described_answer`): never the body itself."""
        return described_answer(self.headers.get("Content-Type"), self.body, self.headers.get("Server"))


def post_enroll(
    hub_url: str, request: EnrollRequest, timeout_s: float, warn: Callable[[str], None] = log.warning
) -> EnrollResponse:
    """POST ``request`` to the hub and parse its answer; raises `EnrollError`. A hub whose clock
    is far from this machine's is told to ``warn`` (the agent would be refused at every connect)."""
    answer = post_json(hub_url, hub_url + ENROLL_PATH, request.model_dump_json(by_alias=True), timeout_s)
    skew = clock_skew_warning(answer.headers.get("Date"), time.time())
    if skew is not None:
        warn(skew)
    if 200 <= answer.status < 300:
        try:
            return EnrollResponse.model_validate_json(answer.body)
        except ValidationError:
            raise EnrollError(
                "bad_response", f"the hub at {hub_url} answered with no enrollment: {answer.described()}"
            ) from None
    raise hub_refusal(hub_url, answer)


def post_json(hub_url: str, url: str, body: str, timeout_s: float) -> HubAnswer:
    """POST a JSON body; returns any HTTP answer, `EnrollError` when the hub is unreachable."""
    request = urllib.request.Request(
        url,
        data=body.encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"sonde-agent/{sonde.__version__}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return HubAnswer(answer.status, answer.read(MAX_ANSWER_BYTES), answer.headers)
    except urllib.error.HTTPError as exc:
        with exc:  # an HTTP error answer is still an answer: the hub's error body
            return HubAnswer(exc.code, exc.read(MAX_ANSWER_BYTES), exc.headers)
    except TimeoutError:  # raised past the request: urllib wraps a connect timeout in URLError
        raise EnrollError(
            NO_ANSWER, f"the hub at {hub_url} took the request but did not answer within {timeout_s:.0f} s"
        ) from None
    except urllib.error.URLError as exc:
        tls = describe_tls_failure(exc)
        if tls is not None:
            raise EnrollError("tls", f"cannot enroll with the hub at {hub_url}: {tls}") from None
        raise EnrollError("unreachable", f"cannot reach the hub at {hub_url}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, http.client.BadStatusLine) and not isinstance(exc, http.client.RemoteDisconnected):
            raise EnrollError(  # reached: what answered speaks no HTTP (a database's port, say)
                "unreachable",
                f"something at {hub_url} took the connection but gave no HTTP answer (it sent "
                f"{clipped(repr(str(exc)), 80)}): is it the hub's URL?",
            ) from None
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, http.client.RemoteDisconnected) and hub_url.startswith("http://"):
            reason += "; if the hub serves HTTPS (--tls-cert), use an https:// URL"
        raise EnrollError("unreachable", f"cannot reach the hub at {hub_url}: {reason}") from None


def clock_skew_warning(date_header: str | None, now: float) -> str | None:
    """A warning when the hub's ``Date`` header is further from ``now`` (this machine's clock)
    than the hub lets an agent's clock be (`TIMESTAMP_WINDOW_S`); None when it is near, absent
    or unreadable."""
    try:
        hub_now = parsedate_to_datetime(date_header).timestamp() if date_header else None
    except (TypeError, ValueError, OverflowError):
        return None
    if hub_now is None or abs(now - hub_now) <= TIMESTAMP_WINDOW_S:
        return None
    side = "behind" if now < hub_now else "ahead of"
    return (
        f"this machine's clock is {gap_text(abs(now - hub_now))} {side} the hub's (by the Date of its "
        f"answer): the hub refuses an agent whose clock is more than ±{TIMESTAMP_WINDOW_S:.0f} s off "
        "its own, so this agent would be refused at every connect. Check NTP on both machines "
        "(`timedatectl status`: 'System clock synchronized: yes')"
    )


def gap_text(seconds: float) -> str:
    """A clock gap as people say it: '5 min 3 s', '2 h 10 min', '40 days 3 h'."""
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} day{'s' if days != 1 else ''} {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def hub_refusal(hub_url: str, answer: HubAnswer) -> EnrollError:
    """The `EnrollError` for an HTTP error answer: the hub's own code and message when it sent them,
    else what answered (`described_answer`, as `sonde login` says it; never the body itself).

    A 404 is never the hub's enrollment endpoint speaking (it answers no 404 of its own): the URL
    leads to some other path or server, whatever the body says; nor is an error that is not the
    hub's JSON, but for a proxy's own gateway failure (the hub behind it down or slow)."""
    status, request = answer.status, f"POST {hub_url}{ENROLL_PATH}"
    if status == 404:
        return EnrollError("http_404", not_a_hub_url(hub_url, request))
    try:
        error = ErrorResponse.model_validate_json(answer.body).error
    except ValidationError:
        if status in GATEWAY_STATUSES:
            said = f"{request} answered {status} with {from_a_gateway(answer.described())}"
            return EnrollError(f"http_{status}", f"the hub at {hub_url} did not enroll this machine: {said}")
        expected = "the hub's answer (JSON)"
        return EnrollError(
            f"http_{status}", not_the_hubs_answer(hub_url, request, status, answer.described(), expected)
        )
    return EnrollError(error.code, error.message)
