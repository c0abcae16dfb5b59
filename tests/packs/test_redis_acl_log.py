"""`redis.persistence.status` under a login without CONFIG GET does not fill the ACL LOG.

Every refused command is entered in the server's ACL LOG, which operators watch for intruders;
the probe asking CONFIG GET on every call would add one refusal a call. Once refused, a login is
not asked again for an hour. On the shared Redis, with an ACL user of this test's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import execute_probe
from sonde.packs.redis import PACK
from sonde.packs.registry import PackRegistry
from tests.packs.test_redis import client

REGISTRY = PackRegistry.of([PACK])


@pytest.fixture
def info_only_user() -> Iterator[tuple[str, str]]:
    admin = client()
    name, password = f"sonde-test-{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    admin.acl_setuser(name, enabled=True, passwords=[f"+{password}"], commands=["+info", "+ping", "+hello"])
    try:
        yield name, password
    finally:
        admin.acl_deluser(name)
        admin.close()


def refusals_of(name: str) -> int:
    admin = client()
    try:
        entries: list[dict[str, Any]] = admin.acl_log(count=128)
    finally:
        admin.close()
    return sum(int(e["count"]) for e in entries if e.get("username") == name)


async def test_a_login_refused_config_get_is_not_asked_again(info_only_user: tuple[str, str]) -> None:
    name, password = info_only_user
    ctx = ProbeContext(settings=ProbeSettings(packs={"redis": {"user": name, "password": password}}))
    for _ in range(3):
        found = (await execute_probe(REGISTRY, "redis.persistence.status", {}, ctx)).result
        assert found["dir"] is None  # CONFIG GET refused: the settings are unknown
        assert "may not run CONFIG GET (ACL '+config|get')" in found["visibility"]  # and it says why
        assert found["rdb_last_bgsave_status"] in ("ok", "err")
    assert refusals_of(name) == 1


async def test_settings_read_need_no_note() -> None:
    found = (await execute_probe(REGISTRY, "redis.persistence.status", {}, ProbeContext())).result
    assert found["save_points"] is not None
    assert found["visibility"] is None
