"""Directory and file listings, file reads and log tails, for real, inside a tmp allow-list."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from sonde.agent.config import AgentConfig, load_config, save_config
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.binary import looks_binary
from sonde.packs.system.textfile import head_lines, tail_lines

REGISTRY = PackRegistry.of([PACK])


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """allowed/ with files of known sizes and times, two subdirectories, and a secret outside."""
    allowed = tmp_path / "allowed"
    (allowed / "big").mkdir(parents=True)
    (allowed / "small").mkdir()
    (allowed / "big" / "blob.txt").write_text("x" * 5000)
    (allowed / "big" / "nested").mkdir()
    (allowed / "big" / "nested" / "more.txt").write_text("y" * 3000)
    (allowed / "small" / "a.txt").write_text("z" * 10)
    for index, (name, size) in enumerate([("b.log", 300), ("a.log", 100), ("c.log", 200)]):
        path = allowed / name
        path.write_text("l" * size)
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    (tmp_path / "secret.txt").write_text("top secret\n")
    (allowed / "escape").symlink_to(tmp_path / "secret.txt")
    return allowed


async def run(allowed: Path, name: str, **params: Any) -> dict[str, Any]:
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(allowed),)))
    return (await execute_probe(REGISTRY, name, params, ctx)).result


async def refusal(allowed: Path, name: str, **params: Any) -> ProbeExecutionError:
    with pytest.raises(ProbeExecutionError) as caught:
        await run(allowed, name, **params)
    return caught.value


@pytest.mark.parametrize(
    ("sort_by", "descending", "expected"),
    [
        ("name", False, ["a.log", "b.log", "c.log"]),
        ("size", True, ["b.log", "c.log", "a.log"]),
        ("mtime", True, ["c.log", "a.log", "b.log"]),
    ],
)
async def test_files_list_sorts_and_cuts(
    tree: Path, sort_by: str, descending: bool, expected: list[str]
) -> None:
    listing = await run(
        tree, "system.files.list", path=str(tree), sort_by=sort_by, descending=descending, limit=3
    )
    assert [entry["name"] for entry in listing["entries"]] == expected
    assert listing["total_entries"] == 3  # the symlink and the directories are not files
    assert listing["truncated"] is False
    assert all(entry["kind"] == "file" and entry["mode"].startswith("-") for entry in listing["entries"])


async def test_files_list_marks_truncation(tree: Path) -> None:
    listing = await run(tree, "system.files.list", path=str(tree), limit=1)
    assert listing["truncated"] is True
    assert len(listing["entries"]) == 1


FAR_FUTURE_S = 300_000_000_000  # the year 11476: tmpfs keeps it, ext4 clamps it to 2446


def far_future_tree() -> Path:
    """A directory on a tmpfs (which keeps any 64-bit time) holding a file and a directory whose
    times are past the year 9999, beside ordinary ones."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm to keep a time past the year 9999")
    root = Path(tempfile.mkdtemp(dir=shm))
    (root / "far").write_text("f")
    (root / "near").write_text("n")
    (root / "far-dir").mkdir()
    (root / "near-dir").mkdir()
    for name in ("far", "far-dir"):
        os.utime(root / name, (FAR_FUTURE_S, FAR_FUTURE_S))
    assert (root / "far").stat().st_mtime == FAR_FUTURE_S
    return root


@pytest.fixture
def far_future() -> Iterator[Path]:
    root = far_future_tree()
    try:
        yield root
    finally:
        shutil.rmtree(root)


@pytest.mark.parametrize(
    ("probe", "far", "near"),
    [
        ("system.files.list", "far", "near"),
        ("system.files.directories", "far-dir", "near-dir"),
    ],
)
@pytest.mark.parametrize("sort_by", ["name", "mtime", "size"])
async def test_a_time_past_the_year_9999_is_null_and_the_rest_still_listed(
    far_future: Path, probe: str, far: str, near: str, sort_by: str
) -> None:
    """One file anybody may touch must not blind the listing ("year 11476 is out of range")."""
    listing = await run(far_future, probe, path=str(far_future), sort_by=sort_by, descending=True)
    mtimes = {entry["name"]: entry["mtime"] for entry in listing["entries"]}
    assert mtimes[far] is None
    assert isinstance(mtimes[near], str)
    if sort_by == "mtime":
        assert [entry["name"] for entry in listing["entries"]] == [far, near]  # still the newest


