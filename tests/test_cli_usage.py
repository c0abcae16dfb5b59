"""`sonde hub`'s usage mistakes said with what to do: an option of the hub put before an admin
command (`sonde hub --data-dir DIR key list`), a word that is no command of `sonde hub`; and help
and messages that show what was meant (the backup's file name, every flag described, a TTL as typed)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sonde.hub.db import open_database
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any


def sonde(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_any([*SONDE, *args], env=base_env(tmp_path / "home"), timeout=60)


def flat(text: str) -> str:
    """Help text as one line: the panels' borders and line breaks gone."""
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize(
    ("args", "fixed"),
    [
        (["--data-dir", "/tmp/x", "key", "list"], "sonde hub key list --data-dir /tmp/x"),
        (["--data-dir=/tmp/x", "agent", "list", "--json"], "sonde hub agent list --json --data-dir=/tmp/x"),
        (["--log-level", "DEBUG", "audit", "verify"], "sonde hub audit verify --log-level DEBUG"),
        (["--data-dir", "/tmp/a b", "backup", "/tmp/c"], "sonde hub backup /tmp/c --data-dir '/tmp/a b'"),
    ],
    ids=" ".join,
)
def test_a_hub_option_before_a_command_says_to_put_it_after(
    tmp_path: Path, args: list[str], fixed: str
) -> None:
    done = sonde(tmp_path, "hub", *args)
    assert done.returncode == 2, done.stderr
    command = args[2] if "=" not in args[0] else args[1]
    assert f"sonde hub: {command!r} comes after options of `sonde hub` itself" in done.stderr
    assert f"put the command first: {fixed}" in done.stderr
    assert "Unused Tokens" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "args",
    [["hub", "--help"], ["hub", "--bind", "127.0.0.1:0"], ["nonsense"], ["--bind", "127.0.0.1:0", "hub"]],
)
def test_a_word_that_is_no_command_of_sonde_hub_is_refused_with_or_without_help(
    tmp_path: Path, args: list[str]
) -> None:
    done = sonde(tmp_path, "hub", *args)
    assert done.returncode == 2, done.stderr
    word = next(arg for arg in args if not arg.startswith("-") and ":" not in arg)
    assert (
        f"sonde hub: no command {word!r}: the commands of `sonde hub` are agent, audit, backup, key"
        in done.stderr
    )
    assert "with options alone, `sonde hub` runs the hub" in done.stderr
    assert "Usage:" not in done.stdout
    assert not (tmp_path / "home" / ".local").exists()  # no hub was started


@pytest.mark.parametrize(
    "args", [["hub", "--help"], ["hub", "key", "list", "--help"], ["hub", "--bind", "0:0", "--help"]]
)
def test_help_is_still_help(tmp_path: Path, args: list[str]) -> None:
    done = sonde(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: sonde hub")


def test_backup_help_names_the_file_it_makes() -> None:
    done = run_any([*SONDE, "hub", "backup", "--help"], env=base_env(Path("/nonexistent")))
    assert "the copy is named sonde-<UTC time>.db there" in flat(done.stdout)


@pytest.mark.parametrize(
    "command",
    [
        ["hub", "key", "list"],
        ["hub", "key", "revoke"],
        ["hub", "token", "revoke"],
        ["hub", "agent", "accept"],
        ["hub", "agent", "remove"],
        ["hub", "agent", "list"],
        ["hub", "agent", "tag"],
        ["hub", "audit", "list"],
        ["hub", "backup"],
    ],
    ids=" ".join,
)
def test_every_parameter_of_an_admin_command_is_described(command: list[str]) -> None:
    done = run_any([*SONDE, *command, "--help"], env=base_env(Path("/nonexistent")))
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        # a parameter's first line: its name (`*  NAME` for an argument, `--flag METAVAR` for an
        # option), then its description; what cyclopts adds by itself is in brackets
        match = re.match(r"│ (?:\*  )?((?:--|[A-Z])[\w-]*(?: [A-Z.]+)?)(.*)│", line)
        if match:
            said = re.sub(r"\[[^]]*\]", "", match.group(2)).strip()
            assert said, f"`sonde {' '.join(command)} --help`: {match.group(1)!r} has no description"


@pytest.mark.parametrize(
    ("ttl", "shown"), [("8d", "8d"), ("30s", "30s"), ("0.5m", "0.5m"), ("604801", "604801")]
)
def test_a_ttl_out_of_range_is_shown_as_typed(tmp_path: Path, ttl: str, shown: str) -> None:
    open_database(tmp_path / "data" / "sonde.db").close()
    done = sonde(tmp_path, "hub", "token", "create", "--ttl", ttl, "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2, done.stderr
    assert f"sonde hub: --ttl must be 60s to 7d, not {shown}" in done.stderr  # as its other refusals
    assert ".0 s" not in done.stderr
    assert "read as seconds" not in done.stderr  # 604801 minutes would not fit either


def test_a_bare_number_refused_is_said_to_be_seconds(tmp_path: Path) -> None:
    # before: "--ttl must be 60s to 7d, not 15" and "--older-than must be at least 1d (got 180)",
    # for someone who meant 15 minutes or 180 days
    data = tmp_path / "data"
    open_database(data / "sonde.db").close()
    ttl = sonde(tmp_path, "hub", "token", "create", "--ttl", "15", "--data-dir", str(data))
    assert ttl.returncode == 2, ttl.stderr
    assert "--ttl must be 60s to 7d, not 15, read as seconds: did you mean 15m?" in ttl.stderr
    age = sonde(tmp_path, "hub", "audit", "prune", "--older-than", "180", "--data-dir", str(data))
    assert age.returncode == 2, age.stderr
    assert (
        "sonde hub: --older-than must be at least 1d (got 180, read as seconds: did you mean 180d?)"
        in age.stderr
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["hub", "token", "revoke", "a", "b"], "unexpected argument 'b': `sonde hub token revoke` takes one"),
        (
            ["hub", "key", "revoke", "aaa", "bbb"],
            "unexpected argument 'bbb': `sonde hub key revoke` takes one",
        ),
        (
            ["hub", "agent", "remove", "web-3", "x10"],
            "unexpected argument 'x10': `sonde hub agent remove` takes one",
        ),
        (["packs", "list", "zz", "[b]"], "unexpected arguments 'zz', '[b]': `sonde packs list` takes none"),
        (["hub", "token", "revoke", "a", "enr_" + "Q" * 32], "unexpected argument 'enr_[hidden]'"),
    ],
    ids=" ".join,
)
def test_an_extra_argument_is_named_with_how_many_the_command_takes(
    tmp_path: Path, args: list[str], said: str
) -> None:
    data_dir = ["--data-dir", str(tmp_path)] if args[0] == "hub" else []
    done = sonde(tmp_path, *args, *data_dir)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert "(see --help)" in done.stderr
    assert "Unused Tokens" not in done.stderr
    assert "Q" * 32 not in done.stderr
