"""The `sonde` command line entry point.

The hot local commands (`sonde serve --json`, `sonde start`) are parsed by
`sonde.cli_fast` without importing cyclopts; everything else, help included,
goes to the cyclopts app in `sonde.commands`.
"""

from __future__ import annotations

import os
import sys

from sonde.interrupts import EXIT_INTERRUPTED, stop_taking_interrupts

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool its reader stopped reading


def main() -> None:
    try:
        result = run(sys.argv[1:])
        stop_taking_interrupts()  # done, and said: a Ctrl-C now would only make it look failed
        sys.stdout.flush()  # here, not at exit, where a closed stdout is a traceback
    except KeyboardInterrupt:  # Ctrl-C before the command handles SIGINT itself (while importing, say)
        sys.exit(EXIT_INTERRUPTED)  # quietly, as the shell's `^C` says it all
    except BrokenPipeError:
        # the reader went away (`sonde hub key list | head -1`): stop quietly, as tools do on
        # SIGPIPE; stdout goes to /dev/null so that Python's own flush at exit finds nothing to fail on
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    sys.exit(result)


def run(argv: list[str]) -> int:
    """Run the command in ``argv``; its exit code."""
    from sonde.cli_fast import fast_command

    result = fast_command(argv)
    if result is None:
        from sonde.commands import run_app

        result = run_app(argv)
    return result
