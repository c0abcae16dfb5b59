"""End to end: the real `sonde serve --json` subprocess against the seed contract.

Each test starts `python -m sonde serve --json` in a temporary directory and
talks to it over pipes, under a `trio.fail_after` so nothing can hang. Slow and
failing probes come from a test-only pack, `slowtest`, made discoverable to
the subprocess through a ``*.dist-info/entry_points.txt`` on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from sonde.agent.serve import MAX_CALLS_RUNNING, MAX_CALLS_WAITING
from sonde.packs.registry import load_packs
from tests.subprocs import NOT_UTF8_SHOWN, process_named_not_utf8
from tests.testpacks import install_test_pack

pytestmark = pytest.mark.e2e

SERVE = [sys.executable, "-m", "sonde", "serve", "--json"]
PROCESS_TIMEOUT_S = 8
READY = {"ok": True, "apiVersion": "1.0.0", "protocolVersion": "1.0.0", "command": "serve", "status": "ready"}
READY_BYTES = b'{"ok":true,"apiVersion":"1.0.0","protocolVersion":"1.0.0","command":"serve","status":"ready"}'
MEMORY = "system.memory.usage"
MEMORY_FIELDS = {
    "total_bytes",
    "available_bytes",
    "used_bytes",
    "free_bytes",
    "percent_used",
    "available_percent",
    "swap_total_bytes",
    "swap_used_bytes",
    "swap_free_bytes",
    "swap_percent_used",
    "oom_kills_since_boot",
    "oom_kills",
    "oom_kills_unreadable",
    "oom_kills_note",
}
SLOW_PROBES = {
    "slowtest.sleep.wait",
    "slowtest.sleep.capped",
    "slowtest.fail.boom",
    "slowtest.fail.exit",
    "slowtest.stray.output",
}

SLOW_PACK_SOURCE = '''
"""Test-only pack: probes that wait, time out, fail or misbehave."""
import sys

import trio
from pydantic import Field

from sonde.packs.base import NoParams, Pack, Params, Result

PACK = Pack("slowtest", "0.0.1", "Test-only probes that wait or fail.")


class WaitParams(Params):
    seconds: float = Field(ge=0, le=30)


class Waited(Result):
    seconds: float


@PACK.probe("slowtest.sleep.wait", "Sleep for `seconds`, then answer.", timeout_s=20)
async def wait(ctx, params: WaitParams) -> Waited:
    await trio.sleep(params.seconds)
    return Waited(seconds=params.seconds)


@PACK.probe("slowtest.sleep.capped", "Sleep past a 0.2 s timeout.", timeout_s=0.2)
async def capped(ctx, params: WaitParams) -> Waited:
    await trio.sleep(params.seconds)
    return Waited(seconds=params.seconds)


@PACK.probe("slowtest.fail.boom", "Always raises.")
async def boom(ctx, params: NoParams) -> Waited:
    raise RuntimeError("boom on purpose")


@PACK.probe("slowtest.fail.exit", "Raises SystemExit.")
async def exit_(ctx, params: NoParams) -> Waited:
    raise SystemExit(3)


CHILD = "import sys; line = sys.stdin.readline(); print('STRAY-CHILD', repr(line), flush=True)"


@PACK.probe("slowtest.stray.output", "Prints, and runs a child that reads stdin and prints.", timeout_s=3)
async def stray(ctx, params: NoParams) -> Waited:
    print("STRAY-PRINT", flush=True)
    await trio.run_process([sys.executable, "-c", CHILD], stdin=None)  # inherits fds 0 and 1
    return Waited(seconds=0)
'''


@pytest.fixture(scope="session")
def slow_pack_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose Python finds the `slowtest` pack by entry point."""
    site = install_test_pack(tmp_path_factory.mktemp("slowpack"), "slowtest", SLOW_PACK_SOURCE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def call(request_id: object, name: str, tool_input: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if tool_input is not None:
        params["input"] = tool_input
    return {"id": request_id, "method": "tools/call", "params": params}


def list_tools(request_id: object = "list") -> dict[str, Any]:
    return {"id": request_id, "method": "tools/list"}


def as_line(request: dict[str, Any] | bytes) -> bytes:
    return request if isinstance(request, bytes) else json.dumps(request).encode()


@dataclass
class Finished:
    """A serve process run to its end."""

    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def lines(self) -> list[dict[str, Any]]:
        """Every stdout line, parsed; fails if any is not a JSON object."""
        parsed = [json.loads(line) for line in self.stdout.splitlines()]
        assert all(isinstance(item, dict) for item in parsed)
        return parsed

    @property
    def responses(self) -> list[dict[str, Any]]:
        lines = self.lines
        assert lines[0] == READY
        return lines[1:]

    def by_id(self) -> dict[Any, dict[str, Any]]:
        answers = {response["id"]: response for response in self.responses}
        assert len(answers) == len(self.responses), "ids must be unique in this test"
        return answers


async def serve_batch(
    cwd: Path,
    requests: Sequence[dict[str, Any] | bytes],
    *args: str,
    env: dict[str, str] | None = None,
    separator: bytes = b"\n",
) -> Finished:
    """Run the server on ``requests`` (one per line) until it exits at end of input."""
    stdin = separator.join(as_line(request) for request in requests) + b"\n"
    with trio.fail_after(PROCESS_TIMEOUT_S):
        done = await trio.run_process(
            [*SERVE, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=cwd,
            env=env,
        )
    return Finished(done.returncode, done.stdout, done.stderr)


class LiveServer:
    """A running server we talk to one line at a time."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._pending = b""

    async def send(self, *requests: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(b"".join(as_line(r) + b"\n" for r in requests))

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def receive_line(self) -> bytes:
        """The next stdout line (b"" at end of output)."""
        assert self.process.stdout is not None
        with trio.fail_after(PROCESS_TIMEOUT_S):
            while b"\n" not in self._pending:
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    rest, self._pending = self._pending, b""
                    return rest
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    async def receive(self) -> dict[str, Any]:
        line = await self.receive_line()
        assert line, "the server closed stdout"
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    async def wait(self, limit_s: float = PROCESS_TIMEOUT_S) -> int:
        with trio.fail_after(limit_s):
            return await self.process.wait()


@asynccontextmanager
async def live_server(cwd: Path, env: dict[str, str] | None = None) -> AsyncIterator[LiveServer]:
    """Start the server, check its ready line, and kill it on the way out if still running."""
    with (cwd / "serve.stderr").open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd, env=env
        )
        try:
            server = LiveServer(process)
            assert await server.receive_line() == READY_BYTES
            yield server
        finally:
            if process.returncode is None:
                process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(PROCESS_TIMEOUT_S):
                await process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    await stream.aclose()


def tool_names(response: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in response["result"]["tools"]]


def detected_probe_names() -> list[str]:
    return sorted(name for pack in load_packs().detected().packs.values() for name in pack.probes)


def write_manifest(directory: Path, content: object) -> Path:
    path = directory / "sondage.manifest.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def manifest_error(done: Finished) -> str:
    """The message of the single ok:false startup line; checks its exact shape."""
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    error = line.pop("error")
    assert line == {"ok": False, "apiVersion": "1.0.0", "protocolVersion": "1.0.0", "command": "serve"}
    assert set(error) == {"message"}
    message = error["message"]
    assert isinstance(message, str)
    return message


# --- startup ----------------------------------------------------------------


async def test_ready_line_is_first_and_exact(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [])
    first = done.stdout.split(b"\n", 1)[0]
    assert first == READY_BYTES
    assert json.loads(first) == READY
    assert set(json.loads(first)) == {"ok", "apiVersion", "protocolVersion", "command", "status"}
    assert done.returncode == 0


async def test_ready_line_comes_before_any_input(tmp_path: Path) -> None:
    async with live_server(tmp_path) as server:  # checks the ready line itself
        await server.close_stdin()
        assert await server.wait() == 0


async def test_serve_without_json_flag_exits_2(tmp_path: Path) -> None:
    with trio.fail_after(PROCESS_TIMEOUT_S):
        done = await trio.run_process(
            [sys.executable, "-m", "sonde", "serve"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=tmp_path,
        )
    assert done.returncode == 2
    assert done.stdout == b""
    assert b"--json" in done.stderr


# --- tools/list and tools/call ----------------------------------------------


async def test_tools_list_shape(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [list_tools("1")])
    [response] = done.responses
    assert set(response) == {"id", "ok", "protocolVersion", "result"}
    assert (response["id"], response["ok"], response["protocolVersion"]) == ("1", True, "1.0.0")
    assert set(response["result"]) == {"tools"}
    for tool in response["result"]["tools"]:
        assert set(tool) == {"name", "description", "inputSchema"}
        assert isinstance(tool["description"], str)
        assert tool["description"]
        schema = tool["inputSchema"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert isinstance(schema["properties"], dict)
        assert isinstance(schema["required"], list)
    assert MEMORY in tool_names(response)


async def test_tools_call_success_shape(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [call("2", MEMORY, {})])
    [response] = done.responses
    assert set(response) == {"id", "ok", "protocolVersion", "result"}
    assert (response["id"], response["ok"], response["protocolVersion"]) == ("2", True, "1.0.0")
    assert set(response["result"]) == {"tool", "output"}
    assert response["result"]["tool"] == MEMORY
    output = response["result"]["output"]
    assert set(output) == MEMORY_FIELDS
    assert output["total_bytes"] > 0


async def test_a_process_named_in_bytes_that_are_not_utf8_is_shown_escaped(tmp_path: Path) -> None:
    with process_named_not_utf8(tmp_path) as sleeper:
        done = await serve_batch(
            tmp_path, [call(1, "system.process.info", {"pid": sleeper.pid}), call(2, MEMORY)]
        )
    first, second = sorted(done.responses, key=lambda response: response["id"])
    assert first["ok"] is True, first
    assert first["result"]["output"]["name"] == NOT_UTF8_SHOWN
    assert first["result"]["output"]["cmdline"][0].endswith("/" + NOT_UTF8_SHOWN)
    assert second["ok"] is True  # the server went on


async def test_tools_call_without_input_uses_empty_object(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [call("no-input", MEMORY)])
    assert done.responses[0]["ok"] is True


async def test_ids_echoed_with_their_type(tmp_path: Path) -> None:
    ids: list[object] = [7, 7.5, "7", "", 0, None, 10**20]
    requests = [list_tools(request_id) for request_id in ids] + [
        call(request_id, MEMORY) for request_id in ids
    ]
    responses = (await serve_batch(tmp_path, requests)).responses
    assert len(responses) == 2 * len(ids)
    echoed = sorted((json.dumps(r["id"]), "tools" in r["result"]) for r in responses)
    assert echoed == sorted((json.dumps(i), listing) for i in ids for listing in (True, False))
    assert all(response["ok"] for response in responses)


async def test_unknown_tool_message(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [call("3", "dangerous-shell", {})])
    assert done.responses == [
        {
            "id": "3",
            "ok": False,
            "protocolVersion": "1.0.0",
            "error": {"message": "Unknown tool 'dangerous-shell'"},
        }
    ]


async def test_malformed_json(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [b'{"id": "4", "method": ', list_tools("after")])
    assert done.responses[0] == {
        "id": None,
        "ok": False,
        "protocolVersion": "1.0.0",
        "error": {"message": "Invalid JSON request"},
    }
    assert done.responses[1]["id"] == "after"
    assert done.responses[1]["ok"] is True


async def test_missing_tool_name(tmp_path: Path) -> None:
    requests = [{"id": 5, "method": "tools/call"}] + [
        {"id": n, "method": "tools/call", "params": params}
        for n, params in enumerate([{}, {"input": {}}, {"name": ""}, {"name": None}], start=6)
    ]
    responses = (await serve_batch(tmp_path, requests)).by_id()
    message = "Missing tool name in tools/call request"
    assert responses == {
        n: {"id": n, "ok": False, "protocolVersion": "1.0.0", "error": {"message": message}}
        for n in range(5, 10)
    }


async def test_invalid_params_is_a_runtime_error_with_the_id(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [call(6, MEMORY, {"bogus": 1})])
    [response] = done.responses
    assert set(response) == {"id", "ok", "protocolVersion", "error"}
    assert (response["id"], response["ok"], response["protocolVersion"]) == (6, False, "1.0.0")
    message = response["error"]["message"]
    assert message.startswith(f"invalid params for {MEMORY}")
    assert "bogus" in message


async def test_probe_failure_and_timeout_are_runtime_errors(
    tmp_path: Path, slow_pack_env: dict[str, str]
) -> None:
    requests = [call("boom", "slowtest.fail.boom"), call("late", "slowtest.sleep.capped", {"seconds": 5})]
    answers = (await serve_batch(tmp_path, requests, env=slow_pack_env)).by_id()
    assert answers["boom"]["ok"] is False
    assert (
        answers["boom"]["error"]["message"]
        == "probe slowtest.fail.boom failed: RuntimeError: boom on purpose"
    )
    assert answers["late"]["ok"] is False
    assert answers["late"]["error"]["message"] == "probe slowtest.sleep.capped did not finish within 0.2s"


async def test_bad_tool_input_type(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [call(8, MEMORY, [])])  # type: ignore[arg-type]
    assert done.responses[0]["error"] == {"message": "Invalid tool input: expected an object"}
    assert done.responses[0]["id"] == 8


async def test_unknown_method(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [{"id": 9, "method": "tools/delete"}])
    assert done.responses[0]["error"] == {"message": "Unknown method 'tools/delete'"}
    assert done.responses[0]["id"] == 9


async def test_json_that_is_not_a_request_keeps_the_server_going(tmp_path: Path) -> None:
    not_requests = [b"[1, 2]", b"42", b'"tools/list"', b'{"id": true, "method": "tools/list"}']
    requests = [item for line in not_requests for item in (line, list_tools(line.decode()))]
    responses = (await serve_batch(tmp_path, requests)).responses
    refused = [response for response in responses if response["id"] is None]
    assert len(refused) == len(not_requests)
    for response in refused:
        assert response["ok"] is False
        assert response["error"]["message"].startswith("Invalid request: ")
    answered = {response["id"] for response in responses if response["ok"]}
    assert answered == {line.decode() for line in not_requests}


async def test_a_probe_raising_system_exit_fails_its_call_alone(
    tmp_path: Path, slow_pack_env: dict[str, str]
) -> None:
    done = await serve_batch(
        tmp_path, [call("exit", "slowtest.fail.exit"), call("after", MEMORY)], env=slow_pack_env
    )
    answers = done.by_id()
    assert answers["exit"] == {
        "id": "exit",
        "ok": False,
        "protocolVersion": "1.0.0",
        "error": {"message": "probe slowtest.fail.exit failed: SystemExit: 3"},
    }
    assert answers["after"]["ok"] is True
    assert done.returncode == 0


async def test_a_probes_output_goes_to_stderr_and_its_children_read_no_requests(
    tmp_path: Path, slow_pack_env: dict[str, str]
) -> None:
    async with live_server(tmp_path, slow_pack_env) as server:
        await server.send(call("stray", "slowtest.stray.output"))
        answer = await server.receive()  # a line of JSON, not the print
        assert (answer["id"], answer["ok"]) == ("stray", True), answer  # the child read EOF, not our lines
        await server.send(list_tools("after"))
        assert (await server.receive())["id"] == "after"
        await server.close_stdin()
        assert await server.receive_line() == b""
        assert await server.wait() == 0
    stderr = (tmp_path / "serve.stderr").read_text()
    assert "STRAY-PRINT" in stderr
    assert "STRAY-CHILD ''" in stderr


async def test_deeply_nested_input_is_refused_with_the_id(tmp_path: Path) -> None:
    line = b'{"id": 10, "method": "tools/call", "params": {"name": "%s", "input": {"a": %s}}}' % (
        MEMORY.encode(),
        b"[" * 3000 + b"]" * 3000,
    )
    done = await serve_batch(tmp_path, [line, list_tools("after")])
    assert done.by_id()[10] == {
        "id": 10,
        "ok": False,
        "protocolVersion": "1.0.0",
        "error": {"message": "Invalid tool input: nested too deeply"},
    }
    assert done.by_id()["after"]["ok"] is True


async def test_mcp_arguments_and_unknown_params_keys_are_refused(tmp_path: Path) -> None:
    requests = [
        {"id": 11, "method": "tools/call", "params": {"name": MEMORY, "arguments": {}}},
        {"id": 12, "method": "tools/call", "params": {"name": MEMORY, "input": {}, "timeout": 5}},
    ]
    answers = (await serve_batch(tmp_path, requests)).by_id()
    assert answers[11]["error"] == {
        "message": "Invalid request: unknown key 'arguments' in params; the tool input goes in params.input"
    }
    assert answers[12]["error"] == {
        "message": "Invalid request: unknown key 'timeout' in params; expected name and input"
    }
    assert answers[11]["ok"] is answers[12]["ok"] is False


# --- lines ------------------------------------------------------------------


async def test_empty_lines_are_ignored(tmp_path: Path) -> None:
    requests: list[dict[str, Any] | bytes] = [b"", list_tools(1), b"   ", b"\t", call(2, MEMORY), b"", b"\r"]
    done = await serve_batch(tmp_path, requests, separator=b"\n\n")
    assert [response["id"] for response in done.responses] in ([1, 2], [2, 1])


async def test_every_line_is_json_with_protocol_version(tmp_path: Path) -> None:
    requests: list[dict[str, Any] | bytes] = [
        list_tools(1),
        call(2, MEMORY),
        call(3, "nope"),
        b"garbage",
        b"[]",
        call(4, MEMORY, {"bogus": True}),
        {"id": 5, "method": "tools/call"},
        {"id": 6, "method": "x"},
        b"",
    ]
    done = await serve_batch(tmp_path, requests)
    assert done.returncode == 0
    assert done.stdout.endswith(b"\n")
    assert len(done.responses) == 8  # one per non-blank request line
    for response in done.responses:
        assert response["protocolVersion"] == "1.0.0"
        assert set(response) in (
            {"id", "ok", "protocolVersion", "result"},
            {"id", "ok", "protocolVersion", "error"},
        )


async def test_last_line_without_newline_is_answered(tmp_path: Path) -> None:
    with trio.fail_after(PROCESS_TIMEOUT_S):
        done = await trio.run_process(
            SERVE,
            stdin=json.dumps(list_tools("tail")).encode(),
            capture_stdout=True,
            check=False,
            cwd=tmp_path,
        )
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()[1:]] == ["tail"]


async def test_over_long_line_is_refused_and_the_server_goes_on(tmp_path: Path) -> None:
    huge = b'{"id": "big", "method": "tools/list", "pad": "' + b"x" * (1024 * 1024) + b'"}'
    done = await serve_batch(tmp_path, [huge, list_tools("after")])
    assert done.responses[0] == {
        "id": None,
        "ok": False,
        "protocolVersion": "1.0.0",
        "error": {"message": "Request line too long"},
    }
    assert (done.responses[1]["id"], done.responses[1]["ok"]) == ("after", True)
    assert len(done.responses) == 2
    assert done.returncode == 0


async def test_over_long_line_sent_in_pieces(tmp_path: Path) -> None:
    async with live_server(tmp_path) as server:
        for _ in range(20):
            await server.send(b"y" * 100_000)  # each send ends with a newline: 20 short lines
        await server.send(b"z" * (1024 * 1024 + 1), list_tools("after"))
        for _ in range(20):
            assert (await server.receive())["error"]["message"] == "Invalid JSON request"
        assert (await server.receive())["error"]["message"] == "Request line too long"
        assert (await server.receive())["id"] == "after"


# --- concurrency and lifecycle ----------------------------------------------


async def test_fast_request_overtakes_slow_one(tmp_path: Path, slow_pack_env: dict[str, str]) -> None:
    async with live_server(tmp_path, slow_pack_env) as server:
        await server.send(call("slow", "slowtest.sleep.wait", {"seconds": 1.5}), call("fast", MEMORY))
        first = await server.receive()
        assert (first["id"], first["ok"]) == ("fast", True)
        await server.close_stdin()  # EOF with the slow request still in flight
        second = await server.receive()
        assert second["id"] == "slow"
        assert second["result"] == {"tool": "slowtest.sleep.wait", "output": {"seconds": 1.5}}
        assert await server.receive_line() == b""
        assert await server.wait() == 0


async def test_requests_in_flight_are_bounded(tmp_path: Path, slow_pack_env: dict[str, str]) -> None:
    slow = [call(f"slow-{n}", "slowtest.sleep.wait", {"seconds": 1}) for n in range(16)]
    async with live_server(tmp_path, slow_pack_env) as server:
        await server.send(*slow, call("fast", MEMORY))
        first = await server.receive()  # all 16 slots busy: the fast call waits for one
        assert first["id"].startswith("slow-")
        ids = {first["id"]} | {(await server.receive())["id"] for _ in range(16)}
        assert ids == {f"slow-{n}" for n in range(16)} | {"fast"}


async def test_requests_that_run_no_probe_are_not_held_behind_busy_slots(
    tmp_path: Path, slow_pack_env: dict[str, str]
) -> None:
    slow = [call(f"slow-{n}", "slowtest.sleep.wait", {"seconds": 20}) for n in range(20)]
    async with live_server(tmp_path, slow_pack_env) as server:
        await server.send(*slow, list_tools("list"), b"garbage", call("unknown", "no.such.tool"))
        with trio.fail_after(8):  # before a 20 s probe ends; margin for a loaded machine
            answers = [await server.receive() for _ in range(3)]
        assert [answer["id"] for answer in answers] == ["list", None, "unknown"]


async def test_calls_beyond_the_waiting_limit_are_refused_at_once(
    tmp_path: Path, slow_pack_env: dict[str, str]
) -> None:
    admitted = MAX_CALLS_RUNNING + MAX_CALLS_WAITING
    slow = [call(n, "slowtest.sleep.wait", {"seconds": 20}) for n in range(admitted)]
    async with live_server(tmp_path, slow_pack_env) as server:
        await server.send(*slow, call("one-too-many", MEMORY), list_tools("list"))
        with trio.fail_after(8):
            busy, listed = await server.receive(), await server.receive()
        assert busy == {
            "id": "one-too-many",
            "ok": False,
            "protocolVersion": "1.0.0",
            "error": {
                "message": f"Server busy: {MAX_CALLS_RUNNING} tool calls running and {MAX_CALLS_WAITING} "
                "waiting; send it again once one is answered"
            },
        }
        assert listed["id"] == "list"


async def test_stdout_closed_before_the_ready_line_stops_quietly(tmp_path: Path) -> None:
    with (tmp_path / "serve.stderr").open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=tmp_path
        )
    assert process.stdin is not None
    assert process.stdout is not None
    await process.stdout.aclose()  # before the server could write anything
    try:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
        await process.stdin.aclose()
    stderr_text = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in stderr_text
    assert "stdout is closed; stopping" in stderr_text


async def test_end_of_input_exits_0_after_answering(tmp_path: Path, slow_pack_env: dict[str, str]) -> None:
    requests = [call(n, "slowtest.sleep.wait", {"seconds": 0.3}) for n in range(5)]
    done = await serve_batch(tmp_path, requests, env=slow_pack_env)
    assert done.returncode == 0
    assert sorted(done.by_id()) == [0, 1, 2, 3, 4]
    assert all(response["ok"] for response in done.responses)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_signal_stops_promptly_with_0(
    tmp_path: Path, slow_pack_env: dict[str, str], signum: int
) -> None:
    async with live_server(tmp_path, slow_pack_env) as server:
        await server.send(call("slow", "slowtest.sleep.wait", {"seconds": 20}), call("fast", MEMORY))
        assert (await server.receive())["id"] == "fast"  # so the slow call is in flight
        server.process.send_signal(signum)
        assert await server.wait(limit_s=3) == 0
        while line := await server.receive_line():
            json.loads(line)  # nothing but protocol lines, even when stopping


# --- manifest ---------------------------------------------------------------


async def test_no_manifest_exposes_detected_packs(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [list_tools()])
    assert tool_names(done.responses[0]) == detected_probe_names()


async def test_no_manifest_includes_an_installed_detected_pack(
    tmp_path: Path, slow_pack_env: dict[str, str]
) -> None:
    done = await serve_batch(tmp_path, [list_tools()], env=slow_pack_env)
    assert set(tool_names(done.responses[0])) == set(detected_probe_names()) | SLOW_PROBES


async def test_manifest_probes_restrict_tools_exactly(tmp_path: Path, slow_pack_env: dict[str, str]) -> None:
    write_manifest(tmp_path, {"probes": [MEMORY]})
    requests = [list_tools(), call("hidden", "slowtest.sleep.wait", {"seconds": 0}), call("shown", MEMORY)]
    answers = (await serve_batch(tmp_path, requests, env=slow_pack_env)).by_id()
    assert tool_names(answers["list"]) == [MEMORY]
    assert answers["hidden"]["error"] == {"message": "Unknown tool 'slowtest.sleep.wait'"}
    assert answers["shown"]["ok"] is True


async def test_manifest_pack_exposes_all_its_probes(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"packs": ["system"]})
    done = await serve_batch(tmp_path, [list_tools()])
    assert tool_names(done.responses[0]) == sorted(load_packs().packs["system"].probes)


async def test_manifest_packs_and_globs_union(tmp_path: Path, slow_pack_env: dict[str, str]) -> None:
    write_manifest(tmp_path, {"packs": ["slowtest"], "probes": ["system.memory.*"]})
    done = await serve_batch(tmp_path, [list_tools()], env=slow_pack_env)
    expected = SLOW_PROBES | set(load_packs().matching("system.memory.*"))
    assert tool_names(done.responses[0]) == sorted(expected)


async def test_manifest_option_names_another_file(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"packs": ["no-such-pack"]})  # ignored: --manifest wins
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chosen = write_manifest(elsewhere, {"probes": ["system.memory.u*"]})
    done = await serve_batch(tmp_path, [list_tools()], "--manifest", str(chosen))
    assert tool_names(done.responses[0]) == [MEMORY]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"packs": ["system"', "Invalid JSON"),
        ({"packs": ["system"], "tools": []}, "tools"),
        ({"packs": ["no-such-pack"]}, "unknown pack 'no-such-pack'"),
        ({"probes": ["nothing.matches.*"]}, "probe pattern 'nothing.matches.*' matches no installed probe"),
        ({}, "at least one"),
        ({"packs": [], "probes": []}, "at least one"),
        ({"packs": "system"}, "packs"),
        ({"probes": [1]}, "probes.0"),
        (["system"], "object"),
    ],
)
async def test_bad_manifest_prints_one_error_line(tmp_path: Path, content: object, expected: str) -> None:
    write_manifest(tmp_path, content)
    done = await serve_batch(tmp_path, [list_tools()])
    message = manifest_error(done)
    assert "sondage.manifest.json" in message
    assert expected in message


async def test_missing_manifest_file_given_by_option(tmp_path: Path) -> None:
    done = await serve_batch(tmp_path, [list_tools()], "--manifest", "absent.json")
    message = manifest_error(done)
    assert "absent.json" in message
    assert "not found" in message


async def test_the_agent_configs_allowed_paths_apply(tmp_path: Path) -> None:
    home, logs = tmp_path / "home", tmp_path / "applogs"
    (home / ".sonde").mkdir(parents=True)
    logs.mkdir()
    (logs / "app.log").write_text("started\n")
    config = home / ".sonde" / "config.json"
    config.write_text(json.dumps({"allowedPaths": [str(logs)]}))
    config.chmod(0o600)
    call = {
        "id": 1,
        "method": "tools/call",
        "params": {"name": "system.logs.tail", "input": {"path": str(logs / "app.log")}},
    }
    env = {**os.environ, "HOME": str(home)}
    done = await serve_batch(tmp_path, [call], env=env)
    [answer] = done.responses
    assert answer["ok"] is True, answer
    assert "started" in json.dumps(answer["result"]["output"])
