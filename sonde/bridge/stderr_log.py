"""The bridge's log lines on stderr, never in the way of its answers.

An MCP client starts the bridge with stderr on a pipe, and not every client reads it. Written
from the event loop, as a plain `logging.StreamHandler` writes, the line that found the pipe
full (64 KiB) blocked the whole bridge: no answer, no end at EOF, no signal taken (a review
saw only SIGKILL end it). Here a line goes into a bounded queue that a thread writes out; with
the queue full it is dropped and counted, and the count is said once stderr takes lines again.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

QUEUED_LINES = 1000  # waiting for stderr, at most; past that, lines are dropped and counted
DRAIN_AT_EXIT_S = 0.5  # how long the bridge waits at exit for its last lines to be written


class QueuedStderr(logging.Handler):
    """Writes each record's line to ``fd`` from its own thread; `emit` never waits."""

    def __init__(self, fd: int = 2, capacity: int = QUEUED_LINES) -> None:
        super().__init__()
        self.fd = fd
        self.lines: queue.Queue[bytes] = queue.Queue(capacity)
        self._dropped = 0
        self._counting = threading.Lock()
        # a daemon: one blocked on a stderr nobody reads must not hold the process at exit
        self._writer = threading.Thread(target=self._write_lines, name="sonde-stderr", daemon=True)
        self._writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:  # as every logging handler: a record that does not format is said
            self.handleError(record)
            return
        try:
            self.lines.put_nowait(line)
        except queue.Full:
            with self._counting:
                self._dropped += 1

    def flush(self) -> None:
        """Wait up to `DRAIN_AT_EXIT_S` for the lines queued so far to be written: `logging`
        flushes each handler at exit, so the last lines are said, unless stderr is stuck."""
        deadline = time.monotonic() + DRAIN_AT_EXIT_S
        while self.lines.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def _write_lines(self) -> None:
        while True:
            line = self.lines.get()
            try:
                _write_whole(self.fd, line)
                if self.lines.empty():
                    self._say_dropped()
            except OSError:  # stderr gone (closed, a broken pipe): lines go nowhere, as logging's do
                pass
            finally:
                self.lines.task_done()

    def _say_dropped(self) -> None:
        with self._counting:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            note = f"sonde mcp-bridge: {dropped} log line(s) dropped above: stderr was not read in time\n"
            _write_whole(self.fd, note.encode())


def _write_whole(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
