"""Shared test helpers.

`require(ok, reason)` skips a test that needs something a laptop may lack;
under ``CI=true`` the same gap is a failure, so CI can never pass by skipping.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(ok: bool, reason: str) -> None:
    if ok:
        return
    if IN_CI:
        pytest.fail(f"CI=true needs this: {reason}")
    pytest.skip(reason)
