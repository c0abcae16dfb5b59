"""Fixtures shared by the hub's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub.db import open_database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    """A migrated hub database, ``sonde.db`` in the test's directory (where `--data-dir` looks)."""
    database = open_database(tmp_path / "sonde.db")
    yield database
    database.close()
