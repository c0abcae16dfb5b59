"""A hub's base URL as an operator gives it: the one rule every client (enroll, login, bridge) applies.

Operators paste what they have at hand, most often the MCP URL the hub prints
(``http://HOST:PORT/mcp``); every client reaches the hub by paths under its base
URL, so a trailing ``/mcp`` (or ``/``) is dropped here rather than refused. Only
the standard library, so that a client that needs nothing else starts fast.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def check_hub_url(url: str) -> None:
    """Raise `ValueError` (saying what is wrong) unless ``url`` is http(s) with a host and no
    user, password, query or fragment."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:  # said without the URL: it holds a secret
        raise ValueError(
            "a hub URL must not hold a user name or password (USER:PASSWORD@HOST): the hub takes "
            "an API key, which goes in a header"
        )
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"hub URL {url!r} must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"hub URL {url!r} has no host")
    if parts.query or parts.fragment:
        raise ValueError(f"hub URL {url!r} must not have a query or fragment")


def normalize_hub_url(url: str) -> str:
    """The hub's base URL: checked (`check_hub_url`), without surrounding blanks, a trailing
    ``/`` or ``/mcp``."""
    url = url.strip()
    check_hub_url(url)
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.endswith("/mcp"):
        path = path[: -len("/mcp")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def same_hub(one: str, other: str) -> bool:
    """Whether two hub URLs name one hub as written: the scheme and host in any case, the port
    given or the scheme's, a trailing slash or not. (localhost and 127.0.0.1 are two names: the
    agent's TLS and Host checks see them apart.)"""

    def spelled(url: str) -> tuple[str, str, int | None, str]:
        parts = urlsplit(url)
        default = {"http": 80, "https": 443}.get(parts.scheme.lower())
        return (
            parts.scheme.lower(),
            (parts.hostname or "").lower(),
            parts.port or default,
            parts.path.rstrip("/"),
        )

    return spelled(one) == spelled(other)