async def test_directories_by_size_sum_their_trees(tree: Path) -> None:
    listing = await run(tree, "system.files.directories", path=str(tree), sort_by="size", descending=True)
    apparent = {entry["name"]: entry["apparent_size_bytes"] for entry in listing["entries"]}
    assert [entry["name"] for entry in listing["entries"]] == ["big", "small"]
    assert apparent["small"] == (tree / "small").lstat().st_size + 10  # the directory and its file
    assert apparent["big"] >= 8000  # both files, plus the directories themselves
    assert listing["complete"] is True
    assert all(entry["size_complete"] for entry in listing["entries"])
    assert listing["unreadable"] == []  # for what root cannot read, see test_system_unprivileged


@pytest.mark.parametrize("sort_by", ["name", "mtime"])
async def test_directories_not_sorted_by_size_claim_no_size(tree: Path, sort_by: str) -> None:
    """Without the walk a directory's size is unknown: not its 4096-byte entry passed off as a total."""
    listing = await run(tree, "system.files.directories", path=str(tree), sort_by=sort_by)
    assert sorted(entry["name"] for entry in listing["entries"]) == ["big", "small"]
    for entry in listing["entries"]:
        assert (entry["size_bytes"], entry["apparent_size_bytes"], entry["size_complete"]) == (
            None,
            None,
            False,
        )
    assert listing["complete"] is True  # every subdirectory was listed; sizes were not asked for
    files = await run(tree, "system.files.list", path=str(tree), sort_by=sort_by)
    assert all(entry["size_bytes"] is not None and entry["size_complete"] for entry in files["entries"])


async def command_output(*argv: str) -> str:
    done = await trio.run_process(list(argv), capture_stdout=True)
    return done.stdout.decode()


async def du_bytes(path: Path) -> int:
    """What ``du -s`` says ``path`` occupies, in bytes."""
    return int((await command_output("du", "-s", "--block-size=1", str(path))).split()[0])


async def test_directory_sizes_are_disk_use_like_du(tmp_path: Path) -> None:
    """A sparse file counts the blocks it uses, not its length; a hard-linked file counts once."""
    allowed = tmp_path / "allowed"
    for name in ("sparse", "dense", "linked"):
        (allowed / name).mkdir(parents=True)
    with (allowed / "sparse" / "disk.img").open("wb") as image:
        image.truncate(10 * 1024**3)  # as `truncate -s 10G`: 10 GiB long, no blocks
    (allowed / "dense" / "data.bin").write_bytes(os.urandom(256 * 1024))
    (allowed / "linked" / "data.bin").write_bytes(os.urandom(128 * 1024))
    for copy in range(3):
        os.link(allowed / "linked" / "data.bin", allowed / "linked" / f"link{copy}.bin")
    listing = await run(
        allowed, "system.files.directories", path=str(allowed), sort_by="size", descending=True
    )
    entries = {entry["name"]: entry for entry in listing["entries"]}
    assert [entry["name"] for entry in listing["entries"]] == ["dense", "linked", "sparse"]
    for name, entry in entries.items():
        assert entry["size_bytes"] == await du_bytes(allowed / name), name
    assert entries["sparse"]["size_bytes"] < 64 * 1024
    assert entries["sparse"]["apparent_size_bytes"] >= 10 * 1024**3
    assert entries["linked"]["apparent_size_bytes"] < 2 * 128 * 1024  # the four links: one file


async def test_file_read_is_bounded(tree: Path) -> None:
    content = await run(tree, "system.files.read", path=str(tree / "big" / "blob.txt"), max_bytes=100)
    assert content["content"] == "x" * 100
    assert (content["truncated"], content["size_bytes"], content["bytes_read"]) == (True, 5000, 100)


