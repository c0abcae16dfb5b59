"""Which side to upgrade, by what a hub that could not read the register said (`unread_register_advice`).

The real agent against a stand-in hub of another version is in
tests/e2e/test_older_hub_refusal_words.py; these are the cases it does not drive.
"""

from __future__ import annotations

import pytest

from sonde import __version__
from sonde.agent.hub_version import unread_register_advice
from sonde.protocol.messages import RejectCode, RejectPayload, VersionRange

OLDER = f"the hub likely runs an older Sonde than this agent ({__version__}): upgrade the hub"
NEWER = f"the hub likely runs a newer Sonde than this agent ({__version__}): upgrade this agent"
EITHER = (
    f"if the hub runs another Sonde version than this agent ({__version__}), install the same version on both"
)


def advice(code: RejectCode, reason: str, versions: tuple[int, int] | None = (1, 1)) -> str | None:
    spoken = None if versions is None else VersionRange(min=versions[0], max=versions[1])
    return unread_register_advice(RejectPayload(code=code, reason=reason, supported_versions=spoken))


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("unknown field 'payload.futureField'", OLDER),
        ("unknown message type 'agent.hello'", OLDER),
        ("missing field 'payload.newRequirement'", NEWER),
        ("frame is larger than the limit of 1048576 bytes", EITHER),
    ],
)
def test_a_frame_the_hub_cannot_read(reason: str, expected: str) -> None:
    words = advice("protocol_error", reason)
    assert words is not None
    assert words.startswith(
        f"the hub refused this agent's register as a frame it cannot read (protocol_error: {reason}): "
    )
    assert expected in words


def test_a_hub_that_speaks_only_older_protocol_versions_is_older() -> None:
    words = advice("unsupported_version", "unsupported protocol version 1; supported: 0..0", (0, 0))
    assert words is not None
    assert f"the hub speaks protocol 0..0, this agent 1: {OLDER}" in words


def test_a_version_reject_without_a_usable_range_names_no_side() -> None:
    for versions in (None, (1, 1)):
        words = advice("unsupported_version", "unsupported protocol version 1", versions)
        assert words is not None
        assert EITHER in words


@pytest.mark.parametrize(
    "code", ["unknown_agent", "revoked", "bad_signature", "replaced", "hub_shutting_down"]
)
def test_other_rejects_get_no_version_advice(code: RejectCode) -> None:
    assert advice(code, "whatever") is None
