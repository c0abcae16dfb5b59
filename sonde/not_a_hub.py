"""What `sonde enroll` and `sonde login` say of a URL under which no hub answers: one message for
one mistake (a path after the hub's address, another server), whichever command met it, and
what answered instead when another server did (`described_answer`)."""

from __future__ import annotations

import html
import json
import re

from sonde.echo import clipped, echoed, without_secrets

GIVE_THE_HUB_URL = (
    "Give the URL `sonde hub` prints as 'listening on' (http(s)://HOST:PORT, with no path after it)"
)
TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
SNIFF_BYTES = 65536  # of a body, looked at for a title or an HTML start
KEYS_SHOWN = 5  # of a JSON object's keys, named
# a proxy's or load balancer's own failures: a page of theirs under these is no other server's
GATEWAY_STATUSES = frozenset({502, 503, 504})
HUB_MESSAGE_CHARS = 400  # of the hub's own error message, repeated whole: it says what to do


def not_a_hub_url(hub_url: str, request: str) -> str:
    """Why ``hub_url`` is refused when ``request`` (``"POST https://..."``) under it answered 404:
    the hub answers none of its own routes with a 404, so the URL leads elsewhere."""
    return f"{hub_url} is not a Sonde hub's base URL: {request} answered 404 Not Found. {GIVE_THE_HUB_URL}"


def not_the_hubs_answer(hub_url: str, request: str, status: int, answered: str, expected: str) -> str:
    """Why ``hub_url`` is refused when ``request`` under it answered ``status`` with ``answered``
    (`described_answer`) where the hub answers ``expected``: another server answers there."""
    return (
        f"{hub_url} is not a Sonde hub's base URL: {request} answered {status} with {answered}, "
        f"not {expected}. {GIVE_THE_HUB_URL}"
    )


def from_a_gateway(answered: str) -> str:
    """What a proxy's own error page (``answered``, `described_answer`) under a gateway status
    says: the hub behind it is down or slow, not that no hub is there."""
    return f"{answered}, a proxy's answer (is the hub behind it down or slow?)"


def redirected(hub_url: str, request: str, status: int, location: str, path: str) -> str:
    """Why ``hub_url`` is refused when ``request`` (for ``path``) under it answered a redirect
    ``status`` to ``location``: the hub redirects nothing, so another server answers there; the
    base URL the redirect leads to is said, for a proxy sending http to https."""
    leads = location[: -len(path)] if path and location.endswith(path) else ""
    there = f"; if the hub is served where it leads, that is {clipped(leads)}" if leads else ""
    return (
        f"{hub_url} is not a Sonde hub's base URL: {request} answered {status}, a redirect to "
        f"{echoed(location)}, and the hub redirects nothing. {GIVE_THE_HUB_URL}{there}"
    )


def described_answer(content_type: str | None, body: bytes, server: str | None) -> str:
    """What a web server answered, for a person: an HTML page and its title, JSON and its keys,
    else its Content-Type; and the server it names (its ``Server`` header), if any."""
    media = (content_type or "").split(";")[0].strip().lower()
    head = body[:SNIFF_BYTES]
    if media == "text/html" or head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        what = _html_page(head)
    elif media == "application/json" or media.endswith("+json"):
        what = _json_text(body)
    else:
        what = f"a {echoed(media)} answer" if media else "an answer with no Content-Type"
    shown = "".join(c for c in (server or "") if c.isprintable()).strip()
    return f"{what} (server: {clipped(shown)})" if shown else what


def hubs_error_message(body: bytes) -> str | None:
    """The message of the hub's own error answer (``{"error": {"code", "message"}}``), printable
    and clipped; None when ``body`` is not that answer (a proxy's page, another server's)."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(message, str):
        return None
    return clipped(without_secrets("".join(c for c in message if c.isprintable())), HUB_MESSAGE_CHARS)


def _html_page(head: bytes) -> str:
    title = TITLE.search(head)
    if title is None:
        return "an HTML page"
    text = " ".join(html.unescape(title.group(1).decode("utf-8", "replace")).split())
    return f"an HTML page titled {echoed(text)}" if text else "an HTML page"


def _json_text(body: bytes) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return "a body said to be JSON that is not"
    if isinstance(value, dict):
        keys = ", ".join(echoed(str(key)) for key in list(value)[:KEYS_SHOWN])
        more = ", ..." if len(value) > KEYS_SHOWN else ""
        return f"JSON holding the keys {keys}{more}" if value else "an empty JSON object"
    kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return f"a JSON {kind.get(type(value), 'null')}"
