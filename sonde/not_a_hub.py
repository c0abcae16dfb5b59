"""What `sonde enroll` and `sonde login` say of a URL under which no hub answers: one message for
one mistake (a path after the hub's address, another server), whichever command met it."""

from __future__ import annotations


def not_a_hub_url(hub_url: str, request: str) -> str:
    """Why ``hub_url`` is refused when ``request`` (``"POST https://..."``) under it answered 404:
    the hub answers none of its own routes with a 404, so the URL leads elsewhere."""
    return (
        f"{hub_url} is not a Sonde hub's base URL: {request} answered 404 Not Found. Give the URL "
        "`sonde hub` prints as 'listening on' (http(s)://HOST:PORT, with no path after it)"
    )
