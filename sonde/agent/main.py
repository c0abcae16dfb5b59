"""`sonde start`'s process: check how it was started, set up logging, run `AgentDaemon`
until a signal or a fatal reject, and turn that into the exit code.

Exit codes: 0 after SIGTERM/SIGINT, 1 when not enrolled, 2 when run as root without
``--allow-root``, given a bad log level or a bad config file, 3 when the hub no longer knows
this agent, 4 when another `sonde start` runs with this identity (`sonde.agent.identity_lock`).
SIGHUP is logged and ignored.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

from sonde.agent.arenas import cap_malloc_arenas
from sonde.agent.config import AgentConfig, ConfigError, load_config
from sonde.agent.connection import Connector, connect_websocket
from sonde.agent.daemon import BACKOFF_MAX_S, NOT_ENROLLED_MESSAGE, AgentDaemon
from sonde.agent.exit_codes import (
    EXIT_ENROLLED_AGAIN,
    EXIT_NOT_ENROLLED,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_ROOT,
    EXIT_USAGE,
)
from sonde.agent.identity import active_packs
from sonde.agent.pack_settings import unknown_settings
from sonde.interrupts import noting_signals
from sonde.log_levels import TextFormatter
from sonde.packs.registry import PackRegistry, load_packs
from sonde.stderr_lines import QueuedStderr

log = logging.getLogger(__name__)

ROOT_MESSAGE = "refusing to run as root: run the agent as an unprivileged user (or pass --allow-root)"


async def stop_on_signal(daemon: AgentDaemon, *, task_status: trio.TaskStatus[None]) -> None:
    """At the first SIGTERM or SIGINT, stop ``daemon`` gracefully (`AgentDaemon.stop`); say
    every later one, until cancelled once the agent has stopped.

    SIGHUP is said and ignored: the agent has nothing to reload, and dying of it would
    be a clean exit to systemd's Restart=on-failure, so a stray "reload" would stop it for good.

    Signals are received until the agent has stopped, and the stop runs beside the receiving,
    so a signal is read as it comes. Before, the receiving waited on the stop and then ended,
    and trio hands a signal still unread then to its default action: a second SIGTERM sent
    while the close waited on the hub (up to 5 s) killed the stopping agent (exit 143).
    """
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        task_status.started()
        stopped = False
        async with trio.open_nursery() as stopping:

            def take(signum: int) -> None:
                nonlocal stopped
                name = signal.Signals(signum).name
                if signum == signal.SIGHUP:
                    log.info("SIGHUP received: ignored (the agent has nothing to reload; SIGTERM stops it)")
                elif stopped:
                    log.warning("%s received: %s", name, ALREADY_STOPPING)
                else:
                    stopped = True
                    log.info("%s received: stopping", name)
                    stopping.start_soon(daemon.stop, "agent stopping")

            while _NOTED:
                take(_NOTED.pop(0))
            async for signum in signals:
                take(signum)


ALREADY_STOPPING = "already stopping: the agent exits once its link to the hub is closed"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_NOTED: list[int] = []  # signals taken while no receiver was open (`stop_on_signal`)


async def agent_main(
    config: AgentConfig,
    registry: PackRegistry,
    *,
    connect: Connector = connect_websocket,
    rng: random.Random | None = None,
    max_delay_s: float = BACKOFF_MAX_S,
    handle_signals: bool = True,
    reenroll_hint: str | None = None,
    enrolled_again: Callable[[], AgentConfig | None] = lambda: None,
    task_status: trio.TaskStatus[AgentDaemon] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Run the agent until a signal (returns 0) or a fatal reject (returns 3).

    ``config`` must be enrolled (`ValueError` otherwise). ``task_status`` is
    reported, with the `AgentDaemon`, once the hub first acknowledges; its
    `AgentDaemon.stop` ends the agent gracefully (returns 0). ``reenroll_hint``
    says what to do when the hub no longer knows this agent (default: the `sonde enroll`
    command that enrolls it again under its name; for the agent inside `sonde up`,
    restart that). ``enrolled_again`` gives this machine's config when it holds another
    identity now (then `EXIT_ENROLLED_AGAIN`). ``connect``, ``rng`` and ``max_delay_s`` exist
    for tests.
    """
    daemon = AgentDaemon(
        config,
        registry,
        connect=connect,
        rng=rng or random.Random(),
        max_delay_s=max_delay_s,
        reenroll_hint=reenroll_hint,
        enrolled_again=enrolled_again,
    )
    exit_code = EXIT_OK
    async with trio.open_nursery() as nursery:
        if handle_signals:
            await nursery.start(stop_on_signal, daemon)
        exit_code = await daemon.run(task_status)
        nursery.cancel_scope.cancel()
    if exit_code != EXIT_ENROLLED_AGAIN:  # else it goes on, with the new identity
        log.info("agent stopped")
    return exit_code


