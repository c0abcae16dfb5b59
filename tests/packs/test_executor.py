"""What a probe's result must be before it leaves: valid Unicode and within the cap."""

from __future__ import annotations

import json

from sonde.packs.executor import ProbeExecutionError, cap_result


def test_cap_result_repairs_text_only_when_it_must() -> None:
    good = {"name": "sleeper"}
    assert cap_result(good, 1000)[0] is good  # nothing copied in the common case
    repaired, truncated, size = cap_result({"name": "\udcffsleeper"}, 1000)
    assert repaired == {"name": "\\xffsleeper"}
    assert not truncated
    assert size == len(json.dumps(repaired, separators=(",", ":")).encode())


def test_an_error_quoting_a_name_that_is_not_utf8_says_it_escaped() -> None:
    error = ProbeExecutionError("permission_denied", "permission denied: /var/log/\udcff.log")
    assert error.message == "permission denied: /var/log/\\xff.log"
    assert str(error) == error.message
