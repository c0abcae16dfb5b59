"""Session-wide real processes for the e2e tests that can share them.

One `sonde hub` (heartbeat 1 s), two `sonde start` agents, ``alpha`` and
``beta``, both offering the test-only ``e2e`` pack, and ``idle``, enrolled
but never started (tests speak for it on a raw socket). Tests that enroll
more agents give them names of their own, so sharing never makes them
interfere; tests that kill a hub start their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.harness import SharedFleet, enroll_named, status_of, write_test_pack
from tests.e2e.procs import running_hub, wait_until

FLEET_NAMES = ("alpha", "beta")
IDLE_NAME = "idle"


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedFleet]:
    root = tmp_path_factory.mktemp("fleet")
    pack_site = write_test_pack(root / "site")
    with running_hub(root, "--heartbeat-interval", "1") as hub, ThreadPoolExecutor() as pool:
        enrolling = {
            name: pool.submit(enroll_named, hub, root / f"home-{name}", name, pack_site=pack_site)
            for name in (*FLEET_NAMES, IDLE_NAME)
        }
        idle = enrolling.pop(IDLE_NAME).result()
        agents = {name: future.result() for name, future in enrolling.items()}
        try:
            for agent in agents.values():
                agent.start()
            wait_until(lambda: all(status_of(hub, name) == "online" for name in FLEET_NAMES))
            yield SharedFleet(hub, agents, idle, pack_site, root)
        finally:
            for agent in agents.values():
                if agent.proc is not None:
                    agent.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """When a test on the shared fleet fails, its report says whether the hub still runs and what it logged."""
    report: pytest.TestReport = yield
    fleet = getattr(item, "funcargs", {}).get("fleet")
    if report.when == "call" and report.failed and isinstance(fleet, SharedFleet):
        proc = fleet.hub.proc
        state = "running" if proc.popen.poll() is None else f"exited with {proc.popen.returncode}"
        tail = "\n".join(proc.lines[-80:])
        report.sections.append(("shared hub", f"the hub process is {state}; its last stderr lines:\n{tail}"))
    return report
