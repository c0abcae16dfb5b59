"""The small error vocabulary shared by every part of Sonde.

Transport and peer failures are turned into these at one place (the link);
everything above the link speaks only these.
"""

from __future__ import annotations


class SondeError(Exception):
    """Base of every error Sonde raises on purpose."""


class ProtocolError(SondeError):
    """A frame or message broke the protocol.

    `code` is a short stable word (``bad_json``, ``unknown_type``, ...) and the
    message says, for a person, what was wrong.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RemoteProtocolError(ProtocolError):
    """The peer sent something that breaks the protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something that breaks the protocol (our bug)."""


class SignatureError(RemoteProtocolError):
    """A frame was unsigned, signed by the wrong key, altered, stale or replayed."""


class AgentUnavailable(SondeError):
    """The agent is not connected, or went away while a probe was pending."""


class ProbeTimeout(SondeError):
    """A probe did not answer within its deadline."""


class ProbeFailed(SondeError):
    """The agent answered a probe with an error.

    `code` is the agent's error code (``invalid_params``, ``unknown_probe``,
    ``probe_failed``, ``timeout``, ``cancelled``, ...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# The close reason the hub gives a connection it replaces with a newer one of the same agent;
# the agent recognises it to warn of two agents running with one identity.
REPLACED_BY_NEWER_CONNECTION = "replaced by a newer connection of this agent"