def configure_logging(level: str | int = "INFO") -> None:
    """Log to stderr at ``level`` (a name like "DEBUG" or a number), through a thread
    (`QueuedStderr`): a stderr read late (a terminal paused with Ctrl-S) stops no probe."""
    handler = QueuedStderr(sys.stderr.fileno())
    handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper() if isinstance(level, str) else level, handlers=[handler])


def run_agent(
    config: AgentConfig,
    *,
    allow_root: bool = False,
    log_level: str | int = "INFO",
    registry: PackRegistry | None = None,
    config_file: Path | None = None,
) -> int:
    """The `sonde start` entry point: checks, then runs the agent; returns the exit code.

    2 when run as root without ``allow_root`` or given a bad ``log_level``, 1 when not
    enrolled, 3 when the hub no longer knows this agent, 0 after SIGTERM/SIGINT. When the hub
    ends the identity because ``config_file`` now holds another (`sonde enroll --replace` while
    the agent ran), the agent goes on with that one.
    """
    if isinstance(log_level, str):
        from sonde.log_levels import checked_log_level

        try:
            log_level = checked_log_level(log_level)
        except ValueError as exc:
            print(f"sonde start: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if os.geteuid() == 0 and not allow_root:
        print(f"sonde start: {ROOT_MESSAGE}", file=sys.stderr)
        return EXIT_ROOT
    if not config.enrolled:
        print(f"sonde start: {NOT_ENROLLED_MESSAGE}", file=sys.stderr)
        return EXIT_NOT_ENROLLED
    configure_logging(log_level)
    cap_malloc_arenas()  # before any probe's worker thread
    # `stop_on_signal` takes a signal noted while the agent goes on with a new identity.
    with noting_signals(STOP_SIGNALS, _NOTED):
        return _run_until_stopped(config, config_file, registry)


def _run_until_stopped(config: AgentConfig, config_file: Path | None, registry: PackRegistry | None) -> int:
    for unknown in unknown_settings(config.packs, load_packs()):
        log.warning("%s: ignored", unknown)
    while True:
        packs = registry if registry is not None else active_packs(load_packs(), config.enabled_packs)
        if not packs.packs:
            log.warning("no packs are enabled or detected: this agent has no probes to offer")
        again = partial(enrolled_again, config_file, config.agent_id)
        try:
            exit_code = trio.run(partial(agent_main, config, packs, enrolled_again=again))
        except KeyboardInterrupt:  # Ctrl-C before the signal handler was installed
            return EXIT_OK
        if exit_code != EXIT_ENROLLED_AGAIN:
            return exit_code
        fresh = again()
        if fresh is None:  # changed again since the daemon read it
            return EXIT_REJECTED
        config = fresh


def enrolled_again(config_file: Path | None, agent_id: str | None) -> AgentConfig | None:
    """The config in ``config_file`` when it is enrolled as another agent than ``agent_id``."""
    if config_file is None:
        return None
    try:
        fresh = load_config(config_file)
    except ConfigError:
        return None  # being written, or broken: the agent stops as it would have
    return fresh if fresh is not None and fresh.enrolled and fresh.agent_id != agent_id else None
