"""One hub and agent shared by the bridge's end-to-end tests (see `tests.bridge.fleet`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.bridge.fleet import Fleet, running_fleet


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with running_fleet(tmp_path_factory.mktemp("bridge-fleet")) as started:
        yield started
