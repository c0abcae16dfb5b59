"""One worker process of simulated agents: ``python -m benchmarks.fleet_worker SPEC.json``.

Every simulated agent is the real agent code, many per process: `enroll`
(the real REST enrollment, posting the bench pack) writes one config file per
agent; `run` starts one real `agent_main` per config (the daemon's connect
loop, the signed register, the link with heartbeats, the `ProbeRunner`)
offering the bench pack. With ``describe_installed`` in the spec the agents
offer the installed packs a real agent here offers as well (those it detects), so
their enrollment and register describe Sonde's own packs as a real agent's do.

The worker speaks JSON lines on stdout (``{"event": ...}``) and stops by
itself: `run` holds the agents until its stdin closes or ``max_seconds``
pass, then stops them (close code 1000) and exits.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import trio

from benchmarks.pack import PACK_NAME, bench_registry
from sonde.agent import identity
from sonde.agent.config import AgentConfig, load_config
from sonde.agent.daemon import AgentDaemon
from sonde.agent.enroll import EnrollError, enroll
from sonde.agent.main import agent_main

ENROLL_THREADS = 8
STOP_TIMEOUT_S = 10.0
MAX_ERRORS_KEPT = 5


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def agent_name(index: int) -> str:
    return f"bench-{index:05d}"


def config_file(directory: Path, index: int) -> Path:
    return directory / f"{agent_name(index)}.json"


# --- enroll -------------------------------------------------------------------


def enroll_one(spec: dict[str, Any], index: int, token: str) -> str | None:
    """Enroll simulated agent ``index``; None when it worked, else the error."""
    try:
        enroll(
            spec["hub_url"],
            token,
            agent_name(index),
            config_path=config_file(Path(spec["dir"]), index),
            registry=bench_registry(spec.get("describe_installed", False)),
        )
    except EnrollError as exc:
        return f"{agent_name(index)}: {exc.code}: {exc.message}"
    return None


def run_enroll(spec: dict[str, Any]) -> None:
    tokens: list[str] = spec["tokens"]
    first = spec["first"]
    started = time.perf_counter()
    with ThreadPoolExecutor(ENROLL_THREADS) as pool:
        outcomes = list(pool.map(partial(enroll_one, spec), range(first, first + len(tokens)), tokens))
    errors = [error for error in outcomes if error is not None]
    emit(
        "enrolled",
        count=len(tokens) - len(errors),
        seconds=time.perf_counter() - started,
        errors=len(errors),
        first_errors=errors[:MAX_ERRORS_KEPT],
    )


# --- run ----------------------------------------------------------------------


def load_agent(spec: dict[str, Any], index: int) -> AgentConfig:
    """Agent ``index``'s config, pointed at this run's hub (and told to hang, if chosen)."""
    config = load_config(config_file(Path(spec["dir"]), index))
    if config is None:
        raise RuntimeError(f"agent {agent_name(index)} is not enrolled")
    update: dict[str, Any] = {"hub_url": spec["hub_url"]}
    hang_every = spec.get("hang_every") or 0
    if hang_every and index % hang_every == hang_every - 1:
        update["packs"] = {PACK_NAME: {"hangFlag": spec["hang_flag"]}}
    return config.model_copy(update=update)


class Agents:
    """The simulated agents of this worker, started with a bounded number of connects in flight."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.registry = bench_registry(spec.get("describe_installed", False))
        self.daemons: list[AgentDaemon] = []
        self.errors: list[str] = []
        self.ack_times: list[float] = []
        self.all_acked = trio.Event()

    async def start_one(self, nursery: trio.Nursery, limiter: trio.CapacityLimiter, index: int) -> None:
        config = load_agent(self.spec, index)
        started = trio.current_time()
        async with limiter:
            try:
                daemon = await nursery.start(partial(agent_main, config, self.registry, handle_signals=False))
            except RuntimeError as exc:  # agent_main ended before its first ack (a fatal reject)
                self.errors.append(f"{agent_name(index)}: {exc}")
                return
        self.daemons.append(daemon)
        self.ack_times.append(trio.current_time() - started)
        if len(self.daemons) == self.spec["count"]:
            self.all_acked.set()

    async def stop_all(self) -> None:
        with trio.move_on_after(STOP_TIMEOUT_S):
            async with trio.open_nursery() as stopping:
                for daemon in self.daemons:
                    stopping.start_soon(daemon.stop, "benchmark over")


async def wait_stdin_closed() -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass


async def run_agents(spec: dict[str, Any]) -> None:
    agents = Agents(spec)
    first, count = spec["first"], spec["count"]
    started = trio.current_time()
    with trio.move_on_after(spec["max_seconds"]):
        async with trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(spec.get("connect_concurrency", 64))
            for index in range(first, first + count):
                nursery.start_soon(agents.start_one, nursery, limiter, index)
            with trio.move_on_after(spec["connect_timeout_s"]):
                await agents.all_acked.wait()
            emit(
                "acked",
                count=len(agents.daemons),
                seconds=trio.current_time() - started,
                ack_seconds=agents.ack_times,
                errors=agents.errors[:MAX_ERRORS_KEPT],
            )
            await wait_stdin_closed()
            await agents.stop_all()
            nursery.cancel_scope.cancel()
    emit("stopped", count=len(agents.daemons))


def pin_code_hash(value: str) -> None:
    """Attest the code hash the harness took at the start of the run.

    The hub holds an agent as degraded when its code hash changes under the
    same version; on a machine where sonde's source is being edited during a
    run, agents started after an edit would otherwise be held.
    """
    identity.code_hash = lambda: value  # type: ignore[assignment]


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    pin_code_hash(spec["code_hash"])
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if spec["mode"] == "enroll":
        run_enroll(spec)
    else:
        trio.run(run_agents, spec)


if __name__ == "__main__":
    main()
