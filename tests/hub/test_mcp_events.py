"""The event log that lets a dropped SSE answer be resumed: what it keeps, for whom, how long.

The end-to-end resume (a real hub, a real dropped connection, GET with
Last-Event-ID) is tests/e2e/test_tools.py::test_a_dropped_health_check_stream_is_resumed_with_last_event_id.
"""

from __future__ import annotations

from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from sonde.hub.mcp_events import NOTIFICATION_BYTES, EventLog, SessionEvents


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def progress(n: int) -> JSONRPCNotification:
    params = {"progressToken": "t", "progress": n}
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params=params)


def answer(request_id: int, text: str = "done") -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"content": [{"type": "text", "text": text}]})


async def replayed(store: SessionEvents, after: str) -> tuple[str | None, list[EventMessage]]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    return await store.replay_events_after(after, send), sent


async def test_a_primed_stream_is_replayed_after_the_id_the_client_saw() -> None:
    store = SessionEvents(EventLog(), "s1")
    priming = await store.store_event("7", None)
    first = await store.store_event("7", progress(1))
    await store.store_event("7", progress(2))
    await store.store_event("7", answer(7))
    stream, sent = await replayed(store, first)
    assert stream == "7"
    assert [e.message for e in sent] == [progress(2), answer(7)]
    assert [int(e.event_id or 0) for e in sent] == sorted(int(e.event_id or 0) for e in sent)
    assert all(int(e.event_id or 0) > int(first) for e in sent)
    _, everything = await replayed(store, priming)
    assert len(everything) == 3  # the priming event itself carries no message


async def test_a_stream_answered_as_json_leaves_nothing_behind() -> None:
    log = EventLog()
    store = SessionEvents(log, "s1")
    event_id = await store.store_event("8", answer(8))
    assert event_id
    assert len(log) == 0
    assert log.bytes == 0
    assert await replayed(store, event_id) == (None, [])


async def test_another_session_replays_nothing() -> None:
    log = EventLog()
    mine, theirs = SessionEvents(log, "s1"), SessionEvents(log, "s2")
    priming = await mine.store_event("1", None)
    await mine.store_event("1", answer(1, "secret"))
    await theirs.store_event("1", None)  # the same request id in another session
    assert await replayed(theirs, priming) == (None, [])
    stream, sent = await replayed(mine, priming)
    assert stream == "1"
    assert [e.message for e in sent] == [answer(1, "secret")]


async def test_ids_that_name_no_kept_event_replay_nothing() -> None:
    store = SessionEvents(EventLog(), "s1")
    await store.store_event("1", None)
    for unknown in ("999", "not-a-number", "", "-1"):
        assert await replayed(store, unknown) == (None, [])


async def test_an_answered_stream_is_kept_for_a_while_then_dropped() -> None:
    clock = Clock()
    log = EventLog(retain_s=60, clock=clock)
    store = SessionEvents(log, "s1")
    priming = await store.store_event("1", None)
    await store.store_event("1", answer(1))
    clock.now += 59
    await store.store_event("2", None)  # any later store trims
    assert (await replayed(store, priming))[0] == "1"
    clock.now += 2
    await store.store_event("3", None)
    assert await replayed(store, priming) == (None, [])
    assert len(log) == 2  # the primings of the streams still open


async def test_a_resumed_stream_keeps_its_events_and_its_new_ones() -> None:
    store = SessionEvents(EventLog(), "s1")
    priming = await store.store_event("5", None)
    await store.store_event("5", progress(1))
    again = await store.store_event("5", None)  # the SDK primes the resumed stream too
    await store.store_event("5", answer(5))
    _, from_start = await replayed(store, priming)
    assert [e.message for e in from_start] == [progress(1), answer(5)]
    _, from_resume = await replayed(store, again)
    assert [e.message for e in from_resume] == [answer(5)]


async def test_past_the_event_budget_the_oldest_go_first() -> None:
    log = EventLog(max_events=4)
    store = SessionEvents(log, "s1")
    ids = [await store.store_event("1", None)] + [await store.store_event("1", progress(n)) for n in range(5)]
    assert len(log) == 4
    assert await replayed(store, ids[1]) == (None, [])  # evicted
    stream, sent = await replayed(store, ids[3])
    assert stream == "1"
    assert [e.message for e in sent] == [progress(3), progress(4)]


async def test_past_the_byte_budget_the_oldest_go_first() -> None:
    big = "x" * 4000
    log = EventLog(max_bytes=10_000)
    store = SessionEvents(log, "s1")
    for request_id in range(1, 6):
        await store.store_event(str(request_id), None)
        await store.store_event(str(request_id), answer(request_id, big))
    assert log.bytes <= 10_000
    assert log.bytes >= 2 * 4000  # the newest two answers fit
    kept = {request_id for request_id in range(1, 6) if ("s1", str(request_id)) in log._streams}
    assert kept >= {4, 5}
    assert 1 not in kept
    assert log.bytes == sum(e.size for e in log._events.values())
    assert NOTIFICATION_BYTES < 4000
