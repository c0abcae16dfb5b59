"""The little the bridge needs to know about JSON-RPC messages, as plain values.

The bridge forwards the client's bytes as they came; it parses a message only
to learn its kind, its id and (for `initialize`) the negotiated version, and
it writes every message it sends to stdout as one compact line.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from sonde.protocol.jsontext import escapes_lone_surrogate

INTERNAL_ERROR = -32603
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
PARSE_ERROR = -32700
INITIALIZE = "initialize"
INITIALIZED = "notifications/initialized"
CANCELLED = "notifications/cancelled"

# MCP 2026-07-28 drops the handshake: each message names its protocol version in
# ``params._meta``, and over HTTP the routing headers must repeat what the body says.
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
HEADER_SAFE = re.compile(r"[\x20-\x7E]*")
BASE64_SENTINEL = re.compile(r"=\?base64\?.*\?=")

Message = dict[str, Any]


class NotJsonRpc(ValueError):
    """A line from the client that is not one JSON-RPC message.

    It is answered with ``code``, once for each of ``ids`` (the requests it holds), or once with
    a null id when it holds none.
    """

    code = PARSE_ERROR
    ids: list[Any] = []

    def answer(self) -> str:
        return f"Parse error: {self}"


class BatchRefused(NotJsonRpc):
    """A JSON-RPC batch (an array of messages): MCP 2025-06-18 removed them, and the hub takes none."""

    code = INVALID_REQUEST

    def __init__(self, batch: list[Any]) -> None:
        super().__init__(BATCH_REFUSED)
        self.ids = [m["id"] for m in batch if isinstance(m, dict) and "method" in m and "id" in m]

    def answer(self) -> str:
        return str(self)


BATCH_REFUSED = (
    "JSON-RPC batches are not supported (MCP removed them in 2025-06-18, and the Sonde hub takes none): "
    "send each message on its own line"
)


class Unroutable(ValueError):
    """A message whose protocol version or method no HTTP header can carry, though one must repeat it.

    ``code`` is the JSON-RPC error code to answer it with.
    """

    def __init__(self, reason: str, code: int) -> None:
        super().__init__(reason)
        self.code = code


def parse_line(line: bytes) -> Message:
    """Parse one line from stdin: UTF-8 JSON text, no byte order mark, one message. Raises `NotJsonRpc`
    (`BatchRefused` for an array of messages).

    The line is decoded here, strictly: ``json.loads`` on bytes would guess
    UTF-16 or UTF-32 and skip a BOM, and the bridge would forward a body the
    hub refuses as unparseable.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJsonRpc(f"not UTF-8: {exc}") from None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotJsonRpc(f"not JSON: {exc}") from None
    if escapes_lone_surrogate(line, value):  # it could be sent on neither as a header nor as UTF-8
        raise NotJsonRpc("not JSON text: a string escapes a lone UTF-16 surrogate (\\ud800-\\udfff)")
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and value:
        raise BatchRefused(value)
    raise NotJsonRpc("a JSON-RPC message is an object")


def request_ids(message: Message) -> list[Any]:
    """The id of ``message`` if it is a request (it has a method and an id), as a list.

    A response the client sends back (to a server request) also has an id, but
    it belongs to the hub's id space: an error made up for it would look to the
    client like an answer to one of its own requests, so it is not counted.
    """
    return [message["id"]] if "method" in message and "id" in message else []


def method_of(message: Message) -> str | None:
    return message.get("method") if isinstance(message, dict) else None


def is_initialize(message: Message) -> bool:
    return method_of(message) == INITIALIZE and "id" in message


def is_initialized(message: Message) -> bool:
    return method_of(message) == INITIALIZED


def cancelled_request_id(message: Message) -> Any:
    """The ``requestId`` a ``notifications/cancelled`` names, else None."""
    if method_of(message) != CANCELLED:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    return params.get("requestId") if isinstance(params, dict) else None


def envelope_version(message: Message) -> str | None:
    """The protocol version a message carries in its own ``params._meta`` (MCP 2026-07-28 on), else None."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def routing_headers(message: Message, version: str) -> dict[str, str]:
    """The headers that repeat a per-request-versioned message's version, method and name on HTTP.

    Raises `Unroutable` for a version or method that is not printable ASCII
    (a header can carry nothing else, and they have no escaped form).
    """
    if not header_safe(version):
        raise Unroutable(
            f"params._meta[{PROTOCOL_VERSION_META_KEY!r}] is {version!r}: a protocol version must be "
            f"printable ASCII (the {VERSION_HEADER} header repeats it)",
            INVALID_PARAMS,
        )
    headers = {VERSION_HEADER: version}
    method = method_of(message)
    if isinstance(method, str):
        if not header_safe(method):
            raise Unroutable(
                f"method {method!r} cannot be sent: it is not printable ASCII, and the {METHOD_HEADER} "
                "header must repeat it",
                INVALID_REQUEST,
            )
        headers[METHOD_HEADER] = method
        name_key = NAME_BEARING_METHODS.get(method)
        params = message.get("params") if isinstance(message, dict) else None
        name = params.get(name_key) if name_key and isinstance(params, dict) else None
        if isinstance(name, str):
            headers[NAME_HEADER] = header_value(name)
    return headers


def header_safe(value: str) -> bool:
    """Whether ``value`` goes through an HTTP field value unchanged (printable ASCII, no outer spaces)."""
    return HEADER_SAFE.fullmatch(value) is not None and value == value.strip()


def header_value(value: str) -> str:
    """``value`` as an HTTP field value: verbatim if it survives one, else in the ``=?base64?...?=`` wrapper."""
    if header_safe(value) and not BASE64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def id_key(request_id: Any) -> str:
    """A dict key that keeps ``1`` and ``"1"`` apart, as JSON-RPC does."""
    return json.dumps(request_id, sort_keys=True)


def negotiated_version(answer: Message, initialize_id: Any) -> str | None:
    """The ``protocolVersion`` in the hub's answer to `initialize`, if this is that answer."""
    if answer.get("id") != initialize_id or not isinstance(answer.get("result"), dict):
        return None
    version = answer["result"].get("protocolVersion")
    return version if isinstance(version, str) and header_safe(version) else None


def error_answer(request_id: Any, message: str, code: int = INTERNAL_ERROR, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def as_text(value: Any) -> str:
    """``value`` as JSON, for a log line or an error message: ``7``, ``"7"``."""
    return json.dumps(value, ensure_ascii=False)


def as_line(message: Any) -> bytes:
    """One compact JSON line, newline included (JSON escapes every newline inside strings)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
