"""`sonde enroll`: trade a one-time token for an agent identity, once.

The agent makes an Ed25519 key pair here and sends only the public key to
``POST {hub}/api/v1/agents/enroll``. The hub answers with the agent's id and
its own public key, which the agent pins. Nothing is written to the config
unless the hub said yes; a machine already enrolled keeps its old identity
until then. This is a one-shot CLI action, so it is plain blocking code.
"""

from __future__ import annotations

import http.client
import logging
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

from pydantic import ValidationError

import sonde
from sonde.agent.config import (
    AgentConfig,
    ConfigError,
    check_hub_url,
    load_config,
    save_config,
)
from sonde.agent.config import config_path as config_path_default
from sonde.agent.identity import active_packs, attestation, default_agent_name, machine_facts
from sonde.connect_failures import describe_tls_failure
from sonde.packs.registry import PackRegistry, load_packs
from sonde.protocol.codec import describe_validation_error
from sonde.protocol.enrollment import TOKEN_PATTERN, EnrollRequest, EnrollResponse, ErrorResponse
from sonde.protocol.names import NAME_PATTERN
from sonde.protocol.signing import new_private_key, private_key_to_text, public_key_to_text

log = logging.getLogger(__name__)

ENROLL_PATH = "/api/v1/agents/enroll"
ENROLL_TIMEOUT_S = 15.0
MAX_ANSWER_BYTES = 256 * 1024
ANSWER_SNIPPET_CHARS = 200


class EnrollError(Exception):
    """Enrollment failed; ``code`` is the hub's error code or one of ours, ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def enroll(
    hub_url: str,
    token: str,
    name: str | None = None,
    *,
    config_path: Path | None = None,
    timeout_s: float = ENROLL_TIMEOUT_S,
    registry: PackRegistry | None = None,
    replace: bool = True,
) -> AgentConfig:
    """Enroll this machine with the hub at ``hub_url`` and save the identity; returns the config.

    ``name`` defaults to the hostname; ``registry`` to the installed packs.
    Raises `EnrollError` (with the hub's code and message when the hub said
    no) and writes nothing in that case; without ``replace``, also when this
    machine is enrolled already (before the token is spent). Blocks for at
    most about ``timeout_s`` per network operation.
    """
    hub_url = normalize_hub_url(hub_url)
    token = token.strip()  # pasted with the newline `sonde hub token create` printed after it
    existing = read_existing(config_path)
    if existing is not None and existing.enrolled and not replace:
        raise EnrollError(
            "already_enrolled",
            f"this machine is already enrolled as {existing.name} (agent id {existing.agent_id}) with "
            f"{existing.hub_url}; enrolling again makes a new identity, and {existing.name} stays on that "
            "hub until an admin removes it. Pass --replace to enroll anyway (the token was not used)",
        )
    name = name or default_agent_name()
    check_can_save(config_path or config_path_default())
    registry = active_packs(registry or load_packs(), existing.enabled_packs if existing else None)
    key = new_private_key()
    request = build_request(token, name, public_key_to_text(key.public_key()), registry)
    if existing is not None and existing.agent_id is not None:
        log.info("re-enrolling: agent %s will be replaced once the hub accepts", existing.agent_id)
    answer = post_enroll(hub_url, request, timeout_s)
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
    try:
        saved = save_config(identity, config_path)
    except OSError as exc:  # the check above passed, then the disk failed: say what was lost
        raise EnrollError(
            "cannot_save",
            f"the hub enrolled {answer.name} (agent id {answer.agent_id}), but saving the identity failed: "
            f"{exc}; an admin must remove that agent (DELETE /api/v1/agents/{answer.name}) before it is "
            "enrolled again",
        ) from None
    log.info("enrolled as %s (agent %s) with hub %s", answer.name, answer.agent_id, hub_url)
    return saved


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
    """``hub_url`` without a trailing slash; `EnrollError` unless it is http(s) with a host."""
    try:
        check_hub_url(hub_url)
    except ValueError as exc:
        raise EnrollError("invalid_url", str(exc)) from None
    return hub_url.rstrip("/")


def read_existing(config_path: Path | None) -> AgentConfig | None:
    """The current config, read before the token is spent so a broken file fails first."""
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise EnrollError("bad_config", str(exc)) from None


def build_request(token: str, name: str, public_key: str, registry: PackRegistry) -> EnrollRequest:
    """The enrollment body for this machine; `EnrollError` for a malformed token or name."""
    if not re.fullmatch(TOKEN_PATTERN, token):
        raise EnrollError("invalid_token", "the enrollment token is malformed (16-128 of A-Z a-z 0-9 _ -)")
    if not re.fullmatch(NAME_PATTERN, name):
        raise EnrollError(
            "invalid_name", f"agent name {name!r} is invalid (1-63 of A-Z a-z 0-9 . _ -, starting alnum)"
        )
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


def post_enroll(hub_url: str, request: EnrollRequest, timeout_s: float) -> EnrollResponse:
    """POST ``request`` to the hub and parse its answer; raises `EnrollError`."""
    status, body = post_json(
        hub_url, hub_url + ENROLL_PATH, request.model_dump_json(by_alias=True), timeout_s
    )
    if 200 <= status < 300:
        try:
            return EnrollResponse.model_validate_json(body)
        except ValidationError:
            raise EnrollError(
                "bad_response", f"the hub at {hub_url} answered with no enrollment: {snippet(body)}"
            ) from None
    raise hub_refusal(hub_url, status, body)


def post_json(hub_url: str, url: str, body: str, timeout_s: float) -> tuple[int, bytes]:
    """POST a JSON body; returns (status, body) for any HTTP answer, `EnrollError` when unreachable."""
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
            return answer.status, answer.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:  # an HTTP error answer is still an answer: the hub's error body
            return exc.code, exc.read(MAX_ANSWER_BYTES)
    except urllib.error.URLError as exc:
        tls = describe_tls_failure(exc)
        if tls is not None:
            raise EnrollError("tls", f"cannot enroll with the hub at {hub_url}: {tls}") from None
        raise EnrollError("unreachable", f"cannot reach the hub at {hub_url}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, http.client.RemoteDisconnected) and hub_url.startswith("http://"):
            reason += "; if the hub serves HTTPS (--tls-cert), use an https:// URL"
        raise EnrollError("unreachable", f"cannot reach the hub at {hub_url}: {reason}") from None


def hub_refusal(hub_url: str, status: int, body: bytes) -> EnrollError:
    """The `EnrollError` for an HTTP error answer: the hub's own code and message when it sent them."""
    try:
        error = ErrorResponse.model_validate_json(body).error
    except ValidationError:
        return EnrollError(f"http_{status}", f"the hub at {hub_url} answered HTTP {status}: {snippet(body)}")
    return EnrollError(error.code, error.message)


def snippet(body: bytes) -> str:
    """The start of an unexpected answer, printable, for an error message."""
    text = body[:ANSWER_SNIPPET_CHARS].decode(errors="replace")
    return " ".join(text.split()) or "(empty body)"