async def test_file_read_cut_inside_a_character_leaves_it_out(tree: Path) -> None:
    (tree / "big" / "utf.txt").write_text("héllo", encoding="utf-8")  # é is 2 bytes
    cut = await run(tree, "system.files.read", path=str(tree / "big" / "utf.txt"), max_bytes=2)
    assert (cut["content"], cut["truncated"]) == ("h", True)  # not "h\ufffd": the file has no such character
    whole = await run(tree, "system.files.read", path=str(tree / "big" / "utf.txt"), max_bytes=6)
    assert (whole["content"], whole["truncated"]) == ("héllo", False)


async def test_a_file_longer_than_one_answer_is_read_on_from_where_the_last_read_ended(tree: Path) -> None:
    """Regression: 1 MiB could be asked for, the answer held 256 KiB of it, and bytes_read said
    1 MiB; nothing could read the rest."""
    body = "".join(f"line {n:06d} é\n" for n in range(30_000)).encode()  # 450 KB, a 2-byte é each
    (tree / "big" / "long.txt").write_bytes(body)
    got, offset = b"", 0
    while True:
        read = await run(
            tree,
            "system.files.read",
            path=str(tree / "big" / "long.txt"),
            max_bytes=192 * 1024,
            offset=offset,
        )
        assert read["offset"] == offset
        assert read["content"].encode() == body[offset : offset + read["bytes_read"]]
        got += read["content"].encode()
        offset += read["bytes_read"]
        if not read["truncated"]:
            break
    assert got == body


async def test_text_that_takes_more_room_as_json_is_cut_to_fit_and_says_how_much_it_read(tree: Path) -> None:
    quotes = tree / "big" / "quotes.txt"
    quotes.write_text('"' * (192 * 1024))  # two bytes of JSON each
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tree),)))
    outcome = await execute_probe(
        REGISTRY, "system.files.read", {"path": str(quotes), "max_bytes": 192 * 1024}, ctx
    )
    read = outcome.result
    assert not outcome.truncated  # not cut by the executor after the fact: the probe fit it
    assert read["truncated"] is True
    assert 100_000 < read["bytes_read"] < 192 * 1024
    assert read["content"] == '"' * read["bytes_read"]


async def test_a_read_on_starts_with_the_character_the_last_read_cut(tree: Path) -> None:
    (tree / "big" / "utf.txt").write_text("héllo", encoding="utf-8")  # é is 2 bytes
    cut = await run(tree, "system.files.read", path=str(tree / "big" / "utf.txt"), max_bytes=2)
    assert (cut["content"], cut["bytes_read"], cut["truncated"]) == ("h", 1, True)
    rest = await run(tree, "system.files.read", path=str(tree / "big" / "utf.txt"), offset=1)
    assert (rest["content"], rest["bytes_read"], rest["truncated"]) == ("éllo", 5, False)
    past = await run(tree, "system.files.read", path=str(tree / "big" / "utf.txt"), offset=100)
    assert (past["content"], past["bytes_read"], past["truncated"], past["size_bytes"]) == ("", 0, False, 6)


async def test_file_read_by_default_answers_what_a_client_shows_whole(tree: Path) -> None:
    # a log of 64 KiB, newlines and quotes in it: by default 32 KiB of it, as well under the
    # ~50,000 characters past which Claude Code puts a result in a file and shows 2 KB of it
    log = tree / "big" / "app.log"
    log.write_text('ts=1 msg="request served" path=/api/v1/items status=200\n' * 1200)
    content = await run(tree, "system.files.read", path=str(log))
    assert (content["truncated"], content["bytes_read"]) == (True, 32 * 1024)
    assert len(json.dumps(content)) < 40_000


async def test_file_read_refuses_binary(tree: Path) -> None:
    (tree / "image.bin").write_bytes(bytes(range(256)) * 4)
    error = await refusal(tree, "system.files.read", path=str(tree / "image.bin"))
    assert error.code == "refused"
    assert "binary" in error.message


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
async def test_the_log_probes_refuse_a_binary_file(tree: Path, probe: str) -> None:
    """Regression: they sent a binary file's bytes as lines of U+FFFD and control characters,
    where system.files.read refuses it."""
    (tree / "image.bin").write_bytes(os.urandom(64 * 1024))
    error = await refusal(tree, probe, path=str(tree / "image.bin"))
    assert (error.code, "looks like a binary file" in error.message) == ("refused", True)


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
async def test_a_log_that_starts_with_nuls_is_still_read(tree: Path, probe: str) -> None:
    """logrotate's copytruncate leaves a log whose writer goes on at its old offset: a run of
    NULs, then text. That is no binary file, and the NULs are no line (a head sent them as one)."""
    (tree / "app.log").write_bytes(b"\x00" * 20_000 + b"started\nserving\n")
    read = await run(tree, probe, path=str(tree / "app.log"), lines=1)
    assert read["lines"] == (["serving"] if probe.endswith("tail") else ["started"])
    assert read["nul_bytes_skipped"] == 20_000


