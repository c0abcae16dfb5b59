"""What the bridge has in flight for its client, and the order the hub must see it in.

The stdin reader asks a `Tracker` about each message before it starts the
task that POSTs it, and gets back what that task must wait for first; nothing
here does I/O or waits, so the reader never waits on the hub. The order kept
is the one MCP needs, and no more:

- notifications and responses (messages nobody answers) go one at a time in
  the client's order: each waits for the one before it, which the hub
  acknowledges at once (202);
- a request waits for the notifications read before it (``initialized``
  before the first call), never for another request;
- what is read while the client's ``initialize`` is in flight waits for its
  answer (the session id and the protocol version are in it);
- a ``notifications/cancelled`` waits for the request it names to end, which
  is at once: `cancel` closes that request's POST first.

Bounds: `MAX_REQUESTS_IN_FLIGHT` requests (the next is refused) and
`MAX_OTHERS_WAITING` other messages (the next is dropped, with a line on
stderr), each holding at most one line (`sonde.bridge.stdio.MAX_LINE_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from sonde.bridge import jsonrpc

MAX_REQUESTS_IN_FLIGHT = 64
MAX_OTHERS_WAITING = 16  # notifications and responses the hub has not acknowledged yet


def done_event() -> trio.Event:
    event = trio.Event()
    event.set()
    return event


@dataclass(eq=False)
class ClientRequest:
    """One request line from the client, from the moment it is read to its end."""

    keys: tuple[str, ...]  # `jsonrpc.id_key` of each of its ids
    waiting: dict[str, Any]  # key -> id, for the ids not answered yet
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    cancelled: bool = False  # the client cancelled it: no answer is owed


class Tracker:
    """The client's requests by id, the order of what it sends, and the count of both."""

    def __init__(self) -> None:
        self._by_id: dict[str, ClientRequest] = {}
        self._running: dict[ClientRequest, None] = {}  # in the order they were read
        self.others_waiting = 0
        self._last_other = done_event()  # the notification or response read last is acknowledged
        self._initialize_done = done_event()  # the client's initialize is answered
        self._tasks = 0
        self._idle = done_event()

    def refusal(self, ids: list[Any]) -> tuple[str, int] | None:
        """Why a request with ``ids`` cannot be forwarded now, and the error code; None if it can."""
        keys = [jsonrpc.id_key(i) for i in ids]
        for key, request_id in zip(keys, ids, strict=True):
            if key in self._by_id or keys.count(key) > 1:
                reason = f"request id {jsonrpc.as_text(request_id)} is already in flight; wait for its answer or use a new id"
                return reason, jsonrpc.INVALID_REQUEST
        if len(self._running) >= MAX_REQUESTS_IN_FLIGHT:
            reason = (
                f"the bridge already has {MAX_REQUESTS_IN_FLIGHT} requests in flight, its limit; this one "
                "was not sent: send it again once some are answered"
            )
            return reason, jsonrpc.INTERNAL_ERROR
        return None

    def start_request(self, ids: list[Any], *, initialize: bool) -> tuple[ClientRequest, list[trio.Event]]:
        """Count a request in (`refusal` said yes); returns it and the events its task waits for first."""
        waiting = {jsonrpc.id_key(i): i for i in ids}
        request = ClientRequest(tuple(waiting), waiting)
        after = [self._last_other, self._initialize_done]
        if initialize:
            self._initialize_done = request.done
        for key in request.keys:
            self._by_id[key] = request
        self._running[request] = None
        self._task_started()
        return request, after

    def end_request(self, request: ClientRequest) -> None:
        request.done.set()
        for key in request.keys:
            if self._by_id.get(key) is request:
                del self._by_id[key]
        del self._running[request]
        self._task_ended()

    def cancel(self, request_id: Any) -> trio.Event | None:
        """The client cancelled ``request_id``: stop forwarding it, owe it no answer, free its ids.

        Returns the event set once its task has ended (None: no such request in flight).
        """
        request = self._by_id.get(jsonrpc.id_key(request_id))
        if request is None:
            return None
        request.cancelled = True
        request.scope.cancel()
        for key in request.keys:
            if self._by_id.get(key) is request:
                del self._by_id[key]
        return request.done

    def start_other(self, cancelled: trio.Event | None = None) -> tuple[list[trio.Event], trio.Event] | None:
        """Count a notification or response in: the events its task waits for first, and the one it
        sets when the hub has it. ``cancelled``: for a ``notifications/cancelled``, what `cancel`
        returned. None when `MAX_OTHERS_WAITING` already wait."""
        if self.others_waiting >= MAX_OTHERS_WAITING:
            return None
        after = [self._last_other, self._initialize_done]
        if cancelled is not None:
            after.append(cancelled)
        self._last_other = trio.Event()
        self.others_waiting += 1
        self._task_started()
        return after, self._last_other

    def end_other(self, done: trio.Event) -> None:
        done.set()
        self.others_waiting -= 1
        self._task_ended()

    def requests_running(self) -> list[ClientRequest]:
        return list(self._running)

    async def wait_idle(self) -> None:
        """Return once every message counted in has ended."""
        await self._idle.wait()

    def _task_started(self) -> None:
        if self._tasks == 0:
            self._idle = trio.Event()
        self._tasks += 1

    def _task_ended(self) -> None:
        self._tasks -= 1
        if self._tasks == 0:
            self._idle.set()
