"""The `sonde serve --json` line protocol: pure models and request parsing.

One JSON object per line in each direction. The server first prints a ready
line; then every request line gets exactly one response line carrying the
request's ``id`` (``null`` when the id could not be read) and
``protocolVersion``. Nothing here does I/O: the serve shell feeds bytes to a
`sonde.protocol.lines.LineSplitter`, hands each line to `parse_request` and writes what
`encode_line` returns.

Error messages (the seed contract fixes the first three; the rest are ours):

- ``Invalid JSON request`` (id null): the line is not UTF-8 JSON (or holds a lone surrogate).
- ``Unknown tool '<name>'``: no exposed tool has that name (the shell decides).
- ``Missing tool name in tools/call request``: ``params.name`` absent, null or "".
- ``Request line too long`` (id null): a line over `MAX_REQUEST_LINE_BYTES`.
- ``Invalid request: ...``: JSON that is not an object, an id that is not a
  string/number/null, a method that is not a string, params that are not an
  object, a tool name that is not a string, a tools/call ``params`` key other
  than ``name`` and ``input`` (MCP's ``arguments`` is named as such).
- ``Unknown method '<m>'``: a method other than tools/list and tools/call.
- ``Invalid tool input: expected an object``: ``params.input`` not an object.
- ``Invalid tool input: nested too deeply``: deeper than the validator goes,
  however deep (a line too deep for `json.loads` is read with its deep parts cut).
- ``Server busy: ...``: more tool calls than the shell runs or keeps waiting.

Unknown top-level request keys are ignored, so clients may add their own
(``jsonrpc`` for one); ``params`` of tools/list is ignored.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final, Literal, NoReturn

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from sonde.protocol.errors import RemoteProtocolError
from sonde.protocol.jsontext import escapes_lone_surrogate

API_VERSION: Final = "1.0.0"
PROTOCOL_VERSION: Final = "1.0.0"
MAX_REQUEST_LINE_BYTES = 1024 * 1024  # longer lines are refused, not buffered

INVALID_JSON = "Invalid JSON request"
LINE_TOO_LONG = "Request line too long"
MISSING_TOOL_NAME = "Missing tool name in tools/call request"
INPUT_NOT_OBJECT = "Invalid tool input: expected an object"
INPUT_TOO_DEEP = "Invalid tool input: nested too deeply"
CALL_PARAMS = frozenset({"name", "input"})

# A line too deep for `json.loads` is decoded again with every array or object
# nested deeper than CUT_DEPTH replaced by CUT_MARKER (a JSON string), so its id
# and the place of the deep part can still be read. CUT_DEPTH lies above what
# pydantic validates (about 255 levels) and well below the recursion limit.
CUT_DEPTH = 300
CUT_MARKER: Final = "\u0000sonde: nested too deeply"
_JSON_STRING_OR_BRACKETS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+')

RequestId = StrictStr | StrictInt | StrictFloat | None


class LineModel(BaseModel):
    """Base of every serve-line model: frozen, no unknown fields, camelCase by alias."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)


# --- requests ---------------------------------------------------------------


class ListToolsRequest(LineModel):
    id: RequestId
    method: Literal["tools/list"] = "tools/list"


class CallToolRequest(LineModel):
    id: RequestId
    method: Literal["tools/call"] = "tools/call"
    name: Annotated[str, Field(min_length=1)]
    input: dict[str, JsonValue] = Field(default_factory=dict)


ServeRequest = ListToolsRequest | CallToolRequest


class BadRequest(RemoteProtocolError):
    """A request line the server cannot act on; answered with an error line.

    ``request_id`` is the id to echo (None when the id itself is unreadable).
    """

    def __init__(self, code: str, message: str, request_id: RequestId = None) -> None:
        super().__init__(code, message)
        self.request_id = request_id


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def decode_json_line(line: bytes) -> tuple[object, bool]:
    """The JSON value on ``line``, and whether parts of it were cut; raises `BadRequest`
    (``Invalid JSON request``).

    A lone surrogate (``"\\ud800"``) is valid JSON but no text: nothing holding
    it could be written back out, so the line is refused here. A line nested
    too deep for the decoder is decoded with its deep parts as `CUT_MARKER`.
    """
    cut = False
    try:
        value = _loads(line)
    except RecursionError:
        line, cut = _cut_too_deep(line), True
        try:
            value = _loads(line)
        except RecursionError:
            raise BadRequest("bad_json", INVALID_JSON) from None
    if escapes_lone_surrogate(line, value):
        raise BadRequest("bad_json", INVALID_JSON)
    return value, cut