async def test_file_read_refuses_a_symlink_out_of_the_allow_list(tree: Path) -> None:
    error = await refusal(tree, "system.files.read", path=str(tree / "escape"))
    assert error.code == "refused"
    assert "outside the allowed paths" in error.message
    # and how an operator widens them (before: only the list)
    assert "add a directory to allowedPaths in the agent's config (~/.sonde/config.json" in error.message
    assert str(tree.parent / "secret.txt") not in error.message  # the link's target is not named


async def test_the_refusal_names_the_config_file_the_agent_read(tree: Path, tmp_path: Path) -> None:
    """`sonde up`'s agent reads <data-dir>/local-agent/config.json, not ~/.sonde's."""
    path = tmp_path / "data" / "local-agent" / "config.json"
    config = save_config(AgentConfig(allowed_paths=[str(tree)]), path)
    assert load_config(path).probe_settings().config_file == str(path)  # type: ignore[union-attr]
    ctx = ProbeContext(settings=config.probe_settings())
    with pytest.raises(ProbeExecutionError) as refused:
        await execute_probe(REGISTRY, "system.files.read", {"path": "/etc/hostname"}, ctx)
    assert (
        f"add a directory to allowedPaths in the agent's config ({path}) and restart it"
        in refused.value.message
    )


async def test_file_read_refuses_paths_outside(tree: Path) -> None:
    error = await refusal(tree, "system.files.read", path=str(tree / ".." / "secret.txt"))
    assert error.code == "refused"


@pytest.mark.parametrize("kind", ["fifo", "directory", "missing"])
async def test_file_read_refuses_what_is_not_a_regular_file(tree: Path, kind: str) -> None:
    target = tree / kind
    if kind == "fifo":
        os.mkfifo(target)  # reading it would block forever
    elif kind == "directory":
        target.mkdir()
    error = await refusal(tree, "system.files.read", path=str(target))
    assert error.code == "refused"


@pytest.fixture
def log(tree: Path) -> Path:
    path = tree / "app.log"
    lines = [f"2024-05-06 line {n} {'ERROR' if n % 10 == 0 else 'ok'}" for n in range(1, 5001)]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_logs_tail(tree: Path, log: Path) -> None:
    found = await run(tree, "system.logs.tail", path=str(log), lines=3)
    assert found["lines"] == [
        "2024-05-06 line 4998 ok",
        "2024-05-06 line 4999 ok",
        "2024-05-06 line 5000 ERROR",
    ]
    assert found["complete"] is True


async def test_logs_tail_with_filter_reaches_back(tree: Path, log: Path) -> None:
    found = await run(tree, "system.logs.tail", path=str(log), lines=2, contains="ERROR")
    assert found["lines"] == ["2024-05-06 line 4990 ERROR", "2024-05-06 line 5000 ERROR"]


async def test_logs_head(tree: Path, log: Path) -> None:
    found = await run(tree, "system.logs.head", path=str(log), lines=2, contains="ERROR")
    assert found["lines"] == ["2024-05-06 line 10 ERROR", "2024-05-06 line 20 ERROR"]


def test_tail_of_a_file_without_final_newline_and_with_crlf(tmp_path: Path) -> None:
    path = tmp_path / "crlf.log"
    path.write_bytes(b"one\r\ntwo\r\n\r\nthree")
    assert tail_lines(path, 2).lines == ["", "three"]
    assert tail_lines(path, 10).lines == ["one", "two", "", "three"]
    assert head_lines(path, 2).lines == ["one", "two"]


