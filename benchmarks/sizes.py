"""How big and how long each scenario runs, per set: smoke (tests), quick (`make bench`), full."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    name: str
    # 1. probe round trip
    round_trips: int
    floor_round_trips: int
    # 2. concurrent probes
    clients: int
    agents: int
    concurrent_s: float
    concurrent_floor: bool  # also drive the trivial MCP tool with the same clients
    # 3. fleet fan-out
    fanout_agents: int
    fanout_repeats: int
    fanout_deadline_s: float | None  # health_check's deadline_s for the hanging run; None: the tool's default
    # 4. scale
    scale_agents: tuple[int, ...]
    scale_hold_s: float
    scale_heartbeat_s: float
    # 5. local paths
    serve_starts: int
    serve_calls: int
    agent_load_s: float
    # every scenario's overall deadline
    scenario_budget_s: float


SMOKE = Sizes(
    name="smoke",
    round_trips=10,
    floor_round_trips=10,
    clients=2,
    agents=2,
    concurrent_s=1.0,
    concurrent_floor=False,
    fanout_agents=5,
    fanout_repeats=1,
    fanout_deadline_s=1.0,
    scale_agents=(20,),
    scale_hold_s=2.0,
    scale_heartbeat_s=1.0,
    serve_starts=1,
    serve_calls=3,
    agent_load_s=1.0,
    scenario_budget_s=45.0,
)

QUICK = Sizes(
    name="quick",
    round_trips=200,
    floor_round_trips=200,
    clients=10,
    agents=20,
    concurrent_s=5.0,
    concurrent_floor=True,
    fanout_agents=100,
    fanout_repeats=3,
    fanout_deadline_s=5.0,
    scale_agents=(1000,),
    scale_hold_s=10.0,
    scale_heartbeat_s=5.0,
    serve_starts=3,
    serve_calls=20,
    agent_load_s=3.0,
    scenario_budget_s=120.0,
)

FULL = Sizes(
    name="full",
    round_trips=500,
    floor_round_trips=500,
    clients=50,
    agents=100,
    concurrent_s=20.0,
    concurrent_floor=True,
    fanout_agents=1000,
    fanout_repeats=3,
    fanout_deadline_s=None,
    scale_agents=(1000, 5000, 10000),
    scale_hold_s=60.0,
    scale_heartbeat_s=30.0,
    serve_starts=10,
    serve_calls=100,
    agent_load_s=20.0,
    scenario_budget_s=1500.0,
)

SETS = {sizes.name: sizes for sizes in (SMOKE, QUICK, FULL)}