def _loads(line: bytes) -> object:
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except ValueError:  # UnicodeError and JSONDecodeError are ValueErrors
        raise BadRequest("bad_json", INVALID_JSON) from None


def _cut_too_deep(line: bytes) -> bytes:
    """``line`` with each array or object deeper than `CUT_DEPTH` replaced by `CUT_MARKER`.

    Strings are skipped whole and runs of brackets taken at once, so a line of
    a million brackets costs a few matches. The cut parts are not checked
    further; brackets that never close make the line invalid JSON.
    """
    marker = json.dumps(CUT_MARKER).encode()
    pieces: list[bytes] = []
    kept_from = cut_from = depth = 0
    for match in _JSON_STRING_OR_BRACKETS.finditer(line):
        run = match.group()
        if run[0] in b"[{":
            if depth <= CUT_DEPTH < depth + len(run):
                cut_from = match.start() + CUT_DEPTH - depth
            depth += len(run)
        elif run[0] in b"]}":
            if depth - len(run) <= CUT_DEPTH < depth:
                pieces += [line[kept_from:cut_from], marker]
                kept_from = match.start() + depth - CUT_DEPTH
            depth -= len(run)
    if depth > CUT_DEPTH:
        raise BadRequest("bad_json", INVALID_JSON)
    pieces.append(line[kept_from:])
    return b"".join(pieces)


def _holds_cut(value: object) -> bool:
    """Whether ``value`` (decoded from a cut line, so at most `CUT_DEPTH` deep) holds `CUT_MARKER`."""
    pending = [value]
    while pending:
        item = pending.pop()
        if item == CUT_MARKER:
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _read_id(raw: dict[str, object]) -> RequestId:
    value = raw.get("id")
    if (
        value is None
        or isinstance(value, str | float)
        or (isinstance(value, int) and not isinstance(value, bool))
    ):
        return value
    raise BadRequest("bad_request", "Invalid request: id must be a string, a number or null")


def _unknown_param_message(keys: set[str]) -> str:
    if "arguments" in keys:
        return "Invalid request: unknown key 'arguments' in params; the tool input goes in params.input"
    return f"Invalid request: unknown key '{min(keys)}' in params; expected name and input"


def _read_call(request_id: RequestId, params: object, cut: bool = False) -> CallToolRequest:
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadRequest("bad_request", "Invalid request: params must be an object", request_id)
    name = params.get("name")
    if name is None or name == "":
        raise BadRequest("missing_tool_name", MISSING_TOOL_NAME, request_id)
    if not isinstance(name, str):
        raise BadRequest("bad_request", "Invalid request: params.name must be a string", request_id)
    if unknown := params.keys() - CALL_PARAMS:
        raise BadRequest("bad_request", _unknown_param_message(unknown), request_id)
    tool_input = params.get("input", {})
    if tool_input is None:
        tool_input = {}
    if not isinstance(tool_input, dict):
        raise BadRequest("bad_input", INPUT_NOT_OBJECT, request_id)
    if cut and _holds_cut(tool_input):
        raise BadRequest("bad_input", INPUT_TOO_DEEP, request_id)
    try:
        return CallToolRequest(id=request_id, name=name, input=tool_input)
    except ValidationError:  # JSON, yet not a JsonValue to pydantic: nested too deeply
        raise BadRequest("bad_input", INPUT_TOO_DEEP, request_id) from None


