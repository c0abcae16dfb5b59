"""A scripted stand-in for Anthropic's Messages API, so that the real Claude Code can be run here.

Claude Code asks a model what to do; this answers from a plan instead: call this Sonde tool with
these arguments, then the next, then stop. Everything between the two is real: Claude Code's MCP
client, its handling of Sonde's tools and their schemas, the hub or the bridge, the agent. What
Claude Code offered the model and what each tool call returned are kept for the test to read.

Only what Claude Code asks of the API is answered: ``POST /v1/messages`` (streamed as server-sent
events, or not), on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SONDE_TOOL_PREFIX = "mcp__sonde__"
FINAL_TEXT = "scripted model: done"

# given the text of every tool result so far, the next Sonde tool to call (without its prefix) and
# its arguments, or None to end the turn
Plan = Callable[[list[str]], tuple[str, dict[str, Any]] | None]


@dataclass
class Model:
    url: str
    offered: dict[str, dict[str, Any]] = field(default_factory=dict)  # Sonde tools, by unprefixed name
    results: list[str] = field(default_factory=list)
    errors: list[bool] = field(default_factory=list)  # is_error of each result
    lock: threading.Lock = field(default_factory=threading.Lock)


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return str(content)


def reply(model: Model, plan: Plan, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The content blocks and stop reason answering one request."""
    tools = {t["name"]: t for t in body.get("tools", []) if t.get("name", "").startswith(SONDE_TOOL_PREFIX)}
    if not tools:  # Claude Code's side requests (a title for the session): no tools, plain text
        return [{"type": "text", "text": "Sonde"}], "end_turn"
    blocks = [
        block
        for message in body.get("messages", [])
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    with model.lock:
        for name, tool in tools.items():
            model.offered[name.removeprefix(SONDE_TOOL_PREFIX)] = tool
        model.results[:] = [result_text(block) for block in blocks]
        model.errors[:] = [bool(block.get("is_error")) for block in blocks]
        step = plan(list(model.results))
    if step is None:
        return [{"type": "text", "text": FINAL_TEXT}], "end_turn"
    name, arguments = step
    call = {"type": "tool_use", "id": f"toolu_{len(blocks) + 1:04d}", "name": SONDE_TOOL_PREFIX + name}
    return [{**call, "input": arguments}], "tool_use"


def events(blocks: list[dict[str, Any]], stop: str) -> bytes:
    """The blocks as the Messages API streams them."""
    out: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_scripted",
                "type": "message",
                "role": "assistant",
                "model": "scripted",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        }
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append({"type": "content_block_start", "index": index, "content_block": start})
        out.append({"type": "content_block_delta", "index": index, "delta": delta})
        out.append({"type": "content_block_stop", "index": index})
    out.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {}})
    out.append({"type": "message_stop"})
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in out)


def handler(model: Model, plan: Plan) -> type[BaseHTTPRequestHandler]:
    class Messages(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if not self.path.startswith("/v1/messages"):
                self.answer(404, "application/json", b'{"type": "error"}')
                return
            blocks, stop = reply(model, plan, body)
            if body.get("stream"):
                self.answer(200, "text/event-stream", events(blocks, stop))
                return
            message = {"id": "msg_scripted", "type": "message", "role": "assistant", "model": "scripted"}
            message |= {"content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": {}}
            self.answer(200, "application/json", json.dumps(message).encode())

        def answer(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Messages


@contextmanager
def scripted_model(plan: Plan) -> Iterator[Model]:
    """The scripted API on a free port of 127.0.0.1, for ``ANTHROPIC_BASE_URL``."""
    model = Model(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(model, plan))
    model.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
