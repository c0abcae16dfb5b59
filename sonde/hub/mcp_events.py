"""Resumable MCP event streams: a bounded log of what the hub sent on each SSE answer.

A call with a progress token that waits on agents (``probe``, ``diagnose``,
``health_check``, ``query_logs`` of an agent) is answered as an event stream
(`sonde.hub.mcp_answers`). If that connection drops, a client that saw an event
id can ask for the rest with ``GET /mcp`` and ``Last-Event-ID`` instead of
losing the answer. The SDK sends a priming event (an id, no data) at the start
of each such stream on protocol 2025-11-25 and later, and stores every message
the session sends through the store it was given.

What is kept, and for how long:

- only streams that were primed; a request answered as one JSON body leaves
  nothing behind;
- each session has its own `SessionEvents` view, and an event id from another
  session replays nothing (request ids, the stream names, repeat across sessions);
- all sessions share one `EventLog` with a budget of events and of bytes: past
  it the oldest events go first; a stream whose answer was sent is kept
  `RETAIN_S` seconds for a late resume, then dropped.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse

MAX_EVENTS = 50_000
MAX_BYTES = 64 * 1024 * 1024
RETAIN_S = 300.0
NOTIFICATION_BYTES = 512  # what a progress notification costs, without serialising it to know


@dataclass
class _Event:
    key: tuple[str, StreamId]
    message: JSONRPCMessage | None  # None: the priming event
    size: int


@dataclass
class _Stream:
    seqs: deque[int] = field(default_factory=deque)
    answered_at: float | None = None


class EventLog:
    """Every session's kept events, oldest first, within `max_events` and `max_bytes`."""

    def __init__(
        self,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
        retain_s: float = RETAIN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.retain_s = retain_s
        self._clock = clock
        self._next = itertools.count(1)
        self._events: dict[int, _Event] = {}  # insertion order is age
        self._streams: dict[tuple[str, StreamId], _Stream] = {}
        self._answered: deque[tuple[float, tuple[str, StreamId]]] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._events)

    def store(self, session: str, stream: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep ``message`` if its stream was primed (``None`` primes it); the event's id either way."""
        seq = next(self._next)
        key = (session, stream)
        if message is None:  # primed: a new stream, or one being resumed (the SDK primes a replay too)
            self._streams.setdefault(key, _Stream())
        elif key not in self._streams:
            return str(seq)  # answered as JSON, or a stream nobody can resume: nothing to keep
        answer = message if isinstance(message, JSONRPCResponse | JSONRPCError) else None
        size = NOTIFICATION_BYTES if answer is None else _size(answer)
        self._events[seq] = _Event(key, message, size)
        self._streams[key].seqs.append(seq)
        self.bytes += size
        if answer is not None and str(answer.id) == stream:
            now = self._clock()
            self._streams[key].answered_at = now
            self._answered.append((now, key))
        self._trim()
        return str(seq)

    async def replay(self, session: str, last_event_id: EventId, send: EventCallback) -> StreamId | None:
        """Send ``session``'s events after ``last_event_id`` on its stream; that stream, or None."""
        try:
            after = int(last_event_id)
        except ValueError:
            return None
        event = self._events.get(after)
        if event is None or event.key[0] != session:
            return None
        for seq in [s for s in self._streams[event.key].seqs if s > after]:  # a copy: sending awaits
            kept = self._events.get(seq)  # None if evicted while an earlier one was being sent
            if kept is not None and kept.message is not None:  # a None message is a priming event
                await send(EventMessage(kept.message, str(seq)))
        return event.key[1]

    def _trim(self) -> None:
        horizon = self._clock() - self.retain_s
        while self._answered and self._answered[0][0] < horizon:
            answered_at, key = self._answered.popleft()
            stream = self._streams.get(key)
            if stream is not None and stream.answered_at == answered_at:
                self._forget(key)
        while self._events and (len(self._events) > self.max_events or self.bytes > self.max_bytes):
            oldest = next(iter(self._events))
            key = self._events[oldest].key
            self._drop(oldest)
            stream = self._streams[key]  # every kept event belongs to a kept stream
            stream.seqs.popleft()  # and the oldest event overall is its stream's oldest
            if not stream.seqs:
                del self._streams[key]

    def _forget(self, key: tuple[str, StreamId]) -> None:
        stream = self._streams.pop(key, None)
        for seq in stream.seqs if stream is not None else ():
            self._drop(seq)

    def _drop(self, seq: int) -> None:
        event = self._events.pop(seq, None)
        if event is not None:
            self.bytes -= event.size


class SessionEvents(EventStore):
    """One session's view of the `EventLog`: what the SDK's transport for that session is given."""

    def __init__(self, log: EventLog, session_id: str) -> None:
        self.log = log
        self.session_id = session_id

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self.log.store(self.session_id, stream_id, message)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        return await self.log.replay(self.session_id, last_event_id, send_callback)


def _size(message: JSONRPCResponse | JSONRPCError) -> int:
    return len(message.model_dump_json(by_alias=True, exclude_unset=True))