async def test_a_blank_line_counts_towards_lines(tree: Path) -> None:
    path = tree / "blank.log"
    path.write_text("l1\nl2\n\nl4\nl5")
    assert (await run(tree, "system.logs.head", path=str(path), lines=3))["lines"] == ["l1", "l2", ""]
    assert (await run(tree, "system.logs.tail", path=str(path), lines=3))["lines"] == ["", "l4", "l5"]


@pytest.mark.parametrize(
    "text",
    ["l1\nl2\n\nl4\nl5", "l1\nl2\n\nl4\nl5\n", "\nfirst blank\n\n\n", "\n", "", "x\n\n"],
)
@pytest.mark.parametrize("probe", ["tail", "head"])
async def test_logs_count_blank_lines_as_tail_and_head_do(tree: Path, text: str, probe: str) -> None:
    path = tree / "blank.log"
    path.write_text(text)
    for count in (1, 2, 3, 5):
        shown = await command_output(probe, "-n", str(count), str(path))
        found = await run(tree, f"system.logs.{probe}", path=str(path), lines=count)
        assert found["lines"] == shown.splitlines(), (count, shown)
    filtered = await run(tree, f"system.logs.{probe}", path=str(path), lines=5, contains="l")
    assert "" not in filtered["lines"]  # a filter keeps only lines that contain its text


def test_tail_stops_at_the_scan_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_text("needle\n" + "hay\n" * 100_000)
    found = tail_lines(path, 1, contains="needle", max_scan_bytes=64 * 1024)
    assert found.lines == []
    assert found.complete is False
    assert tail_lines(path, 1, contains="needle").lines == ["needle"]


def test_head_reads_within_the_scan_cap_however_long_a_line_is(tmp_path: Path) -> None:
    """Iterating a file reads a whole line before any cap is checked: a file with no newline
    (a sparse /var/log/lastlog of gigabytes) was read whole into memory. Now it is read in
    blocks, never past the cap, and a long line is kept to its first block."""
    path = tmp_path / "sparse.log"
    with path.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # 64 MiB of zero bytes, no newline
    found = head_lines(path, 2, max_scan_bytes=1024 * 1024)
    assert found.scanned_bytes == 1024 * 1024
    assert found.complete is False  # the cap, not the end of the file, stopped it
    assert found.lines == []  # NULs are no line (`rawlines`)
    assert found.nul_bytes_skipped == 1024 * 1024

    path.write_bytes(b"a" * 200_000 + b"\nsecond\n" + b"b" * 70_000 + b"\nthird")  # long lines, skipped past
    found = head_lines(path, 3)
    assert [line[:3] for line in found.lines] == ["aaa", "sec", "bbb"]
    assert (found.complete, found.scanned_bytes) == (True, 200_000 + 8 + 70_001)
    assert head_lines(path, 5).lines[-1] == "third"


@pytest.mark.parametrize(("probe", "kept"), [("tail", "the newest"), ("head", "the first")])
async def test_a_result_over_the_cap_keeps_the_lines_asked_for(tree: Path, probe: str, kept: str) -> None:
    """1000 lines of 300 bytes are over the agent's 256 KiB result cap: "the last 1000" loses
    its oldest lines, "the first 1000" its last ones, never the other way round."""
    path = tree / "busy.log"
    path.write_text("".join(f"{i:04d} " + "x" * 295 + "\n" for i in range(1000)))
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tree),)))
    outcome = await execute_probe(REGISTRY, f"system.logs.{probe}", {"path": str(path), "lines": 1000}, ctx)
    lines = outcome.result["lines"]
    assert outcome.truncated
    assert 0 < len(lines) < 1000
    numbers = [int(line[:4]) for line in lines]
    assert numbers == sorted(numbers)  # still oldest first
    if kept == "the newest":
        assert numbers[-1] == 999
    else:
        assert numbers[0] == 0


def test_long_lines_are_cut(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    path.write_text("a" * 10_000 + "\n")
    [line] = tail_lines(path, 1).lines
    assert len(line) == 4096
    assert line.endswith("…")


def test_binary_sniffing() -> None:
    assert looks_binary(b"\x7fELF\x00\x01")
    assert looks_binary(bytes(range(32)) * 10)
    assert not looks_binary("grüße, 日本\n\ttab\x1b[0m".encode())
    assert not looks_binary("café".encode("latin-1"))  # not UTF-8, still text
