"""`QueuedStderr`: a stderr nobody reads for a while costs lines, never the process's time."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sonde.hub.logs import JsonFormatter
from sonde.stderr_lines import QueuedStderr, say_line

PIPE_PAGE = 4096


@contextmanager
def full_pipe() -> Iterator[tuple[int, int]]:
    """A pipe of one page, full: its next write blocks until the test reads."""
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_PAGE)
        os.set_blocking(write_fd, False)
        try:
            while True:
                os.write(write_fd, b"\0" * PIPE_PAGE)
        except BlockingIOError:
            pass
        os.set_blocking(write_fd, True)
        yield read_fd, write_fd
    finally:
        os.close(read_fd)
        os.close(write_fd)


def read_until(read_fd: int, ending: bytes, timeout_s: float = 10.0) -> bytes:
    """What the pipe gives, less the filling's NULs, until it ends with ``ending``."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while not got.endswith(ending):
        assert time.monotonic() < deadline, got
        got += os.read(read_fd, 65536).replace(b"\0", b"")
    return got


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("sonde.test", logging.WARNING, __file__, 0, message, (), None)


def test_lines_past_the_queue_are_dropped_counted_and_said_once_stderr_reads_again() -> None:
    with full_pipe() as (read_fd, write_fd):
        handler = QueuedStderr(write_fd, capacity=3)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        started = time.monotonic()
        for n in range(20):
            handler.emit(record(f"line {n}"))
        took = time.monotonic() - started
        assert took < 1.0, took  # never waited on the full pipe (it would have forever)
        said = read_until(read_fd, b"than stderr took them\n").decode().splitlines()
        handler.close()
    written = [line for line in said if line.startswith("sonde.test: line ")]
    # the writer's line in hand and the queue's three: the first four, in order
    assert written[:3] == ["sonde.test: line 0", "sonde.test: line 1", "sonde.test: line 2"]
    assert len(written) in (3, 4), said
    dropped = 20 - len(written)
    assert said[-1] == f"sonde: {dropped} log line(s) dropped above: they came faster than stderr took them"


def test_the_dropped_count_has_the_lines_format_one_json_object_in_json_mode() -> None:
    with full_pipe() as (read_fd, write_fd):
        handler = QueuedStderr(write_fd, capacity=1)
        handler.setFormatter(JsonFormatter())
        for n in range(5):
            handler.emit(record(f"line {n}"))
        said = read_until(read_fd, b"}\n")
        while b"dropped above" not in said:
            said += read_until(read_fd, b"}\n")
        handler.close()
    entries = [json.loads(line) for line in said.decode().splitlines()]
    assert entries[0]["message"] == "line 0"
    assert entries[-1]["level"] == "warning"
    assert entries[-1]["message"].endswith(
        "log line(s) dropped above: they came faster than stderr took them"
    )


def test_a_said_line_keeps_its_place_among_the_log_lines() -> None:
    root = logging.getLogger()
    with full_pipe() as (read_fd, write_fd):  # all is queued behind the first line
        handler = QueuedStderr(write_fd)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
        try:
            logging.getLogger("sonde.test").warning("before")
            say_line("sonde hub: shutting down")
            logging.getLogger("sonde.test").warning("after")
            said = read_until(read_fd, b"after\n")
        finally:
            root.removeHandler(handler)
            handler.close()
    assert said == b"before\nsonde hub: shutting down\nafter\n"


def test_close_ends_the_writer_thread() -> None:
    read_fd, write_fd = os.pipe()
    try:
        handler = QueuedStderr(write_fd)
        handler.emit(record("last"))
        handler.close()
        handler._writer.join(5)
        assert not handler._writer.is_alive()
        assert os.read(read_fd, 100) == b"last\n"
    finally:
        os.close(read_fd)
        os.close(write_fd)
