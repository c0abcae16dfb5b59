"""Run the hub: one hypercorn (trio worker) serving the root ASGI app.

`serve_hub` is started with ``nursery.start`` and reports the URL it listens
on, so tests bind port 0 and never race.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from sonde.hub.asgi import RootApp
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub, announce_admin_key, bootstrap_admin_key, open_hub
from sonde.hub.logs import say
from sonde.hub.mcp_server import build_session_manager, close_event_streams, transport_security
from sonde.hub.proxies import ForwardedClientApp
from sonde.hub.rest import create_rest_app
from sonde.hub.tcp_guard import use_guarded_tcp_server
from sonde.hub.tls_files import expiry_problem
from sonde.hub.ws_uncompressed import decline_deflate

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

log = logging.getLogger(__name__)
LISTEN_BACKLOG = 4096


def hypercorn_config(config: HubConfig) -> HypercornConfig:
    hc = HypercornConfig()
    host = f"[{config.host}]" if ":" in config.host else config.host
    hc.bind = [f"{host}:{config.port}"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.websocket_max_message_size = config.max_frame_bytes
    hc.graceful_timeout = 5.0
    hc.keep_alive_timeout = 75.0
    # Hypercorn listens with a backlog of 100: when a fleet reconnects at once (the hub
    # restarted), connections beyond it are dropped and their SYN retried a second
    # later, and again. The kernel caps this at net.core.somaxconn (4096 by default).
    hc.backlog = LISTEN_BACKLOG
    if config.certfile:
        hc.certfile = str(config.certfile)
        hc.keyfile = str(config.keyfile) if config.keyfile else None
    return hc


def bound_url(config: HubConfig, binds: list[str]) -> str:
    """The hub's base URL from hypercorn's bound addresses (port 0 resolved)."""
    first = binds[0]
    return first if first.startswith("http") else f"{config.scheme}://{first}"


async def serve_hub(
    config: HubConfig,
    *,
    hub_ready: trio.MemorySendChannel[Hub] | None = None,
    shutdown: trio.Event | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until ``shutdown`` is set (or forever); reports the base URL when bound."""
    use_guarded_tcp_server()
    decline_deflate()
    if config.certfile is not None and (expiring := expiry_problem(config.certfile)):
        log.warning("%s", expiring)
    async with open_hub(config) as hub:
        manager = build_session_manager(hub, config.port)
        root: Any = RootApp(hub, manager, create_rest_app(hub))
        if config.trusted_proxies:  # no extra layer on any request unless asked for
            root = ForwardedClientApp(root, config.trusted_proxies)
        hc = hypercorn_config(config)
        trigger = None
        if shutdown is not None:  # agents and event streams first: see Hub.stop_when
            trigger = partial(hub.stop_when, shutdown, partial(close_event_streams, manager))
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(
                    cast("ASGIFramework", root),  # RootApp speaks ASGI in plain dicts
                    hc,
                    shutdown_trigger=trigger,
                    task_status=task_status,
                )
            )
            url = bound_url(config, binds)
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            manager.security_settings = transport_security(hub, port)
            first_key = await hub.store.write(bootstrap_admin_key)
            if first_key is not None:
                key_id, secret = first_key
                announce_admin_key(secret, config.data_dir, key_id, config.log_format)
            say(
                f"sonde hub listening on {url}  (MCP: {url}/mcp)",
                config.log_format,
                url=url,
                mcpUrl=f"{url}/mcp",
            )
            if hub_ready is not None:
                await hub_ready.send(hub)
            task_status.started(url)
