"""Pure tests of the serve line protocol: request parsing, response shapes, line splitting."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from sonde.protocol.errors import RemoteProtocolError
from sonde.protocol.lines import LINE_TOO_LONG_EVENT, LineSplitter
from sonde.protocol.serve_lines import (
    INPUT_TOO_DEEP,
    INVALID_JSON,
    MAX_REQUEST_LINE_BYTES,
    MISSING_TOOL_NAME,
    BadRequest,
    CallToolRequest,
    ListToolsRequest,
    ReadyLine,
    ToolDescription,
    encode_line,
    error_response,
    parse_request,
    startup_failure,
    tool_call_response,
    tools_list_response,
    unknown_tool_response,
)


def decoded(line: bytes) -> dict[str, object]:
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    value = json.loads(line)
    assert isinstance(value, dict)
    return value


def bad(line: bytes) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        parse_request(line)
    return caught.value


# --- ready and startup lines ------------------------------------------------


def test_ready_line_is_exact_compact_json() -> None:
    assert encode_line(ReadyLine()) == (
        b'{"ok":true,"apiVersion":"1.0.0","protocolVersion":"1.0.0","command":"serve","status":"ready"}\n'
    )


def test_startup_failure_line_shape() -> None:
    assert decoded(encode_line(startup_failure("manifest m.json: bad"))) == {
        "ok": False,
        "apiVersion": "1.0.0",
        "protocolVersion": "1.0.0",
        "command": "serve",
        "error": {"message": "manifest m.json: bad"},
    }


# --- requests ---------------------------------------------------------------


def test_tools_list_request() -> None:
    assert parse_request(b'{"id": "1", "method": "tools/list"}') == ListToolsRequest(id="1")


def test_tools_call_request_with_input() -> None:
    request = parse_request(
        b'{"id": 2, "method": "tools/call", "params": {"name": "a.b", "input": {"t": "x"}}}'
    )
    assert request == CallToolRequest(id=2, name="a.b", input={"t": "x"})


@pytest.mark.parametrize("params", ['{"name": "a.b"}', '{"name": "a.b", "input": null}'])
def test_tools_call_input_defaults_to_empty_object(params: str) -> None:
    request = parse_request(f'{{"id": 1, "method": "tools/call", "params": {params}}}'.encode())
    assert request == CallToolRequest(id=1, name="a.b", input={})


@pytest.mark.parametrize("request_id", ["7", 7, 7.5, None, 10**30])
def test_request_id_kept_with_its_type(request_id: object) -> None:
    request = parse_request(json.dumps({"id": request_id, "method": "tools/list"}).encode())
    assert request.id == request_id
    assert type(request.id) is type(request_id)


def test_missing_id_is_null() -> None:
    assert parse_request(b'{"method": "tools/list"}').id is None


def test_unknown_top_level_keys_are_ignored() -> None:
    assert parse_request(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}') == ListToolsRequest(id=1)


@pytest.mark.parametrize(
    "line",
    [b"not json", b'{"id": 1', b"\xff\xfe{}", b'{"id": NaN, "method": "tools/list"}', b"[" * 100_000],
)
def test_invalid_json(line: bytes) -> None:
    error = bad(line)
    assert (error.message, error.request_id, error.code) == (INVALID_JSON, None, "bad_json")
    assert isinstance(error, RemoteProtocolError)


@pytest.mark.parametrize("line", [b"[1, 2]", b"42", b'"tools/list"', b"null"])
def test_json_that_is_not_an_object(line: bytes) -> None:
    error = bad(line)
    assert (error.message, error.request_id) == ("Invalid request: expected a JSON object", None)


@pytest.mark.parametrize("request_id", ["true", "[1]", '{"a": 1}'])
def test_bad_id_type(request_id: str) -> None:
    error = bad(f'{{"id": {request_id}, "method": "tools/list"}}'.encode())
    assert error.message == "Invalid request: id must be a string, a number or null"
    assert error.request_id is None


@pytest.mark.parametrize("method", ["", ', "method": 3', ', "method": null'])
def test_method_must_be_a_string(method: str) -> None:
    error = bad(f'{{"id": "m"{method}}}'.encode())
    assert (error.message, error.request_id) == ("Invalid request: method must be a string", "m")


def test_unknown_method() -> None:
    error = bad(b'{"id": 9, "method": "tools/delete"}')
    assert (error.message, error.request_id, error.code) == (
        "Unknown method 'tools/delete'",
        9,
        "unknown_method",
    )


@pytest.mark.parametrize(
    "params", ["", ', "params": {}', ', "params": {"name": ""}', ', "params": {"name": null}']
)
def test_missing_tool_name(params: str) -> None:
    error = bad(f'{{"id": "3", "method": "tools/call"{params}}}'.encode())
    assert (error.message, error.request_id) == (MISSING_TOOL_NAME, "3")


def test_tool_name_must_be_a_string() -> None:
    error = bad(b'{"id": 3, "method": "tools/call", "params": {"name": 5}}')
    assert (error.message, error.request_id) == ("Invalid request: params.name must be a string", 3)


def test_params_must_be_an_object() -> None:
    error = bad(b'{"id": 3, "method": "tools/call", "params": [1]}')
    assert (error.message, error.request_id) == ("Invalid request: params must be an object", 3)


@pytest.mark.parametrize("tool_input", ["[]", "1", '"x"', "true"])
def test_input_must_be_an_object(tool_input: str) -> None:
    error = bad(
        f'{{"id": 4, "method": "tools/call", "params": {{"name": "a.b", "input": {tool_input}}}}}'.encode()
    )
    assert (error.message, error.request_id) == ("Invalid tool input: expected an object", 4)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [300, 3000, 400_000])
def test_input_nested_too_deeply_keeps_the_id(depth: int) -> None:
    error = bad(
        f'{{"id": 4, "method": "tools/call", "params": {{"name": "a.b", "input": {{"a": {nested(depth)}}}}}}}'.encode()
    )
    assert (error.message, error.request_id, error.code) == (INPUT_TOO_DEEP, 4, "bad_input")


def test_a_deep_value_under_an_ignored_key_is_ignored() -> None:
    line = f'{{"id": 5, "pad": {nested(3000)}, "method": "tools/call", "params": {{"name": "a.b", "input": {{"x": "]["}}}}}}'
    assert parse_request(line.encode()) == CallToolRequest(id=5, name="a.b", input={"x": "]["})


def test_a_deep_id_is_not_an_id() -> None:
    error = bad(f'{{"id": {nested(3000)}, "method": "tools/list"}}'.encode())
    assert (error.message, error.request_id) == (
        "Invalid request: id must be a string, a number or null",
        None,
    )


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": 1, "x": ' + b"[" * 3000 + b"]" * 2999 + b"}",
        b'{"id": 1, "x": 1 ' + nested(3000).encode() + b"}",
    ],
)
def test_deep_json_that_is_not_json_stays_invalid(line: bytes) -> None:
    assert bad(line).message == INVALID_JSON


def test_mcp_arguments_key_is_refused_naming_input() -> None:
    error = bad(b'{"id": 6, "method": "tools/call", "params": {"name": "a.b", "arguments": {"pid": 1}}}')
    assert (error.message, error.request_id) == (
        "Invalid request: unknown key 'arguments' in params; the tool input goes in params.input",
        6,
    )


def test_unknown_params_key_is_refused() -> None:
    error = bad(b'{"id": 7, "method": "tools/call", "params": {"name": "a.b", "input": {}, "timeout": 5}}')
    assert (error.message, error.request_id) == (
        "Invalid request: unknown key 'timeout' in params; expected name and input",
        7,
    )


def test_missing_name_is_said_before_unknown_params_keys() -> None:
    error = bad(b'{"id": 8, "method": "tools/call", "params": {"arguments": {}}}')
    assert (error.message, error.request_id) == (MISSING_TOOL_NAME, 8)


def test_request_models_are_frozen_and_strict() -> None:
    request = ListToolsRequest(id=1)
    with pytest.raises(ValidationError):
        request.id = 2  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ListToolsRequest(id=True)
    with pytest.raises(ValidationError):
        CallToolRequest(id=1, name="")


# --- responses --------------------------------------------------------------


def test_tools_list_response_shape() -> None:
    schema = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    tool = ToolDescription(name="deploy", description="Deploy project", input_schema=schema)
    assert decoded(encode_line(tools_list_response("1", [tool]))) == {
        "id": "1",
        "ok": True,
        "protocolVersion": "1.0.0",
        "result": {"tools": [{"name": "deploy", "description": "Deploy project", "inputSchema": schema}]},
    }


def test_tool_call_response_shape() -> None:
    assert decoded(encode_line(tool_call_response("2", "deploy", {}))) == {
        "id": "2",
        "ok": True,
        "protocolVersion": "1.0.0",
        "result": {"tool": "deploy", "output": {}},
    }


def test_unknown_tool_response_shape() -> None:
    assert decoded(encode_line(unknown_tool_response("3", "dangerous-shell"))) == {
        "id": "3",
        "ok": False,
        "protocolVersion": "1.0.0",
        "error": {"message": "Unknown tool 'dangerous-shell'"},
    }


def test_malformed_json_response_shape() -> None:
    assert decoded(encode_line(error_response(None, INVALID_JSON))) == {
        "id": None,
        "ok": False,
        "protocolVersion": "1.0.0",
        "error": {"message": "Invalid JSON request"},
    }


def test_encoded_lines_are_compact_and_keep_key_order() -> None:
    line = encode_line(error_response(5, "x"))
    assert line == b'{"id":5,"ok":false,"protocolVersion":"1.0.0","error":{"message":"x"}}\n'


def test_non_finite_output_numbers_become_null() -> None:
    line = encode_line(tool_call_response(1, "t", {"x": float("nan"), "y": float("inf")}))
    assert decoded(line)["result"] == {"tool": "t", "output": {"x": None, "y": None}}


def test_newlines_inside_values_stay_escaped() -> None:
    line = encode_line(error_response("a\nb", "line one\nline two"))
    assert decoded(line)["id"] == "a\nb"


# --- line splitting ---------------------------------------------------------


def test_splitter_joins_chunks_and_skips_blank_lines() -> None:
    splitter = LineSplitter(MAX_REQUEST_LINE_BYTES)
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b"1}\n\n   \n\r\n{}\n{") == [b'{"a":1}', b"{}"]
    assert splitter.end() == [b"{"]


def test_splitter_end_without_partial_line() -> None:
    splitter = LineSplitter(MAX_REQUEST_LINE_BYTES)
    assert splitter.feed(b"x\n") == [b"x"]
    assert splitter.end() == []


def test_splitter_accepts_a_line_at_the_cap() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    assert splitter.feed(b"12345678") == []
    assert splitter.feed(b"\n") == [b"12345678"]


def test_splitter_refuses_a_line_over_the_cap_in_one_chunk() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    assert splitter.feed(b"123456789\nok\n") == [LINE_TOO_LONG_EVENT, b"ok"]


def test_splitter_discards_the_rest_of_an_over_long_line() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    assert splitter.feed(b"1234") == []
    assert splitter.feed(b"56789") == [LINE_TOO_LONG_EVENT]
    assert splitter.feed(b"more of the same line") == []
    assert splitter.feed(b"and more\nnext") == []
    assert splitter.feed(b"\n") == [b"next"]


def test_splitter_discards_an_over_long_last_line() -> None:
    splitter = LineSplitter(max_line_bytes=4)
    assert splitter.feed(b"123456") == [LINE_TOO_LONG_EVENT]
    assert splitter.end() == []


def test_splitter_memory_stays_bounded() -> None:
    splitter = LineSplitter(max_line_bytes=1024)
    events = []
    for _ in range(100):
        events += splitter.feed(b"x" * 1000)
        assert len(splitter._buffer) <= 1024
    assert events == [LINE_TOO_LONG_EVENT]


# --- purity -----------------------------------------------------------------


def test_serve_lines_imports_no_io_framework() -> None:
    code = (
        "import sys, sonde.protocol.serve_lines;"
        "bad = {'trio', 'psutil', 'sonde.packs', 'sonde.agent', 'mcp', 'trio_websocket'} & set(sys.modules);"
        "print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "[]"
