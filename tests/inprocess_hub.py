"""A real hub in the test's own process (`serve_hub`), for tests that cut one of its deadlines
short with monkeypatch first: on 127.0.0.1 port 0, stopped as the block ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from sonde.hub import serve
from sonde.hub.config import HubConfig


@asynccontextmanager
async def in_process_hub(data_dir: Path) -> AsyncIterator[str]:
    """Serve a hub on ``data_dir`` for the block; its base URL."""
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve.serve_hub(
                HubConfig(data_dir=data_dir, port=0), shutdown=shutdown, task_status=task_status
            )
        )
        yield url
        shutdown.set()
