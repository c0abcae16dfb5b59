"""The nonces of agents' register frames, hub-wide (a register replayed on a new socket must be
refused) but counted per agent.

One shared cache of at most `NONCE_CACHE_MAX` nonces refused every agent's register once it was
full, and one agent (its key stolen, or its machine taken) could fill it by registering as fast
as it can: some 1,700 a second. Now each agent holds at most `REGISTER_NONCES_PER_AGENT` inside
the window, so such an agent shuts out only itself, and filling the whole cache would take
hundreds of agents at once.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from datetime import datetime

from sonde.protocol.errors import SignatureError
from sonde.protocol.signing import NONCE_CACHE_MAX, TIMESTAMP_WINDOW_S, StaleFrame

# Registers one agent may send inside the window (120 s): an agent reconnecting after every
# failure backs off to seconds, far below two a second; more is a loop or an attack.
REGISTER_NONCES_PER_AGENT = 256


class RegisterReplays:
    """The register nonces seen inside the window, each agent's at most ``per_agent``."""

    def __init__(
        self,
        window_s: float = TIMESTAMP_WINDOW_S,
        per_agent: int = REGISTER_NONCES_PER_AGENT,
        max_nonces: int = NONCE_CACHE_MAX,
    ) -> None:
        self.window_s = window_s
        self.per_agent = per_agent
        self.max_nonces = max_nonces
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._live: Counter[str] = Counter()  # by agent id: its nonces in `_seen`

    def check(self, agent_id: str, nonce: str, ts: datetime, now: datetime) -> None:
        """Record ``nonce`` of agent ``agent_id`` (its signature checked); raise `StaleFrame` for
        a frame too early or too late, `SignatureError` for one replayed or one too many."""
        peer_ahead_s = (ts - now).total_seconds()
        if abs(peer_ahead_s) > self.window_s:
            raise StaleFrame(peer_ahead_s, self.window_s, "agent")
        now_s = now.timestamp()
        self._forget_older_than(now_s - self.window_s)
        key = (agent_id, nonce)
        if key in self._seen:
            raise SignatureError("replayed", "frame nonce was already used (replay)")
        if self._live[agent_id] >= self.per_agent:
            raise SignatureError(
                "replay_cache_full",
                f"this agent sent more than {self.per_agent} registers in {self.window_s:.0f} s: "
                "it is reconnecting in a loop (see its log), or another holds its key",
            )
        if len(self._seen) >= self.max_nonces:
            raise SignatureError("replay_cache_full", "too many registers inside the replay window")
        self._seen[key] = now_s
        self._live[agent_id] += 1

    def _forget_older_than(self, cutoff_s: float) -> None:
        while self._seen:
            (agent_id, _), seen_at = next(iter(self._seen.items()))
            if seen_at >= cutoff_s:
                return
            self._seen.popitem(last=False)
            left = self._live[agent_id] - 1
            if left:
                self._live[agent_id] = left
            else:
                del self._live[agent_id]
