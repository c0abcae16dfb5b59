"""`/mcp`'s refusals as JSON-RPC errors, and the SDK's text ones made actionable.

Every refusal the hub makes itself on ``/mcp`` (401, 408, 413, 429, ...) is a JSON-RPC
error (`mcp_refusal`): what MCP clients read from a non-2xx answer (the Python SDK reads
nothing else, and showed the hub's REST shape only as "Server returned an error
response"). Its message says why and what to do; ``error.data.code`` is the word REST's
``error.code`` would be (``unauthorized``, ``body_too_large``, ...). The SDK's check of
the Host and Origin headers (`sonde.hub.mcp_server.transport_security`) answers with
a bare text body instead, ``Invalid Host header`` (421) or ``Invalid Origin header``
(403), and logs only the value. `SdkRefusalAnswer` stands in front of the SDK's
``send``: it swallows that answer and sends a JSON-RPC error, whose message names the
header, its value and the ``--allowed-host`` that would admit it; the hub logs the
same advice (the SDK's own line is silenced: `sonde.hub.logs`), once a minute per
header value at most, with a count, as one misconfigured proxy sends many.

The SDK refuses a POST whose Content-Type is not JSON the same way, 400 ``Invalid
Content-Type header``: that answer is replaced too, by one naming the header to send and
the one sent (`content_type_advice`). Its refusal of an Accept header (406) is a JSON-RPC
error naming the media types to accept, JSON already: it passes as it is.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import MutableMapping
from typing import Any

from sonde.echo import echoed

log = logging.getLogger("sonde.hub.asgi")

# The SDK's DNS-rebinding check: 421 "Invalid Host header", 403 "Invalid Origin header".
REBINDING_REFUSALS = {421: "host", 403: "origin"}
REBINDING_CODES = {"host": "host_not_allowed", "origin": "origin_not_allowed"}
# The SDK's check of a POST's Content-Type (in the same transport-security step): 400, in text.
CONTENT_TYPE_REFUSAL = 400
CONTENT_TYPE_CODE = "invalid_content_type"
# what --allowed-host can name: a host name or address, with a port or without
ALLOWABLE_HOST = re.compile(r"^(?:[a-z0-9._-]+|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$")
LOG_EVERY_S = 60.0
# JSON-RPC's codes: a request refused as sent (a 4xx), and the server's own trouble (a 5xx).
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603


def mcp_refusal(status: int, word: str, message: str) -> dict[str, Any]:
    """The body refusing an ``/mcp`` request with ``status``: a JSON-RPC error (no id: the hub
    answers before reading one) whose ``data.code`` is the hub's ``word`` for it."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": INVALID_REQUEST if status < 500 else INTERNAL_ERROR,
            "message": message,
            "data": {"code": word},
        },
    }


