"""Ctrl-C (SIGINT) in a one-shot `sonde` command.

Until a command's work is done, Ctrl-C stops it: `sonde.cli.main` turns the KeyboardInterrupt
into exit 130 (128 + SIGINT, what a shell reports), quietly, wherever it lands (in the imports
of the first tenth of a second too). Once the work is done, or past the point where cutting it
short would lose it (an enrollment the hub made, a backup in place), Ctrl-C no longer counts:
`stop_taking_interrupts` makes the process ignore it, so what was done is said and exits 0.
Quietly, but for one case: where the other side may have acted on a request the command had
sent (`sonde enroll` waiting for the hub's answer: the token may be spent), the command says
so before it exits 130, and what to do (`sonde.agent.enroll.interrupted_advice`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

EXIT_INTERRUPTED = 130  # 128 + SIGINT


def stop_taking_interrupts() -> None:
    """Ignore SIGINT from now on in this process: its work is done, or can no longer be cut short
    without losing it. Only the main thread may change it: called elsewhere (a library call in a
    worker thread), this does nothing."""
    import signal  # here: `sonde.cli` imports this module, and `sonde serve --json` starts fast
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def noting_signals(signums: Sequence[int], noted: list[int]) -> Iterator[None]:
    """While the block runs, a signal of ``signums`` no trio receiver takes is appended to
    ``noted``; from its end to the process's exit, they are ignored.

    For a long-running command (the agent, the bridge) that stops on its first signal and says
    the later ones. A trio signal receiver, closed, gives each signal back the handler it found:
    were that the default, one in the instant between the stop and the exit (an impatient
    supervisor's second SIGTERM) killed the process (143, seen under load). Ignored at the end,
    not noted: Python resets its own handlers to the default as the interpreter ends.
    """
    import signal

    for signum in signums:
        signal.signal(signum, lambda taken, _frame: noted.append(taken))
    try:
        yield
    finally:
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)
