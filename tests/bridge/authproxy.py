"""A reverse proxy that adds ``Authorization: Bearer <key>`` and changes nothing else.

The conformance suite cannot send headers of its own, and the hub's ``/mcp``
wants an API key: this stands where an authenticating gateway would. Host
and Origin pass through unchanged (the hub is started with ``--allowed-host``
for the proxy's address), so the suite's DNS-rebinding checks still reach the
hub's own checks. Bodies stream both ways, so SSE stays incremental.
"""

from __future__ import annotations

from typing import Any

import httpx2
import trio

from tests.bridge.fakehub import Http, lifespan, read_body, rpc_error, wait_disconnect

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
SET_BY_THE_PROXY = {"date", "server"}


class AuthProxy:
    """The ASGI app; ``client`` is the caller's to close. Point ``upstream`` and ``key`` before use."""

    def __init__(self, client: httpx2.AsyncClient, upstream: str = "", key: str = "") -> None:
        self.client = client
        self.upstream = upstream.rstrip("/")
        self.key = key
        self.requests = 0
        self.cuts_left = 0  # POST event streams to break off after their first event
        self.cut = 0
        self.keep_host = True  # False: the upstream sees its own Host, as behind a gateway that rewrites it
        self.forgets_streams = False  # True: a GET resuming a stream is answered 404, as by a hub restarted
        self.forgotten = 0  # resumes so answered

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        self.requests += 1
        dropped = HOP_BY_HOP if self.keep_host else HOP_BY_HOP | {"host"}
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in dropped]
        if not any(name.lower() == "authorization" for name, _ in headers):
            headers.append(("authorization", f"Bearer {self.key}"))
        body = await read_body(receive)
        if self.forgets_streams and any(name.lower() == "last-event-id" for name, _ in headers):
            self.forgotten += 1
            await Http(send, "\n", 0).json(404, rpc_error(None, -32600, "Session not found"))
            return
        query = f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        url = f"{self.upstream}{scope['path']}{query}"
        async with trio.open_nursery() as nursery:

            async def stop_when_the_client_leaves() -> None:
                await wait_disconnect(receive)
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_when_the_client_leaves)
            await self.relay(scope["method"], url, headers, body, send)
            nursery.cancel_scope.cancel()

    async def relay(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes, send: Any
    ) -> None:
        async with self.client.stream(method, url, headers=headers, content=body) as response:
            passed = [
                (k.encode(), v.encode())
                for k, v in response.headers.multi_items()
                if k.lower() not in HOP_BY_HOP | SET_BY_THE_PROXY
            ]
            await send({"type": "http.response.start", "status": response.status_code, "headers": passed})
            cutting = (
                self.cuts_left > 0
                and method == "POST"
                and response.headers.get("content-type", "").startswith("text/event-stream")
            )
            if cutting:
                self.cuts_left -= 1
            sent = b""
            async for chunk in response.aiter_raw():
                end = first_event_end(sent + chunk) if cutting else None
                if end is not None:  # the first event is complete: send it, then drop the connection
                    await send(
                        {
                            "type": "http.response.body",
                            "body": (sent + chunk)[len(sent) : end],
                            "more_body": True,
                        }
                    )
                    self.cut += 1
                    raise StreamCut("the proxy broke the event stream off")
                sent += chunk if cutting else b""
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


class StreamCut(Exception):
    """Raised mid-body on purpose: the server drops the connection with the answer unfinished."""


def first_event_end(data: bytes) -> int | None:
    """Where the first SSE event in ``data`` ends (after its blank line), if it is complete."""
    ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r") if (i := data.find(sep)) >= 0]
    return min(ends) if ends else None
