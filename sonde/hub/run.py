"""`sonde hub` in the foreground: config from flags, signals, exit codes."""

from __future__ import annotations

import errno
import faulthandler
import gc
import logging
import signal
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from sonde.hub.audit_prune import MIN_PRUNE_AGE_S
from sonde.hub.config import HubConfig, parse_bind, split_hosts
from sonde.hub.durations import parse_duration, read_as_seconds
from sonde.hub.logs import configure_logging, say
from sonde.hub.proxies import parse_trusted_proxies
from sonde.hub.tls_files import TLSFileError, check_tls_files
from sonde.log_levels import checked_log_level

log = logging.getLogger(__name__)


def build_config(
    *,
    bind: str,
    data_dir: Path,
    tls_cert: Path | None,
    tls_key: Path | None,
    heartbeat_interval: float,
    probe_timeout: float,
    log_format: str,
    log_level: str,
    allowed_hosts: tuple[str, ...],
    audit_keep: str | None = None,
    trusted_proxies: tuple[str, ...] = (),
) -> HubConfig | str:
    """A validated HubConfig, or a message saying what is wrong."""
    try:
        host, port = parse_bind(bind)
    except ValueError as exc:
        return str(exc)
    if (tls_cert is None) != (tls_key is None):
        return "--tls-cert and --tls-key go together"
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            return (
                f"TLS file {path} does not exist" if not path.exists() else f"TLS file {path} is not a file"
            )
    if tls_cert is not None and tls_key is not None:
        try:
            check_tls_files(tls_cert, tls_key)
        except TLSFileError as exc:
            return str(exc)
    if not 0.05 <= heartbeat_interval <= 3600:
        return "--heartbeat-interval must be between 0.05 and 3600 seconds"
    if not 0.1 <= probe_timeout <= 3600:
        return "--probe-timeout must be between 0.1 and 3600 seconds"
    if log_format not in ("text", "json"):
        return "--log-format is text or json"
    try:
        level = checked_log_level(log_level)
    except ValueError as exc:
        return str(exc)
    keep_s = None
    if audit_keep is not None:
        try:
            keep_s = parse_duration(audit_keep)
        except ValueError as exc:
            return f"--audit-keep: {exc}"
        if keep_s < MIN_PRUNE_AGE_S:
            return (
                f"--audit-keep must be at least 1d (got {audit_keep}{read_as_seconds(audit_keep)}): "
                "recent rows are what an audit is for"
            )
    try:
        proxies = parse_trusted_proxies(trusted_proxies)
        extra_hosts = split_hosts(allowed_hosts)
    except ValueError as exc:
        return str(exc)
    return HubConfig(
        data_dir=data_dir,
        host=host,
        port=port,
        certfile=tls_cert,
        keyfile=tls_key,
        heartbeat_interval_s=heartbeat_interval,
        probe_timeout_s=probe_timeout,
        log_format=log_format,  # type: ignore[arg-type]
        log_level=level,
        allowed_hosts=extra_hosts,
        audit_keep_s=keep_s,
        trusted_proxies=proxies,
    )


async def run_until_signal(config: HubConfig) -> None:
    """Serve until SIGTERM or SIGINT (`serve_until_stopped`).

    Signals are received until the hub has stopped: one more while it drains is said and
    changes nothing. Before, the first one ended the receiving, so a second SIGTERM (`kill`
    again, an impatient supervisor) took its default action and ended the draining hub on the
    spot, exit 143, with the audit entries still queued lost; a second Ctrl-C raised
    KeyboardInterrupt into it. The drain is bounded all the same: hypercorn's graceful timeout.
    """
    shutdown = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as watcher:
            watcher.start_soon(watch_signals, signals, shutdown, config.log_format)
            await serve_until_stopped(config, shutdown)
            watcher.cancel_scope.cancel()


async def watch_signals(signals: AsyncIterator[int], shutdown: trio.Event, log_format: str) -> None:
    """Set ``shutdown`` at the first SIGTERM or SIGINT; say every later one.

    SIGHUP is said and ignored, as by the agent: the hub has nothing to reload, and its default
    action ended the hub on the spot (no agent told, no caller answered, the call in flight
    never audited), which systemd counts a clean exit and does not restart.
    """
    async for signum in signals:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            log.info("SIGHUP received: ignored (the hub has nothing to reload; SIGTERM stops it)")
        elif shutdown.is_set():
            say(ALREADY_STOPPING, log_format, level=logging.WARNING, signal=name)
        else:
            shutdown.set()  # first: stopping must not hang on saying so
            say("sonde hub: shutting down", log_format, signal=name)


ALREADY_STOPPING = (
    "sonde hub: already shutting down: it exits once its callers are answered and its audit log is written"
)


