"""Shared test helpers.

`require(ok, reason)` skips a test that needs something a laptop may lack;
under ``CI=true`` the same gap is a failure, so CI can never pass by skipping.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from itertools import groupby
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(ok: bool, reason: str) -> None:
    if ok:
        return
    if IN_CI:
        pytest.fail(f"CI=true needs this: {reason}")
    pytest.skip(reason)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A fresh directory under /tmp that every user may enter (pytest's own tmp root is 0700),
    removed afterwards with whatever modes the test left inside it."""
    made = Path(tempfile.mkdtemp(prefix="sonde-open-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        for path in made.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(made)


# Test files whose tests share what this machine runs for everyone: the database servers'
# global counters, sessions and settings (read and changed by the tests: maxclients, say), nginx,
# the npm tools' cache. Their tests take one lock, so under pytest-xdist (`make test`) and beside
# another run of the suite they run one at a time. (xdist's own grouping, --dist loadgroup, does
# nothing with pytest 9.2's structured node ids: pytest-dev/pytest-xdist#1386.)
SHARED_SERVICES = re.compile(r"test_(mysql|postgres|redis|nginx|conformance|inspector)")
SHARED_SERVICES_LOCK = Path(tempfile.gettempdir()) / "sonde-tests-machine-services.lock"


@pytest.fixture(autouse=True)
def machine_services_alone(request: pytest.FixtureRequest) -> Iterator[None]:
    if not SHARED_SERVICES.match(request.path.name):
        yield
        return
    with SHARED_SERVICES_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file closes, however the test ends
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reverse-each-file",
        action="store_true",
        help="run each test file's tests last to first, to show a test that needs an earlier one's "
        "state or is broken by a later one's (make test's worksteal can run them in either order)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--reverse-each-file"):
        items[:] = [
            item for _, tests in groupby(items, key=lambda i: i.path) for item in reversed(list(tests))
        ]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No `sonde` process a failing test started outlives the run."""
    from tests.e2e.procs import stop_leftovers

    stop_leftovers()
