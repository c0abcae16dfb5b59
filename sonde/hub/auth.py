"""Who is calling: API keys from the `Authorization: Bearer` header.

Keys are looked up by the hash of the secret. A found key is cached for a
few seconds so a busy MCP client costs no database read per call, while a
key revoked from the CLI stops working within that time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sonde.hub.keys import ApiKeyRecord, find_api_key, touch_api_key
from sonde.hub.policy import UNRESTRICTED, Policy
from sonde.hub.ratelimit import FailureLimiter
from sonde.hub.secret_records import hash_secret
from sonde.hub.store import REREADS_WHEN_OVERTAKEN, Store

KEY_CACHE_TTL_S = 5.0
BEARER_CHALLENGE = 'Bearer realm="sonde"'  # the WWW-Authenticate of every 401 (RFC 9110 11.6.1)
TOUCH_EVERY_S = 60.0


@dataclass(frozen=True)
class Caller:
    """An authenticated API key and what it may do."""

    key: ApiKeyRecord
    policy: Policy

    @property
    def key_id(self) -> str:
        return self.key.id

    @property
    def is_admin(self) -> bool:
        return self.key.role == "admin"

    def allows_agent(self, name: str, tags: list[str]) -> bool:
        return self.is_admin or self.policy.allows_agent(name, tags)

    def allows_probe(self, probe: str) -> bool:
        return self.is_admin or self.policy.allows_probe(probe)


def caller_for(key: ApiKeyRecord) -> Caller:
    policy = Policy.model_validate(key.policy) if key.policy else UNRESTRICTED
    return Caller(key, policy)


def bearer_secret(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()


class KeyRing:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.failures = FailureLimiter()
        self._cache: dict[str, tuple[float, Caller]] = {}
        self._touched: dict[str, float] = {}
        self._forgotten = 0  # how many times `forget` ran: a lookup it overtook is made again

    async def authenticate(self, authorization: str | None) -> Caller | None:
        """The caller for this header, or None when the key is missing, unknown or revoked."""
        secret = bearer_secret(authorization)
        if secret is None or len(secret) > 256:
            return None
        digest = hash_secret(secret)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < KEY_CACHE_TTL_S:
            caller = cached[1]
        else:
            for _ in range(REREADS_WHEN_OVERTAKEN):
                forgotten = self._forgotten
                record = await self.store.read(find_api_key, secret)
                if forgotten == self._forgotten:  # no revoke dropped the cache while it read
                    break
            else:  # revoked keys all along: this answer may be older than the last one
                return None
            if record is None:
                self._cache.pop(digest, None)
                return None
            caller = caller_for(record)
            self._cache[digest] = (now, caller)
        await self._touch(caller.key_id, now)
        return caller

    def forget(self) -> None:
        """Drop the cache (after a revoke through the hub)."""
        self._cache.clear()
        self._forgotten += 1

    async def _touch(self, key_id: str, now: float) -> None:
        if now - self._touched.get(key_id, -TOUCH_EVERY_S) >= TOUCH_EVERY_S:
            self._touched[key_id] = now
            await self.store.submit(touch_api_key, key_id, time.time())
