"""Log lines on stderr, never in the way of the process that says them.

Written from the event loop, as a plain `logging.StreamHandler` writes, the line that found
stderr full blocked everything: an MCP client that never reads the bridge's stderr pipe
(64 KiB) stopped its answers, its end at EOF and its signals (a review saw only SIGKILL end
it); a hub on a terminal paused with Ctrl-S, or under a log reader that stopped reading,
stopped serving. Here a line goes into a bounded queue that a thread writes out; with the
queue full it is dropped and counted, and the count is said once stderr takes lines again.

The lines a command says whatever the log level (the hub's URL, its first admin key, that it
is shutting down) go through the same queue (`say_line`), so they keep their order with the
log lines around them.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time

QUEUED_LINES = 1000  # waiting for stderr, at most; past that, lines are dropped and counted
DRAIN_AT_EXIT_S = 0.5  # how long a process waits at exit for its last lines to be written
DROPPED_NOTE = "%d log line(s) dropped above: they came faster than stderr took them"
_STOP = b""  # put by `close`: the writer thread ends there


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
            text = self.format(record)
        except Exception:  # as every logging handler: a record that does not format is said
            self.handleError(record)
            return
        self.put_line(text)

    def put_line(self, text: str) -> None:
        """``text`` and a newline on stderr, after the lines queued before it; never waits."""
        try:
            self.lines.put_nowait((text + "\n").encode("utf-8", "backslashreplace"))
        except queue.Full:
            with self._counting:
                self._dropped += 1

    def flush(self) -> None:
        """Wait up to `DRAIN_AT_EXIT_S` for the lines queued so far to be written: `logging`
        flushes each handler at exit, so the last lines are said, unless stderr is stuck."""
        deadline = time.monotonic() + DRAIN_AT_EXIT_S
        while self.lines.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        """End the writer thread once it has written what is queued: a handler replaced
        (``logging.basicConfig(force=True)``) leaves no thread behind. At exit, `logging` has
        already waited for the lines (`flush`)."""
        try:
            self.lines.put_nowait(_STOP)
        except queue.Full:  # stderr stuck: the daemon thread goes with the process
            pass
        super().close()

    def _write_lines(self) -> None:
        while True:
            line = self.lines.get()
            try:
                if line == _STOP:
                    return
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
        if dropped:  # a record of its own, so it has the lines' format (one JSON object, for one)
            note = logging.LogRecord("sonde", logging.WARNING, __file__, 0, DROPPED_NOTE, (dropped,), None)
            _write_whole(self.fd, (self.format(note) + "\n").encode("utf-8", "backslashreplace"))


def say_line(text: str) -> None:
    """``text`` on stderr, whatever the log level: through the root logger's `QueuedStderr`
    when there is one (in order with the log lines, never waiting), else written at once.
    Where stderr's reader has gone (a log shipper that died, `| tee` stopped) it goes nowhere,
    as `logging`'s lines do: raised, it ended the hub at SIGTERM's "shutting down" with no
    drain (calls in flight cut, agents not told, exit 141, the unit marked failed)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, QueuedStderr):
            handler.put_line(text)
            return
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _write_whole(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
