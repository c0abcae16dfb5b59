"""The words for a message the bridge could not get through to the hub, as the client reads them.

Each names the hub's URL and what went wrong in terms a person can act on:
a hub that cannot be reached, one that took the request and then said
nothing, one that closed the connection before it answered, one whose answer
is not MCP. Only a failure to connect (nothing was sent) says "cannot reach".
"""

from __future__ import annotations

import httpx2

from sonde.bridge.hub_session import (
    DROPPED,
    AnswerBrokeOff,
    ConnectionDropped,
    HubAnswerError,
    describe_status,
)
from sonde.bridge.hub_watch import HubUnresponsive
from sonde.bridge.sse import SSEError
from sonde.connect_failures import describe_failure
from sonde.echo import echoed
from sonde.not_a_hub import (
    GATEWAY_STATUSES,
    described_answer,
    from_a_gateway,
    hubs_error_message,
    not_a_hub_url,
)

ERROR_BODY_PREVIEW_BYTES = 4096

# after a 404 (the session expired), 400 (none was opened) or 401 (a new key), a new session was needed
REOPENING_FAILED = {
    404: "the Sonde hub answered HTTP 404 Not Found: the session expired and re-initializing failed",
    400: (
        "the Sonde hub answered HTTP 400 Bad Request: there is no session (the client's initialize "
        "failed) and opening one now failed too; see the bridge's log"
    ),
    401: (
        "the Sonde hub refused the old API key, and opening a session with the new one from "
        "`sonde login` failed; see the bridge's log"
    ),
}


def describe_post_failure(exc: BaseException, url: str, silence_s: float) -> str:
    """Why the POST to ``url`` of a message failed with ``exc`` (one of `TRANSPORT_ERRORS`, or
    `HubUnresponsive`).

    ``silence_s``: how long the hub could say nothing before the bridge gave up.
    """
    if isinstance(exc, HubUnresponsive):
        return str(exc)
    if isinstance(exc, httpx2.ReadTimeout):
        return (
            f"the Sonde hub at {url} sent nothing for {silence_s:g} s: it took the request "
            "but does not answer (stopped, or overloaded?)"
        )
    if isinstance(exc, AnswerBrokeOff):
        return (
            f"the Sonde hub at {url} closed the connection before answering in full (restarting, or it "
            f"crashed?), and picking its answer up again failed ({exc}); the request may or may not "
            "have run; try again"
        )
    if isinstance(exc, HubAnswerError | SSEError):
        return f"bad answer from the Sonde hub at {url}: {exc}"
    if isinstance(exc, (ConnectionDropped, *DROPPED)):
        return (
            f"the Sonde hub at {url} closed the connection before answering (restarting, or it crashed?); "
            "the request may or may not have run; try again"
        )
    if not isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return f"the request to the Sonde hub at {url} failed: {describe_failure(exc)}"
    return f"cannot reach the Sonde hub at {url}: {describe_failure(exc)}"


async def describe_refusal(response: httpx2.Response, base_url: str) -> str:
    """Why the hub answered a POST with a non-2xx ``response``: its own error message (JSON-RPC or
    REST). An answer without one is another server's: a 404 says ``base_url`` is no hub's base URL,
    anything else what answered (a proxy's HTML error page, say), never the page itself."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= ERROR_BODY_PREVIEW_BYTES:
            break
    status = describe_status(response)
    message = hubs_error_message(body[:ERROR_BODY_PREVIEW_BYTES])
    if message:
        return f"the Sonde hub answered {status}: {message}"
    if response.status_code == 404:
        return not_a_hub_url(base_url, f"POST {response.request.url}")
    content_type = response.headers.get("content-type")
    text = body.decode("utf-8", errors="replace").strip()
    if (content_type or "").split(";")[0].strip().lower() == "text/plain" and text:
        return f"the Sonde hub answered {status}: {echoed(text)}"  # quoted: not the hub's words
    answered = described_answer(content_type, body, response.headers.get("server"))
    if response.status_code in GATEWAY_STATUSES:  # a proxy's own page: the hub behind it down or slow
        answered = from_a_gateway(answered)
    return f"the Sonde hub answered {status}, with {answered}"
