"""The incremental SSE parser, fed whole, one byte at a time, and cut anywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sonde.bridge.sse import ServerSentEvent, SSEError, SSEParser

STREAM = (
    b": a comment, then an event with two data lines\r\n"
    b"id: 1\r\n"
    b"retry: 2500\r\n"
    b'data: {"a":\r\n'
    b"data: 1}\r\n"
    b"\r\n"
    b"event: ping\n"
    b"data\n"
    b"\n"
    b"id: 3\r"
    b"data:no space\r"
    b"data:  two spaces\r"
    b"\r"
)
EXPECTED = [
    ServerSentEvent(data='{"a":\n1}', id="1"),
    ServerSentEvent(data="", event="ping", id="1"),
    ServerSentEvent(data="no space\n two spaces", id="3"),
]


def feed_in_pieces(data: bytes, cuts: list[int], parser: SSEParser | None = None) -> list[ServerSentEvent]:
    parser = parser or SSEParser()
    events, start = [], 0
    for cut in [*sorted(cuts), len(data)]:
        events += parser.feed(data[start:cut])
        start = cut
    return events


def test_whole_stream() -> None:
    parser = SSEParser()
    assert parser.feed(STREAM) == EXPECTED
    assert parser.retry_ms == 2500
    assert parser.last_event_id == "3"


def test_one_byte_at_a_time() -> None:
    parser = SSEParser()
    events = []
    for index in range(len(STREAM)):
        events += parser.feed(STREAM[index : index + 1])
    assert events == EXPECTED
    assert parser.retry_ms == 2500


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=20))
def test_any_cut_gives_the_same_events(cuts: list[int]) -> None:
    assert feed_in_pieces(STREAM, cuts) == EXPECTED


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_each_line_ending(ending: bytes) -> None:
    stream = ending.join([b"data: x", b"data: y", b"", b"data: z", b"", b""])
    assert [e.data for e in SSEParser().feed(stream)] == ["x\ny", "z"]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []  # the LF of the CRLF, not a blank line
    assert parser.feed(b"\r") == [ServerSentEvent(data="a")]
    assert parser.feed(b"\ndata: b\n\n") == [ServerSentEvent(data="b")]


def test_an_event_split_across_chunks_comes_out_when_complete() -> None:
    parser = SSEParser()
    assert parser.feed(b'event: message\ndata: {"jsonrpc":') == []
    assert parser.feed(b' "2.0"}\n') == []
    assert parser.feed(b"\n") == [ServerSentEvent(data='{"jsonrpc": "2.0"}')]


def test_comments_and_unknown_fields_are_ignored() -> None:
    stream = b": keep-alive\n:\nfoo: bar\ndata: x\n: between\n\n"
    assert SSEParser().feed(stream) == [ServerSentEvent(data="x")]


def test_no_data_no_event_but_the_id_counts() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 7\n\n") == []  # an MCP priming event
    assert parser.last_event_id == "7"
    assert parser.feed(b"data: later\n\n") == [ServerSentEvent(data="later", id="7")]


def test_id_with_nul_is_ignored_and_empty_id_resets() -> None:
    parser = SSEParser()
    parser.feed(b"id: 1\ndata: a\n\n")
    assert parser.feed(b"id: 2\x003\ndata: b\n\n") == [ServerSentEvent(data="b", id="1")]
    assert parser.feed(b"id\ndata: c\n\n") == [ServerSentEvent(data="c", id="")]


def test_retry_takes_digits_only() -> None:
    parser = SSEParser()
    parser.feed(b"retry: 1000\n\nretry: 12x\n\nretry: -5\n\nretry:\n\n")
    assert parser.retry_ms == 1000


def test_event_type_resets_after_each_event() -> None:
    events = SSEParser().feed(b"event: endpoint\ndata: /x\n\ndata: y\n\n")
    assert [(e.event, e.data) for e in events] == [("endpoint", "/x"), ("message", "y")]


def test_a_leading_bom_is_dropped_even_one_byte_at_a_time() -> None:
    parser = SSEParser()
    events = []
    for byte in b"\xef\xbb\xbfdata: x\n\n":
        events += parser.feed(bytes([byte]))
    assert events == [ServerSentEvent(data="x")]


def test_utf8_split_inside_a_character() -> None:
    data = "data: température ✓\n\n".encode()
    assert feed_in_pieces(data, list(range(len(data)))) == [ServerSentEvent(data="température ✓")]


def test_an_incomplete_event_at_the_end_is_not_dispatched() -> None:
    assert SSEParser().feed(b"data: never finished\n") == []


def test_an_oversized_event_raises_instead_of_buffering() -> None:
    parser = SSEParser(max_event_bytes=100)
    parser.feed(b"data: " + b"x" * 50 + b"\n")
    with pytest.raises(SSEError):
        parser.feed(b"data: " + b"y" * 60 + b"\n")
    with pytest.raises(SSEError):
        SSEParser(max_event_bytes=100).feed(b"data: " + b"z" * 200)  # one unfinished line
