"""The hub's one refusal type, read by both surfaces.

MCP tools turn a `HubError` into a tool error whose text tells the model what
to do next; REST turns it into ``{"error": {"code", "message"}}`` with its
HTTP status.
"""

from __future__ import annotations


class HubError(Exception):
    def __init__(
        self, message: str, code: str = "refused", status: int = 400, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.headers = headers or {}  # for a REST answer (Retry-After)


def not_found(message: str) -> HubError:
    return HubError(message, "not_found", 404)


def forbidden(message: str) -> HubError:
    return HubError(message, "forbidden", 403)


def unavailable(message: str) -> HubError:
    return HubError(message, "agent_unavailable", 503)
