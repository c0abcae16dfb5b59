"""Secrets a command is given (an enrollment token, an API key), and where a secret may be shown.

A secret given as a flag sits in the process's argv, which every local user reads (``ps``,
``/proc/PID/cmdline``) while it runs: `given_secret` takes one from the environment or stdin
instead (`sonde enroll`, `sonde login`), and warns when a flag was used anyway (kept, for
scripts). A secret a command made is printed only on a terminal (`may_show_secret`): a log
file, the journal or a JSON log shipper is read by others.
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable

SECRET_LINE_MAX_CHARS = 4096  # one line of stdin holds a token or a key: no more is read


class NoSecretGiven(ValueError):
    """No flag, environment variable or stdin gave the secret; the message says how to."""


def may_show_secret(log_format: str) -> bool:
    """Whether a secret may be printed to stderr: a terminal, with text logs."""
    return sys.stderr.isatty() and log_format == "text"


def read_secret(what: str, env_var: str) -> str:
    """The secret ``what`` (an API key, an enrollment token) when no flag gave it, stripped:
    ``env_var`` when set and not empty, else asked for with a hidden prompt when stdin is a
    terminal, else the first line of stdin (blocks until it comes, or EOF). Raises
    `NoSecretGiven`, saying how to give it, when none was given."""
    given = os.environ.get(env_var, "").strip()
    if given:
        return given
    if sys.stdin is None:  # no fd 0 at all
        text = ""
    elif sys.stdin.isatty():
        try:
            text = getpass.getpass(f"{what} (input hidden): ")
        except EOFError:  # Ctrl-D at the prompt
            text = ""
    else:
        text = sys.stdin.readline(SECRET_LINE_MAX_CHARS)
    if not text.strip():
        raise NoSecretGiven(
            f"no {what} given: give it on stdin (asked for on a terminal, or "
            f'`echo "$SECRET" | sonde ...`) or in {env_var}'
        )
    return text.strip()


def given_secret(flag: str, value: str | None, what: str, env_var: str, warn: Callable[[str], None]) -> str:
    """The secret ``value`` given as ``flag`` (``warn`` is told every local user could read it
    there), else `read_secret`'s; `NoSecretGiven` when none was given."""
    if value is None:
        return read_secret(what, env_var)
    warn(argv_secret_warning(flag, what, env_var))
    return value


def argv_secret_warning(flag: str, what: str, env_var: str) -> str:
    """The warning for a secret given as ``flag`` on the command line, which every local user
    could read while the command ran, and how to give it instead."""
    return (
        f"{flag} put the {what} on the command line, where every local user could read it "
        f"(ps, /proc/PID/cmdline) while this command ran; leave {flag} out and give it in {env_var} "
        f'or on stdin instead (asked for on a terminal, or `echo "$SECRET" | sonde ...`)'
    )
