"""`sonde mcp-bridge` as a process: settings, file descriptors, signals, exit code.

stdout is the JSON-RPC channel and nothing else may touch it: the bridge
keeps private duplicates of fds 0 and 1 for its own lines and points fd 1
(and ``sys.stdout``) at stderr, so a stray print anywhere lands in the
diagnostics (`sonde.stdio.claim_stdio`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator

import trio

from sonde.bridge.proxy import bridge_stdio
from sonde.bridge.settings import KEY_ENV, BridgeSettings, NotConfigured, resolve_settings
from sonde.interrupts import EXIT_INTERRUPTED, noting_signals
from sonde.stderr_lines import QueuedStderr
from sonde.stdio import claim_stdio

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_NOT_CONFIGURED = 1
EXIT_USAGE = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
ARGV_KEY_WARNING = (
    "--api-key puts the API key on the command line, where every local user can read it (ps, "
    "/proc/PID/cmdline) while the bridge runs; run `sonde login --hub URL` once instead (it asks for "
    f"the key), or set {KEY_ENV} in the MCP client's env config for this server, and drop --api-key"
)


def configure_logging(level: str) -> None:
    """Log lines to stderr, written by a thread (`QueuedStderr`): a client that never reads
    stderr cannot stop the bridge's answers."""
    handler = QueuedStderr(sys.stderr.fileno())
    handler.setFormatter(logging.Formatter("sonde mcp-bridge: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("sonde").setLevel(level.upper())


def run_mcp_bridge(hub: str | None, api_key: str | None, log_level: str = "INFO") -> int:
    """Run the bridge on this process's stdin/stdout; return the exit code."""
    from sonde.log_levels import checked_log_level

    try:
        level = checked_log_level(log_level)
    except ValueError as exc:
        print(f"sonde mcp-bridge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(level)
    if api_key is not None:  # on stderr: stdout is the MCP stream
        print(f"sonde mcp-bridge: warning: {ARGV_KEY_WARNING}", file=sys.stderr)
    try:
        settings = resolve_settings(hub, api_key, os.environ)
    except NotConfigured as exc:
        print(f"sonde mcp-bridge: {exc}", file=sys.stderr)
        return EXIT_NOT_CONFIGURED
    except ValueError as exc:  # a malformed hub URL or API key, as enroll and login say them
        print(f"sonde mcp-bridge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stdin_fd, stdout_fd = claim_stdio()
    log.info("bridging MCP over stdio to %s", settings.mcp_url)
    return trio.run(serve_stdio, settings, stdin_fd, stdout_fd)


async def serve_stdio(settings: BridgeSettings, stdin_fd: int, stdout_fd: int) -> int:
    """Bridge until stdin ends (exit 0), SIGTERM or SIGHUP (0; its client's terminal or
    supervisor went: the hub's session is ended, not left to time out) or SIGINT (130).

    Signals are received until the bridge has ended: one more while it ends the hub's session
    is said and changes nothing. Before, the first one ended the receiving, and trio hands a
    signal that comes after that to its default action: a second SIGTERM killed the bridge
    in the middle of its DELETE (exit 143).
    """
    stopped_by: int | None = None
    bridging = trio.CancelScope()

    def stop(signum: int) -> None:
        nonlocal stopped_by
        name = signal.Signals(signum).name
        if stopped_by is None:
            stopped_by = signum
            log.info("%s: ending the session", name)
            bridging.cancel()
        else:
            log.info("%s: already ending the session", name)

    async def stop_on_signal(signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            stop(signum)

    taken_before: list[int] = []  # in the instant before the receiver (`noting_signals`)
    with noting_signals(STOP_SIGNALS, taken_before), trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        for signum in taken_before:
            stop(signum)
        async with trio.open_nursery() as watcher:
            watcher.start_soon(stop_on_signal, signals)
            with bridging:
                async with (
                    trio.lowlevel.FdStream(stdin_fd) as stdin,
                    trio.lowlevel.FdStream(stdout_fd) as stdout,
                ):
                    await bridge_stdio(settings, stdin, stdout)
            watcher.cancel_scope.cancel()
    return EXIT_INTERRUPTED if stopped_by == signal.SIGINT else EXIT_OK
