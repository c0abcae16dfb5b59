"""Debian's headless Chromium, driven over the DevTools protocol with trio-websocket.

Enough for the dashboard's tests: open a page, run script in it, wait until it shows
something, and keep what the browser complained about (exceptions, Content-Security-
Policy refusals). Chromium comes from Debian's package (`make test` installs it under
CI); no browser is ever downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
import trio_websocket

from tests.conftest import require

CHROMIUM = "chromium"
# As the machine's notes advise: without the background-networking flags Chromium keeps
# dialling Google's hosts through a closed network.
FLAGS = (
    "--headless",
    "--no-sandbox",  # tests may run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_TIMEOUT_S = 30.0


def chromium_path() -> str:
    path = shutil.which(CHROMIUM)
    require(
        path is not None, "Debian's chromium package (apt-get install chromium) for the dashboard's tests"
    )
    assert path is not None
    return path


@contextmanager
def running_chromium() -> Iterator[str]:
    """A headless Chromium with an empty profile; yields its DevTools HTTP address."""
    profile = Path(tempfile.mkdtemp(prefix="sonde-chromium-"))
    argv = [chromium_path(), *FLAGS, f"--user-data-dir={profile}", "about:blank"]
    env = {**os.environ, "TMPDIR": str(profile)}  # its singleton socket's directory goes with the profile
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        port_file = profile / "DevToolsActivePort"  # Chromium writes its port here once listening
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, f"chromium exited {proc.returncode} before listening"
            assert time.monotonic() < deadline, "chromium did not start listening in time"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text().split()[0]}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(profile, ignore_errors=True)


class Page:
    """One tab: DevTools commands in order, events kept for `complaints`."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_message(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.get_message())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise is awaited); its exception fails."""
        answer = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 15.0) -> Any:
        """Poll ``expression`` until it is truthy (one that throws, on a page still loading, is
        not yet); its value. Fails with the last value or exception after ``timeout_s``."""
        last: Any = None
        deadline = trio.current_time() + timeout_s
        while trio.current_time() < deadline:
            try:
                last = await self.evaluate(expression)
            except AssertionError as exc:
                last = exc
            else:
                if last:
                    return last
            await trio.sleep(0.05)
        raise AssertionError(f"{expression!r} not true within {timeout_s} s; last: {last}")

    def complaints(self) -> list[str]:
        """Uncaught exceptions and security refusals (a script or style the CSP blocked, say)."""
        found = []
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"]))
            elif event.get("method") == "Log.entryAdded" and params["entry"].get("source") == "security":
                found.append(params["entry"]["text"])
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(str(params.get("args")))
        return found


@asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    """A fresh tab of a fresh headless Chromium."""
    with running_chromium() as devtools:
        async with httpx.AsyncClient(base_url=devtools, timeout=10) as http:
            targets = (await http.get("/json/list")).json()
        [target] = [t for t in targets if t["type"] == "page"]
        async with trio_websocket.open_websocket_url(
            target["webSocketDebuggerUrl"], max_message_size=16 * 1024 * 1024
        ) as ws:
            page = Page(ws)
            for domain in ("Page", "Runtime", "Log"):
                await page.send(f"{domain}.enable")
            yield page
