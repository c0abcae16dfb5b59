"""A POST to ``/mcp`` that races its session's end: no error of the hub's.

The Python SDK's client, leaving a session with a call cancelled, sends
``notifications/cancelled`` and ``DELETE`` at once. The SDK's server answers the
notification 202, then finds the session's stream closed (``anyio.ClosedResourceError``):
it logged ``Error handling POST request`` with the traceback, sent a 500 after its 202
(hypercorn raised, and logged ``Error in ASGI Framework``), and raised the error again
into the hub. In a soak that was 67 lines a time, 83 % of the hub's log. Now the late 500
is dropped (`sonde.hub.mcp_answers.McpPost.send`), the error raised once the request is
answered ends it quietly (`ended_quietly`), and the SDK's line is left out of the log
(`SessionEndedFilter`): a request whose session ended is answered, and nothing was lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from sonde.hub.mcp_answers import McpPost

log = logging.getLogger(__name__)
SDK_POST_ERROR = "Error handling POST request"


class SessionEndedFilter(logging.Filter):
    """Leave out the SDK's ``Error handling POST request`` when its session had ended."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.msg == SDK_POST_ERROR and isinstance(error, anyio.ClosedResourceError))


@contextmanager
def ended_quietly(post: McpPost) -> Iterator[None]:
    """Serve ``post``: its session's stream found closed once it was answered ends it quietly."""
    try:
        yield
    except anyio.ClosedResourceError:
        if not post.answered:
            raise
        log.debug("an MCP request raced its session's end (a DELETE, say): answered, and left there")
