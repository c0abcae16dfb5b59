"""`sonde serve --json`: a thin trio shell around the serve line protocol.

How it works: one reader task splits stdin into lines (`LineSplitter`,
1 MiB cap) and decodes each (`parse_request`). What runs no probe (a bad
line, tools/list, an unknown tool) is answered at once. A tools/call of an
exposed tool goes into a bounded queue (`MAX_CALLS_WAITING`) that
`MAX_CALLS_RUNNING` call runners take from in turn; a call finding the queue
full is answered at once with a busy error, so the reader never waits for a
probe. Every answer goes through a bounded channel to the single writer task
(the ready line first), so lines never interleave.

On end of input the server waits for the calls in flight, writes their
answers and exits 0. SIGTERM or SIGINT cancels everything and exits 0.
stdout carries protocol lines only: `claim_stdio` points fd 1 at stderr
before any pack is loaded, so a probe's print goes to the log.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from sonde.agent.config import AgentConfig, ConfigError, config_path, load_config
from sonde.agent.manifest import ManifestError, select_tools
from sonde.agent.pack_settings import unknown_settings
from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry, load_packs
from sonde.protocol.lines import LineSplitter, LineTooLong
from sonde.protocol.serve_lines import (
    LINE_TOO_LONG,
    MAX_REQUEST_LINE_BYTES,
    BadRequest,
    CallToolRequest,
    ErrorResponse,
    ListToolsRequest,
    ReadyLine,
    ServeRequest,
    SuccessResponse,
    ToolDescription,
    encode_line,
    error_response,
    parse_request,
    server_busy_response,
    startup_failure,
    tool_call_response,
    tools_list_response,
    unknown_tool_response,
)
from sonde.stderr_lines import QueuedStderr
from sonde.stdio import claim_stdio

log = logging.getLogger(__name__)
MAX_CALLS_RUNNING = 16  # probes running at once
MAX_CALLS_WAITING = 64  # tool calls queued for a runner; each holds its input, from a line under 1 MiB
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
    described = registry.described()  # a pack's probe modules are imported when one of its probes runs
    for name in names:
        probe = described.get(name)
        if probe is not None:
            tools.append(
                ToolDescription(name=name, description=probe.description, input_schema=probe.params_schema)
            )
    scrubber = scrubber or Scrubber()
    # with no config file, a refusal names the one that would be read (`SONDE_HOME`'s, or ~/.sonde's)
    settings = (
        config.probe_settings() if config is not None else ProbeSettings(config_file=str(config_path()))
    )
    ctx = ProbeContext(settings=settings, redact=scrubber.redacted)
    return ToolServer(registry, tuple(tools), ctx=ctx, scrubber=scrubber)


@dataclass
class Session:
    """The reader's side of one run of the line protocol."""

    server: ToolServer
    answers: trio.MemorySendChannel[bytes]
    calls: trio.MemorySendChannel[CallToolRequest]  # to the call runners; holds MAX_CALLS_WAITING

    async def read_requests(self, requests: trio.abc.ReceiveStream) -> None:
        """Take every line of ``requests`` until end of input."""
        splitter = LineSplitter(MAX_REQUEST_LINE_BYTES)
        while chunk := await requests.receive_some(READ_CHUNK_BYTES):
            for event in splitter.feed(chunk):
                await self.take_line(event)
        for event in splitter.end():
            await self.take_line(event)

    async def take_line(self, event: bytes | LineTooLong) -> None:
        """Answer what runs no probe now; queue a call, or refuse it when the queue is full."""
        if isinstance(event, LineTooLong):
            await self.answers.send(encode_line(error_response(None, LINE_TOO_LONG)))
            return
        try:
            request = parse_request(event)
        except BadRequest as exc:
            await self.answers.send(encode_line(error_response(exc.request_id, exc.message)))
            return
        if not (isinstance(request, CallToolRequest) and self.server.exposes(request.name)):
            await self.answers.send(encode_line(await self.server.answer(request)))
            return
        try:
            self.calls.send_nowait(request)
        except trio.WouldBlock:
            busy = server_busy_response(request.id, MAX_CALLS_RUNNING, MAX_CALLS_WAITING)
            await self.answers.send(encode_line(busy))


async def run_calls(
    server: ToolServer,
    calls: trio.MemoryReceiveChannel[CallToolRequest],
    answers: trio.MemorySendChannel[bytes],
) -> None:
    """One of the `MAX_CALLS_RUNNING` call runners: answer queued calls, in turn, until the queue closes."""
    async with calls, answers:
        async for request in calls:
            await answers.send(encode_line(await server.call_tool(request)))


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

    Returns once every answer is written (or ``out`` broke, even before the ready line).
    """
    answers, lines = trio.open_memory_channel[bytes](RESPONSE_QUEUE_LINES)
    calls, queued_calls = trio.open_memory_channel[CallToolRequest](MAX_CALLS_WAITING)
    answers.send_nowait(encode_line(ReadyLine()))  # the writer's first line
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_lines, lines, out, nursery.cancel_scope)
        async with answers, calls:
            async with queued_calls:
                for _ in range(MAX_CALLS_RUNNING):
                    nursery.start_soon(run_calls, server, queued_calls.clone(), answers.clone())
            await Session(server, answers, calls).read_requests(requests)


async def cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        log.warning("received %s; stopping", signal.Signals(signum).name)
        scope.cancel()
        return


async def serve_stdio(server: ToolServer, stdin_fd: int, stdout_fd: int) -> int:
    """Serve on ``stdin_fd``/``stdout_fd`` (closed on return) until end of input or
    SIGTERM/SIGINT/SIGHUP (its client went); returns 0."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        stdin, stdout = trio.lowlevel.FdStream(stdin_fd), trio.lowlevel.FdStream(stdout_fd)
        async with stdin, stdout, trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_signal, signals, nursery.cancel_scope)
            await serve_lines(server, stdin, stdout)
            nursery.cancel_scope.cancel()
    return 0


def configure_logging() -> None:
    """Warnings to stderr through a thread (`QueuedStderr`): an MCP client that never reads
    stderr cannot stop the answers."""
    handler = QueuedStderr(sys.stderr.fileno())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])


def print_startup_failure(stdout_fd: int, message: str) -> None:
    with contextlib.suppress(BrokenPipeError), open(stdout_fd, "wb") as stdout:
        stdout.write(encode_line(startup_failure(message)))


def run_serve(manifest: Path | None) -> int:
    """Run `sonde serve --json`: 0 after a clean stop, 2 when the manifest or the agent config
    (whose ``scrubPatterns`` must apply) is wrong."""
    configure_logging()
    stdin_fd, stdout_fd = claim_stdio()  # before any pack's code runs
    registry = load_packs()
    try:
        names = select_tools(registry, manifest, Path.cwd())
        config = load_config()
    except (ManifestError, ConfigError) as exc:
        print_startup_failure(stdout_fd, str(exc))
        return 2
    for unknown in unknown_settings(config.packs if config is not None else {}, registry):
        log.warning("%s: ignored", unknown)
    server = create_tool_server(registry, names, Scrubber.from_config(config), config)
    try:
        return trio.run(serve_stdio, server, stdin_fd, stdout_fd)
    except KeyboardInterrupt:  # SIGINT before the signal receiver was installed
        return 0
