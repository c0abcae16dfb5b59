"""The words for a message the bridge could not get through to the hub, as the client reads them.

Each names the hub's URL and what went wrong in terms a person can act on:
a hub that cannot be reached, one that took the request and then said
nothing, one that closed the connection before it answered, one whose answer
is not MCP. Only a failure to connect (nothing was sent) says "cannot reach".
"""

from __future__ import annotations

import httpx2

from sonde.bridge.hub_session import DROPPED, ConnectionDropped, HubAnswerError
from sonde.bridge.sse import SSEError
from sonde.connect_failures import describe_failure

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
    """Why the POST to ``url`` of a message failed with ``exc`` (one of `TRANSPORT_ERRORS`).

    ``silence_s``: how long the hub could say nothing before the bridge gave up.
    """
    if isinstance(exc, httpx2.ReadTimeout):
        return (
            f"the Sonde hub at {url} sent nothing for {silence_s:g} s: it took the request "
            "but does not answer (stopped, or overloaded?)"
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
