"""The `sonde` command line entry point.

The hot local commands (`sonde serve --json`, `sonde start`) are parsed by
`sonde.cli_fast` without importing cyclopts; everything else, help included,
goes to the cyclopts app in `sonde.commands`.
"""

from __future__ import annotations

import sys


def main() -> None:
    from sonde.cli_fast import fast_command

    argv = sys.argv[1:]
    result = fast_command(argv)
    if result is None:
        from sonde.commands import app

        result = app(argv, result_action="return_value")
    sys.exit(result if isinstance(result, int) else 0)
