"""`sonde up`: a hub with its embedded store plus one agent for this machine.

The hub and the local agent run in one trio nursery. The agent is enrolled
automatically on first start (its identity lives in the data directory, not
in ~/.sonde, so a quick start never touches a real enrollment), and the
quick-start API key is kept in ``quickstart.json`` (0600) so every run can
print the same connection line. It serves only a data directory it made
(`sonde.quickstart_dir`): never a real hub's.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from sonde.agent.identity import active_packs
from sonde.agent.main import ROOT_MESSAGE, agent_main
from sonde.hub.attestation import accept_held
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub
from sonde.hub.logs import say
from sonde.hub.serve import serve_hub
from sonde.packs.registry import load_packs
from sonde.quickstart_agent import local_agent
from sonde.quickstart_dir import STATE_FILE, HubNotMadeByUp, quickstart_key
from sonde.secret_input import may_show_secret
from sonde.stderr_lines import say_line

# the local agent's identity is the quick start's own: restarting it enrolls the agent again
LOCAL_AGENT_REENROLL_HINT = "restart `sonde up`, which enrolls its local agent again"

log = logging.getLogger(__name__)
UP_LOGGER = "sonde.up"  # what `sonde up` says itself, in a json log


def shown_key(key: str, state_path: Path, log_format: str) -> tuple[str, str]:
    """The key line and the bearer for `announce`: the key itself on a terminal; otherwise (a
    log file, a supervisor, `--log-format json`) where it is kept, as the hub does with its
    first admin key, so it never lands in a log."""
    if may_show_secret(log_format):
        return key, key
    return f"in {state_path} (printed only when stderr is a terminal and logs are text)", "<the API key>"


def announce(url: str, key: str, bearer: str, agent: str, log_format: str, key_file: Path) -> None:
    """Say where to connect: a banner for a person; with json logs one record, the key left in
    ``key_file`` (`shown_key`)."""
    connect = f'claude mcp add --transport http sonde {url}/mcp --header "Authorization: Bearer {bearer}"'
    if log_format == "json":  # one record, as every line of a json log is
        say(
            "sonde up: ready",
            log_format,
            logger=UP_LOGGER,
            url=url,
            mcpUrl=f"{url}/mcp",
            keyFile=str(key_file),
            agent=agent,
            connect=connect,
        )
        return
    say_line(
        f"""
  Sonde is up.
    MCP endpoint : {url}/mcp
    API key      : {key}
    local agent  : {agent}
    dashboard    : {url}/  (sign in with the API key)

  Connect Claude Code:
    {connect}

  Press Ctrl-C to stop.
"""
    )


async def accept_local_agent(hub: Hub, agent_id: str) -> None:
    """Accept the local agent's changed attestation (a pack that appeared, a code change).

    It runs from this very installation, in this process, next to the hub: its
    code changing is the hub's own code changing, so holding it would protect
    nothing and only leave the quick start's one agent unusable."""
    record = hub.fleet.find(agent_id)
    if record is None or record.pending_attestation is None:
        return
    await accept_held(hub, record, "quickstart")
    log.warning(
        "the local agent %s changed (its code or its packs, same version): accepted the changed "
        "attestation of the local agent, as it runs inside this hub",
        record.name,
    )


async def run_up(config: HubConfig, key: str) -> None:
    """Serve the hub and its local agent until SIGTERM, SIGINT or SIGHUP (`sonde up` runs in a
    terminal: a hangup stops it as Ctrl-C does). Signals are received until everything has
    stopped: a second one, while the hub drains, is said and changes nothing, where trio's
    default would raise KeyboardInterrupt into the draining hub (a traceback, audit entries lost).
    """
    stop_requested = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as watcher:
            watcher.start_soon(note_stop_signals, signals, stop_requested, config.log_format)
            await serve_up(config, key, stop_requested)
            watcher.cancel_scope.cancel()


async def note_stop_signals(signals: AsyncIterator[int], stop_requested: trio.Event, log_format: str) -> None:
    """Set ``stop_requested`` at the first signal; say so at every later one."""
    async for _ in signals:
        if stop_requested.is_set():
            say(
                "sonde up: already shutting down: it exits once the hub has stopped",
                log_format,
                logger=UP_LOGGER,
                level=logging.WARNING,
            )
            continue
        say("sonde up: shutting down", log_format, logger=UP_LOGGER)
        stop_requested.set()


async def serve_up(config: HubConfig, key: str, stop_requested: trio.Event) -> None:
    """The hub and the local agent, until ``stop_requested``: then the agent stops, then the hub."""
    shutdown = trio.Event()
    hub_ready, hub_started = trio.open_memory_channel[Hub](1)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve_hub(
                config, shutdown=shutdown, hub_ready=hub_ready, task_status=task_status
            )
        )
        hub = await hub_started.receive()
        agent = await trio.to_thread.run_sync(local_agent, config.data_dir, url)
        hub.local_agent_id = agent.agent_id  # its changes are accepted here, not held for an admin
        registry = active_packs(load_packs(), agent.enabled_packs)
        daemon = await nursery.start(
            lambda task_status: agent_main(
                agent,
                registry,
                handle_signals=False,
                reenroll_hint=LOCAL_AGENT_REENROLL_HINT,
                task_status=task_status,
            )
        )
        if agent.agent_id is not None:  # registered and acknowledged: the hub has compared it
            await accept_local_agent(hub, agent.agent_id)
        state = config.data_dir / STATE_FILE
        shown, bearer = shown_key(key, state, config.log_format)
        announce(url, shown, bearer, agent.name or "?", config.log_format, state)
        await stop_requested.wait()
        await daemon.stop("quick start stopping")
        shutdown.set()


def up(config: HubConfig, allow_root: bool) -> int:
    if os.geteuid() == 0 and not allow_root:
        print(f"sonde up: {ROOT_MESSAGE}", file=sys.stderr)
        return 2
    from sonde.hub.data_dir import claim_data_dir
    from sonde.hub.logs import configure_logging
    from sonde.hub.run import check_can_listen, stop_reason

    configure_logging(config.log_format, config.log_level)
    started = time.monotonic()
    try:
        check_can_listen(config)  # before the data directory and its key are made
        with claim_data_dir(config.data_dir):  # before the quick start's key is written there
            key = quickstart_key(config.data_dir)  # refuses a hub it did not make
            try:
                trio.run(run_up, config, key)
            except KeyboardInterrupt:  # Ctrl-C before its receiver opened or after it closed: stopped
                pass
        # Stopped, everything written and closed: as `sonde hub` does, keep the interpreter's last
        # collection from walking all the objects left behind (about 1 s of every stop, measured)
        gc.freeze()
    except HubNotMadeByUp as exc:
        say(f"sonde up: {exc}", config.log_format, logger=UP_LOGGER, level=logging.ERROR)
        return 1
    except Exception as exc:  # the process boundary
        reason = stop_reason(exc, config)
        say(
            f"sonde up: stopped after {time.monotonic() - started:.0f}s: {reason}",
            config.log_format,
            logger=UP_LOGGER,
            level=logging.ERROR,
        )
        return 1
    return 0