async def send_refusal(
    send: Any, status: int, word: str, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Refuse an ``/mcp`` request: ``status``, `mcp_refusal`'s body and ``headers``."""
    await send_json(send, status, mcp_refusal(status, word, message), headers or [])


# A JSON-RPC batch: the SDK answered one with pydantic's four validation errors (-32602).
BATCH_STATUS = 400
BATCH_WORD = "batch_not_supported"
BATCH_MESSAGE = "JSON-RPC batches are not supported (MCP removed them in 2025-06-18): send each message in a POST of its own"


async def send_json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    """Answer with ``body`` as JSON (and ``headers``)."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def is_batch(body: bytes) -> bool:
    """Whether ``body`` is a JSON array (what JSON-RPC calls a batch); read no further than its start."""
    return body.lstrip(b" \t\r\n")[:1] == b"["


def allowed_host_for(header: str, value: str) -> str | None:
    """The ``--allowed-host`` value that admits this Host or Origin value; None if it names no host."""
    name = value.strip().lower()
    if header == "origin":
        scheme, _, name = name.partition("://")
        if scheme not in ("http", "https"):
            return None
    return name if ALLOWABLE_HOST.match(name) else None


def rebinding_advice(header: str, value: str) -> str:
    """Why a request with this Host or Origin was refused, and what admits it."""
    shown = echoed(value) if value else "(none)"
    if header == "host":
        why = (
            f"the Host header {shown} is not a name this hub answers to on /mcp (a defence against "
            "DNS rebinding: it answers to the address it listens on, loopback names and each --allowed-host)"
        )
    else:
        why = (
            f"the Origin header {shown} is not this hub's: a web page from another site may not call "
            "/mcp (a defence against DNS rebinding)"
        )
    name = allowed_host_for(header, value)
    if name is None:
        return f"{why}; that value names no host --allowed-host could admit"
    return (
        f"{why}. If clients reach the hub by that name (behind a reverse proxy, say), start the hub "
        f"with --allowed-host {name} (or add it to SONDE_ALLOWED_HOSTS)"
    )


def takes_content_type(value: str | None) -> bool:
    """Whether the SDK takes a POST with this Content-Type (it checks before anything else)."""
    return value is not None and value.lower().startswith("application/json")


def content_type_advice(value: str | None) -> str:
    """Why a POST to /mcp with this Content-Type (None: none sent) was refused, and what to send."""
    sent = f"this request's Content-Type was {echoed(value)}" if value else "this request sent none"
    return (
        "POST /mcp takes a JSON-RPC message: send it with Content-Type: application/json (and "
        f"Accept: application/json, text/event-stream, as MCP clients do); {sent}"
    )


def _has_content_type(message: MutableMapping[str, Any]) -> bool:
    return any(name.lower() == b"content-type" for name, _ in message.get("headers", []))


class RebindingLog:
    """The hub's log line of a rebinding refusal: at once, then once a minute per header value
    with how many were refused since."""

    def __init__(self) -> None:
        self._said_at: dict[tuple[str, str], float] = {}
        self._since: dict[tuple[str, str], int] = {}

    def refused(self, header: str, value: str, client: str, message: str) -> None:
        key = (header, value[:256])
        now = time.monotonic()
        self._since[key] = self._since.get(key, 0) + 1
        if now - self._said_at.get(key, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        if len(self._said_at) >= 1024:  # bounded: a client inventing names cannot grow it
            self._said_at.clear()
            self._since = {key: self._since[key]}
        count, self._since[key], self._said_at[key] = self._since[key], 0, now
        more = f" ({count} such requests since the last line)" if count > 1 else ""
        log.warning("refused an MCP request from %s%s: %s", client, more, message)


class SdkRefusalAnswer:
    """The ``send`` of one ``/mcp`` request, in front of the SDK's: its DNS-rebinding refusal
    (`rebinding_advice`) and its Content-Type refusal (`content_type_advice`) are replaced by
    a JSON-RPC error (`mcp_refusal`), with the same status; any other answer passes as it is.
    ``refused`` is the header it refused for DNS rebinding (``host``, ``origin``), once it has."""

    def __init__(self, send: Any, headers: dict[str, str], client: str, said: RebindingLog) -> None:
        self._send = send
        self._headers = headers
        self._client = client
        self._said = said
        self._status = 0  # of the SDK's text refusal being replaced
        self.refused: str | None = None

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start" and self._is_text_refusal(message):
            self._status = message["status"]
            self.refused = REBINDING_REFUSALS.get(self._status)
            return  # the SDK's text answer: ours goes out in its place, with its last body part
        if not self._status:
            await self._send(message)
            return
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            await send_refusal(self._send, self._status, *self._refusal())

    def _is_text_refusal(self, start: MutableMapping[str, Any]) -> bool:
        if start["status"] in REBINDING_REFUSALS:
            return True
        return (  # the SDK's other 400s (a body that is no JSON-RPC) are JSON already
            start["status"] == CONTENT_TYPE_REFUSAL
            and not _has_content_type(start)
            and not takes_content_type(self._headers.get("content-type"))
        )

    def _refusal(self) -> tuple[str, str]:
        """The word and message of the refusal sent in the SDK's place."""
        if self.refused is None:
            return CONTENT_TYPE_CODE, content_type_advice(self._headers.get("content-type"))
        value = self._headers.get(self.refused, "")
        advice = rebinding_advice(self.refused, value)
        self._said.refused(self.refused, value, self._client, advice)
        return REBINDING_CODES[self.refused], advice