def parse_request(line: bytes) -> ServeRequest:
    """Decode one request line into a typed request.

    Raises `BadRequest` with the message and the id to answer with.
    """
    raw, cut = decode_json_line(line)
    if not isinstance(raw, dict):
        raise BadRequest("bad_request", "Invalid request: expected a JSON object")
    request_id = _read_id(raw)
    method = raw.get("method")
    if not isinstance(method, str):
        raise BadRequest("bad_request", "Invalid request: method must be a string", request_id)
    if method == "tools/list":
        return ListToolsRequest(id=request_id)
    if method == "tools/call":
        return _read_call(request_id, raw.get("params"), cut)
    raise BadRequest("unknown_method", f"Unknown method '{method}'", request_id)


# --- responses --------------------------------------------------------------


class ErrorDetail(LineModel):
    message: str


class ToolDescription(LineModel):
    name: str
    description: str
    input_schema: dict[str, JsonValue] = Field(alias="inputSchema")


class ToolsListResult(LineModel):
    tools: tuple[ToolDescription, ...]


class ToolCallResult(LineModel):
    tool: str
    output: dict[str, JsonValue]


class SuccessResponse(LineModel):
    id: RequestId
    ok: Literal[True] = True
    protocol_version: Literal["1.0.0"] = Field(default=PROTOCOL_VERSION, alias="protocolVersion")
    result: ToolsListResult | ToolCallResult


class ErrorResponse(LineModel):
    id: RequestId
    ok: Literal[False] = False
    protocol_version: Literal["1.0.0"] = Field(default=PROTOCOL_VERSION, alias="protocolVersion")
    error: ErrorDetail


class ReadyLine(LineModel):
    """The first line the server prints once it reads requests."""

    ok: Literal[True] = True
    api_version: Literal["1.0.0"] = Field(default=API_VERSION, alias="apiVersion")
    protocol_version: Literal["1.0.0"] = Field(default=PROTOCOL_VERSION, alias="protocolVersion")
    command: Literal["serve"] = "serve"
    status: Literal["ready"] = "ready"


class StartupFailure(LineModel):
    """The only line printed when the server cannot start (bad manifest, ...)."""

    ok: Literal[False] = False
    api_version: Literal["1.0.0"] = Field(default=API_VERSION, alias="apiVersion")
    protocol_version: Literal["1.0.0"] = Field(default=PROTOCOL_VERSION, alias="protocolVersion")
    command: Literal["serve"] = "serve"
    error: ErrorDetail


ServeLine = ReadyLine | StartupFailure | SuccessResponse | ErrorResponse


def tools_list_response(request_id: RequestId, tools: list[ToolDescription]) -> SuccessResponse:
    """The answer to tools/list."""
    return SuccessResponse(id=request_id, result=ToolsListResult(tools=tuple(tools)))


def tool_call_response(request_id: RequestId, tool: str, output: dict[str, Any]) -> SuccessResponse:
    """The answer to a tools/call that ran; ``output`` is the probe's JSON result."""
    return SuccessResponse(id=request_id, result=ToolCallResult(tool=tool, output=output))


def error_response(request_id: RequestId, message: str) -> ErrorResponse:
    """An ``ok: false`` answer echoing ``request_id``."""
    return ErrorResponse(id=request_id, error=ErrorDetail(message=message))


def unknown_tool_response(request_id: RequestId, name: str) -> ErrorResponse:
    """The answer to a tools/call naming a tool that is not exposed."""
    return error_response(request_id, f"Unknown tool '{name}'")


def server_busy_response(request_id: RequestId, running: int, waiting: int) -> ErrorResponse:
    """The answer to a tools/call refused because ``running`` calls run and ``waiting`` wait."""
    return error_response(
        request_id,
        f"Server busy: {running} tool calls running and {waiting} waiting; send it again once one is answered",
    )


def startup_failure(message: str) -> StartupFailure:
    """The single line printed instead of the ready line when serving cannot start."""
    return StartupFailure(error=ErrorDetail(message=message))


def encode_line(line: ServeLine) -> bytes:
    """One compact JSON line, newline-terminated (NaN/Infinity become null)."""
    return line.model_dump_json(by_alias=True).encode() + b"\n"
