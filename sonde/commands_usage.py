"""`sonde hub` usage mistakes that cyclopts would answer obscurely, said with what to do.

`sonde hub` with options runs the hub; `sonde hub COMMAND` is an admin command. Every option of
the hub takes one value, and the hub takes no word, so in ``sonde hub --data-dir DIR key list``
cyclopts gives the options to the hub and leaves ``key list`` unused ("Unused Tokens"), and in
``sonde hub hub --help`` it shows the hub's help for a word that is no command. Both are
caught here, before cyclopts parses: the first told to put the command first, the second told
which commands there are, with or without ``--help``.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence

from sonde.echo import echoed

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
