"""`sonde serve --json`: a thin trio shell around the serve line protocol.

How it works: one reader task splits stdin into lines (`RequestLineSplitter`,
1 MiB cap) and decodes each (`parse_request`). A bad line is answered at
once; a good request is answered in its own task in the session's handler
nursery, at most `MAX_REQUESTS_IN_FLIGHT` at a time: the reader waits for a
free slot before it reads on. Every answer goes through a bounded channel to
the single writer task, so response lines never interleave.

On end of input the server waits for the requests in flight, writes their
answers and exits 0. SIGTERM or SIGINT cancels everything and exits 0.
stdout carries protocol lines only; logs go to stderr.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from sonde.agent.config import AgentConfig, ConfigError, load_config
from sonde.agent.manifest import ManifestError, select_tools
from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry, load_packs
from sonde.protocol.serve_lines import (
    LINE_TOO_LONG,
    BadRequest,
    CallToolRequest,
    ErrorResponse,
    LineTooLong,
    ListToolsRequest,
    ReadyLine,
    RequestLineSplitter,
    ServeRequest,
    SuccessResponse,
    ToolDescription,
    encode_line,
    error_response,
    parse_request,
    startup_failure,
    tool_call_response,
    tools_list_response,
    unknown_tool_response,
)

log = logging.getLogger(__name__)
MAX_REQUESTS_IN_FLIGHT = 16
RESPONSE_QUEUE_LINES = 16  # answers waiting for the writer; each at most ~256 KiB
READ_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class ToolServer:
    """Answers tools/list and tools/call for the probes it exposes."""

    registry: PackRegistry
    tools: tuple[ToolDescription, ...]
    ctx: ProbeContext = field(default_factory=ProbeContext)
    scrubber: Scrubber = field(default_factory=Scrubber)

    def exposes(self, name: str) -> bool:
        return any(tool.name == name for tool in self.tools)

    async def answer(self, request: ServeRequest) -> SuccessResponse | ErrorResponse:
        """The response line for one decoded request."""
        match request:
            case ListToolsRequest():
                return tools_list_response(request.id, list(self.tools))
            case CallToolRequest():
                return await self.call_tool(request)

    async def call_tool(self, request: CallToolRequest) -> SuccessResponse | ErrorResponse:
        """Run the probe; a probe error becomes an ``ok: false`` line with its message.

        The output and the error message are scrubbed of secrets first.
        """
        if not self.exposes(request.name):
            return unknown_tool_response(request.id, request.name)
        try:
            outcome = await execute_probe(  # scrubbed whole, before the cap: a secret cut short could pass
                self.registry, request.name, request.input, self.ctx, scrub=self.scrubber.scrub_result
            )
        except ProbeExecutionError as exc:
            message, _ = self.scrubber.scrub_text(exc.message)
            return error_response(request.id, message)
        return tool_call_response(request.id, request.name, outcome.result)


def create_tool_server(
    registry: PackRegistry,
    names: list[str],
    scrubber: Scrubber | None = None,
    config: AgentConfig | None = None,
) -> ToolServer:
    """A `ToolServer` exposing the probes ``names`` of ``registry`` (scrubbed by ``scrubber``), with the
    agent config's probe settings (``allowedPaths``, per-pack settings) as the agent has them."""
    tools = []
    for name in names:
        spec = registry.probe(name)
        if spec is not None:
            description = inspect.cleandoc(spec.description)
            tools.append(
                ToolDescription(name=name, description=description, input_schema=spec.params_schema())
            )
    scrubber = scrubber or Scrubber()
    settings = config.probe_settings() if config is not None else ProbeSettings()
    ctx = ProbeContext(settings=settings, redact=scrubber.redacted)
    return ToolServer(registry, tuple(tools), ctx=ctx, scrubber=scrubber)


@dataclass
class Session:
    """One run of the line protocol: the reader's view of handlers and writer."""

    server: ToolServer
    answers: trio.MemorySendChannel[bytes]
    handlers: trio.Nursery
    slots: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(MAX_REQUESTS_IN_FLIGHT))

    async def read_requests(self, requests: trio.abc.ReceiveStream) -> None:
        """Take every line of ``requests`` until end of input."""
        splitter = RequestLineSplitter()
        while chunk := await requests.receive_some(READ_CHUNK_BYTES):
            for event in splitter.feed(chunk):
                await self.take_line(event)
        for event in splitter.end():
            await self.take_line(event)

    async def take_line(self, event: bytes | LineTooLong) -> None:
        """Answer a bad line now; start a handler (waiting for a free slot) for a good one."""
        if isinstance(event, LineTooLong):
            await self.answers.send(encode_line(error_response(None, LINE_TOO_LONG)))
            return
        try:
            request = parse_request(event)
        except BadRequest as exc:
            await self.answers.send(encode_line(error_response(exc.request_id, exc.message)))
            return
        await self.handlers.start(self.handle, request)

    async def handle(
        self, request: ServeRequest, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with self.slots:
            task_status.started()
            response = await self.server.answer(request)
            await self.answers.send(encode_line(response))


async def write_lines(
    lines: trio.MemoryReceiveChannel[bytes], out: trio.abc.SendStream, on_broken: trio.CancelScope
) -> None:
    """Write each line whole, in order; if ``out`` breaks, cancel ``on_broken``."""
    async with lines:
        async for line in lines:
            try:
                await out.send_all(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.warning("stdout is closed; stopping")
                on_broken.cancel()
                return


async def serve_lines(server: ToolServer, requests: trio.abc.ReceiveStream, out: trio.abc.SendStream) -> None:
    """Write the ready line, then answer every request line until end of input.

    Returns once every answer is written (or ``out`` broke).
    """
    await out.send_all(encode_line(ReadyLine()))
    send_channel, receive_channel = trio.open_memory_channel[bytes](RESPONSE_QUEUE_LINES)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_lines, receive_channel, out, nursery.cancel_scope)
        async with send_channel, trio.open_nursery() as handlers:
            await Session(server, send_channel, handlers).read_requests(requests)


async def cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        log.warning("received %s; stopping", signal.Signals(signum).name)
        scope.cancel()
        return


async def serve_stdio(server: ToolServer) -> int:
    """Serve on this process's stdin/stdout until end of input or SIGTERM/SIGINT; returns 0."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        stdout = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))
        async with stdin, stdout, trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_signal, signals, nursery.cancel_scope)
            await serve_lines(server, stdin, stdout)
            nursery.cancel_scope.cancel()
    return 0


def configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


def print_startup_failure(message: str) -> None:
    sys.stdout.buffer.write(encode_line(startup_failure(message)))
    sys.stdout.buffer.flush()


def run_serve(manifest: Path | None) -> int:
    """Run `sonde serve --json`: 0 after a clean stop, 2 when the manifest or the agent config
    (whose ``scrubPatterns`` must apply) is wrong."""
    configure_logging()
    registry = load_packs()
    try:
        names = select_tools(registry, manifest, Path.cwd())
        config = load_config()
    except (ManifestError, ConfigError) as exc:
        print_startup_failure(str(exc))
        return 2
    try:
        return trio.run(
            serve_stdio, create_tool_server(registry, names, Scrubber.from_config(config), config)
        )
    except KeyboardInterrupt:  # SIGINT before the signal receiver was installed
        return 0
