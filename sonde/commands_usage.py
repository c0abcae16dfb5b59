"""`sonde hub` usage mistakes that cyclopts would answer obscurely, said with what to do.

`sonde hub` with options runs the hub; `sonde hub COMMAND` is an admin command. Every option of
the hub takes one value, and the hub takes no word, so in ``sonde hub --data-dir DIR key list``
cyclopts gives the options to the hub and leaves ``key list`` unused ("Unused Tokens"), and in
``sonde hub hub --help`` it shows the hub's help for a word that is no command. Both are
caught here, before cyclopts parses: the first told to put the command first, the second told
which commands there are, with or without ``--help``. Words left over after a command's arguments
(`sonde hub token revoke a b`) are said by `worded_cli_error`, cyclopts' error formatter, as
arguments the command does not take, not as cyclopts' "Unused Tokens" (tokens are enrollment
tokens here).
"""

from __future__ import annotations

import inspect
import shlex
import sys
from collections.abc import Collection, Sequence

from cyclopts import CycloptsError, UnusedCliTokensError
from cyclopts.panel import CycloptsPanel
from rich.text import Text

from sonde.echo import echoed

COUNTED = {0: "none", 1: "one"}

FLAGS = frozenset({"--help", "-h", "--version"})  # the options of `sonde hub` that take no value


def hub_usage_mistake(argv: Sequence[str], commands: Collection[str]) -> str | None:
    """What is wrong with ``argv`` (the words after ``sonde``) when it is ``sonde hub`` with a word
    after the hub's options, or a word that is no command of ``sonde hub`` (one of ``commands``);
    None for any other argv, which cyclopts parses as it is."""
    if not argv or argv[0] != "hub":
        return None
    rest = list(argv[1:])
    index = first_word(rest)
    if index is None or (index == 0 and rest[0] in commands):
        return None
    word = rest[index]
    if word in commands:
        fixed = shlex.join(["sonde", "hub", *rest[index:], *rest[:index]])
        return (
            f"{word!r} comes after options of `sonde hub` itself (those of the hub it runs): "
            f"put the command first: {fixed}"
        )
    return (
        f"no command {echoed(word)}: the commands of `sonde hub` are {', '.join(sorted(commands))}; "
        "with options alone, `sonde hub` runs the hub (`sonde hub --bind HOST:PORT --data-dir DIR`)"
    )


def first_word(args: Sequence[str]) -> int | None:
    """The index of the first argument that is neither an option nor an option's value; None if none."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return index
        index += 1 if arg in FLAGS or "=" in arg else 2
    return None


def worded_cli_error(error: CycloptsError) -> object:
    """cyclopts' ``error_formatter``: extra words after a command's arguments said as such, with
    how many it takes (each word echoed, a secret never repeated), on one line of stderr; any other
    error as cyclopts says it (its panel, returned for its console to print)."""
    if not isinstance(error, UnusedCliTokensError) or not error.unused_tokens:
        return CycloptsPanel(error)
    words = error.unused_tokens
    command = " ".join(["sonde", *(error.command_chain or ())])
    taken = positional_count(error)
    takes = "" if taken is None else f" takes {COUNTED.get(taken, str(taken))}"
    noun = "argument" if len(words) == 1 else "arguments"
    said = ", ".join(echoed(word) for word in words)
    # printed here: the console would wrap it at 80 columns, splitting "(see --help)"
    print(f"sonde: unexpected {noun} {said}: `{command}`{takes} (see --help)", file=sys.stderr)
    return Text("", end="")


def positional_count(error: CycloptsError) -> int | None:
    """How many positional arguments the command that ``error`` is about takes; None if unknown."""
    command = error.app.default_command if error.app is not None else None
    if command is None:
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in inspect.signature(command).parameters.values() if p.kind in positional)