async def serve_until_stopped(config: HubConfig, shutdown: trio.Event) -> None:
    """The hub, from its start until ``shutdown`` is set and it has stopped; this process's
    garbage collection follows `gc_policy`, its C heap `heap_trim`."""
    from sonde.hub.core import Hub
    from sonde.hub.gc_policy import configure_gc, govern_gc
    from sonde.hub.heap_trim import govern_heap
    from sonde.hub.serve import serve_hub
    from sonde.hub.tcp_guard import CONNECTIONS

    ready_send, ready_receive = trio.open_memory_channel[Hub](1)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_hub(
                config, hub_ready=ready_send, shutdown=shutdown, task_status=task_status
            )
        )
        await ready_receive.receive()  # serving
        configure_gc()  # start-up is over: freeze what it built
        governor = trio.CancelScope()

        async def govern() -> None:
            with governor:
                async with trio.open_nursery() as governors:
                    governors.start_soon(govern_gc, CONNECTIONS)
                    governors.start_soon(govern_heap, CONNECTIONS)

        nursery.start_soon(govern)
        await shutdown.wait()
        governor.cancel()  # the hub itself shuts down gracefully


def innermost(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def run_hub(config: HubConfig) -> int:
    # SIGHUP is ignored from here on (`run_until_signal` says so once serving): its default
    # action ended a hub still starting, as it ended a running one
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    import mcp.server.lowlevel  # noqa: F401  (import first: the SDK may touch logging)

    from sonde.hub.data_dir import claim_data_dir
    from sonde.hub.open_files import raise_open_file_limit

    configure_logging(config.log_format, config.log_level)
    # A fault no Python code survives is said on stderr with every thread's stack. SQLite maps its
    # -shm file: one the kernel will not let it write (made immutable, its file system remounted
    # read-only) ends the hub with SIGBUS at the next write, which said nothing (a review).
    faulthandler.enable()
    raise_open_file_limit()
    try:
        check_can_listen(config)  # before anything is made in the data directory
        with claim_data_dir(config.data_dir):  # one hub per data directory: before it is opened
            trio.run(run_until_signal, config)
        # Stopped, with everything written and closed: keep the interpreter's last collection
        # from walking every object a large fleet left behind (5 s of a 5,000-agent hub's exit).
        gc.freeze()
    except Exception as exc:  # the process boundary: say why, exit non-zero
        say(f"sonde hub: stopped: {stop_reason(exc, config)}", config.log_format, level=logging.ERROR)
        return 1
    return 0


def check_can_listen(config: HubConfig) -> None:
    """Bind the hub's address for a moment, as hypercorn binds it (the family by the host, then
    SO_REUSEADDR), and let it go. An address in use or not this machine's fails here (OSError,
    said by `stop_reason`), before the data directory, its database and signing key are made for
    a hub that never serves. One taken in between is still said by hypercorn's own bind."""
    if config.port == 0:
        return  # any free port
    with socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((config.host, config.port))


BIND_PROBLEMS = {
    errno.EADDRINUSE: "the address is already in use (another hub, or another program, listens there)",
    errno.EADDRNOTAVAIL: "this machine has no such address",
    errno.EACCES: "permission denied (ports under 1024 need privileges)",
}


def stop_reason(exc: BaseException, config: HubConfig) -> str:
    """Why the hub stopped, for a person: a listening problem names the address and what to do."""
    from sonde.hub.core import FirstKeyNotShown
    from sonde.hub.data_dir import DataDirInUse
    from sonde.hub.db_errors import NO_SPACE_ERRNOS, DatabaseUnusable

    cause = innermost(exc)
    if isinstance(cause, DatabaseUnusable | DataDirInUse | FirstKeyNotShown):
        return str(cause)
    if (said := database_reason(cause, config.db_path)) is not None:
        return said
    if isinstance(cause, OSError) and cause.filename is not None and cause.errno in NO_SPACE_ERRNOS:
        return (
            f"cannot write {cause.filename}: the file system holding it is full ({cause.strerror}); "
            "free space on it, then start the hub again"
        )
    address = f"{config.host}:{config.port}"
    if isinstance(cause, socket.gaierror):  # from bind: the host is a name, and it does not resolve
        return (
            f"cannot listen on {address}: the host name {config.host!r} does not resolve here "
            f"({cause.strerror}); give --bind an address of this machine (or a name it resolves), "
            "e.g. 127.0.0.1:3000 or 0.0.0.0:3000"
        )
    # an error about a file names it; socket.bind's never does
    if isinstance(cause, OSError) and cause.filename is None and cause.errno in BIND_PROBLEMS:
        return (
            f"cannot listen on {address}: {BIND_PROBLEMS[cause.errno]}; choose another with --bind HOST:PORT"
        )
    return f"{type(cause).__name__}: {cause}"


def database_reason(cause: BaseException, path: Path) -> str | None:
    """A write or read of the hub's database that failed (at start: the first writes), for a
    person: the file and what to do; None for another error."""
    from sonde.hub.db_errors import database_error
    from sonde.hub.store import LOCK_WAIT_S, StoreCommitFailed

    error = cause.__cause__ if isinstance(cause, StoreCommitFailed) else cause
    if not isinstance(error, sqlite3.Error):
        return None
    explained = database_error(path, error)
    if explained is not error:
        return str(explained)
    if isinstance(cause, StoreCommitFailed) and cause.locked:
        return (
            f"cannot write the hub's database {path}: another process held its write lock past the "
            f"hub's {LOCK_WAIT_S:g} s wait ({error}; a backup, an `sqlite3` shell in a transaction); "
            "nothing was changed. Start the hub again once it is released"
        )
    return f"cannot use the hub's database {path}: {error}"
