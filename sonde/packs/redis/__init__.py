"""The `redis` pack: server info, keyspace, memory, persistence, slow log and replication.

Commands go through redis-py (pure Python) in a worker thread; only read commands
are sent (INFO, SLOWLOG GET/LEN, CONFIG GET). Where Redis ACLs are on, the agent's
user needs ``+info +slowlog`` (and ``+config|get`` for the persistence settings,
which are left out without it); its password only comes from the agent config.
"""

from __future__ import annotations

from pathlib import Path

from sonde import __version__
from sonde.packs.base import Detection, Pack
from sonde.packs.services import ServiceDefaults, detect_service

DEFAULTS = ServiceDefaults("127.0.0.1", 6379)
SOCKETS = ("/run/redis/redis-server.sock", "/var/run/redis/redis-server.sock", "/run/redis/redis.sock")


def detect_redis() -> Detection:
    return detect_service("Redis", "redis", "redis-py", SOCKETS, DEFAULTS)


PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="redis",
    version=__version__,
    description=(
        "Redis: version, clients, memory vs maxmemory and RAM, eviction rate, persistence, keyspace, "
        "slow log and replication."
    ),
    detect=detect_redis,
    categories=("redis",),
    settings=("host", "port", "user", "password", "show_values"),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.probes",
        f"{__name__}.memory",
        f"{__name__}.persistence",
        f"{__name__}.runbook",
    ),
)
