"""The argv of the two long-running local commands, parsed without cyclopts.

`sonde serve --json` (spawned by an MCP client for every session) and
`sonde start` (the agent daemon) should start fast and stay small; importing
cyclopts and building the whole command tree costs ~80 ms and ~3 MiB. This
module takes exactly these forms and nothing else:

    sonde serve --json [--manifest PATH | --manifest=PATH]   (any order)
    sonde start [--allow-root] [--log-level LEVEL | --log-level=LEVEL]   (any order)

Anything else (help, a typo, a repeated or unknown option, a value starting
with ``-``) returns None and goes to the cyclopts app in `sonde.commands`,
which owns the messages and the help. For the forms above both give the same
values, the ``SONDE_LOG_LEVEL`` default included.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

LOG_LEVEL_ENV = "SONDE_LOG_LEVEL"
DEFAULT_LOG_LEVEL = "INFO"


def parse_options(args: Sequence[str], flags: set[str], valued: set[str]) -> dict[str, str | bool] | None:
    """``--flag`` and ``--name VALUE`` / ``--name=VALUE`` options, each at most once; None otherwise."""
    found: dict[str, str | bool] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if name in found:
            return None
        if name in flags and not eq:
            found[name] = True
        elif name in valued and eq:
            found[name] = value
        elif name in valued and rest and not rest[0].startswith("-"):
            found[name] = rest.pop(0)
        else:
            return None
    return found


def fast_command(argv: Sequence[str]) -> int | None:
    """Run ``argv`` if it is one of the forms above and return its exit code; else None."""
    if not argv:
        return None
    command, args = argv[0], argv[1:]
    if command == "serve":
        options = parse_options(args, {"--json"}, {"--manifest"})
        if options is None or options.get("--json") is not True:
            return None
        manifest = options.get("--manifest")
        from sonde.agent.serve import run_serve

        return run_serve(Path(manifest) if isinstance(manifest, str) else None)
    if command == "start":
        options = parse_options(args, {"--allow-root"}, {"--log-level"})
        if options is None:
            return None
        level = options.get("--log-level", os.environ.get(LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL))
        return run_start(allow_root=options.get("--allow-root") is True, log_level=str(level))
    return None


def run_start(*, allow_root: bool, log_level: str) -> int:
    """`sonde start`: load the enrolled config, then run the agent holding its identity's lock; 1
    when there is none, 2 when it is bad (a setting to mend: the systemd unit does not restart the
    agent for that), 4 when another `sonde start` holds the identity (the unit restarts it)."""
    from sonde.agent.config import ConfigError, config_path, load_config
    from sonde.agent.daemon import NOT_ENROLLED_MESSAGE
    from sonde.agent.exit_codes import EXIT_USAGE
    from sonde.agent.main import run_agent

    path = config_path()
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"sonde start: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if config is None:
        print(f"sonde start: {NOT_ENROLLED_MESSAGE} (there is no {path})", file=sys.stderr)
        return 1
    if not config.enrolled:
        missing = ", ".join(config.missing_identity())
        print(f"sonde start: {NOT_ENROLLED_MESSAGE} ({path} lacks {missing})", file=sys.stderr)
        return 1
    from sonde.agent.exit_codes import EXIT_ALREADY_RUNNING
    from sonde.agent.identity_lock import AgentRunning, hold_identity

    try:
        with hold_identity(path):
            return run_agent(config, allow_root=allow_root, log_level=log_level, config_file=path)
    except AgentRunning as exc:
        print(f"sonde start: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
