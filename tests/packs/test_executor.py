"""What a probe's result must be before it leaves: valid Unicode and within the cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sonde.agent.config import AgentConfig
from sonde.agent.scrubber import Scrubber
from sonde.packs import executor
from sonde.packs.base import NoParams, Pack, Result
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, cap_result, execute_probe, is_cancellation
from sonde.packs.registry import PackRegistry, load_packs
from tests.agent.probes import Waiters, context_with, registry_for_tests


def test_cap_result_repairs_text_only_when_it_must() -> None:
    good = {"name": "sleeper"}
    assert cap_result(good, 1000)[0] is good  # nothing copied in the common case
    repaired, truncated, size = cap_result({"name": "\udcffsleeper"}, 1000)
    assert repaired == {"name": "\\xffsleeper"}
    assert not truncated
    assert size == len(json.dumps(repaired, separators=(",", ":")).encode())


def test_an_error_quoting_a_name_that_is_not_utf8_says_it_escaped() -> None:
    error = ProbeExecutionError("permission_denied", "permission denied: /var/log/\udcff.log")
    assert error.message == "permission denied: /var/log/\\xff.log"
    assert str(error) == error.message


async def test_the_scrubber_sees_the_whole_result_before_the_cap() -> None:
    seen: list[str] = []

    def scrub(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
        seen.append(data["secret"])
        return data | {"secret": data["secret"].replace("hunter2", "[REDACTED]")}, 1

    secret = "x" * 3000 + "hunter2"  # cut first, the second half would not be seen
    outcome = await execute_probe(
        registry_for_tests(),
        "testpack.echo.value",
        {"value": 1, "secret": secret},
        context_with(Waiters()),
        max_result_bytes=1000,
        scrub=scrub,
    )
    assert seen == [secret]
    assert outcome.redactions == 1
    assert outcome.truncated  # the cap still bounds the scrubbed result
    assert outcome.output_bytes <= 1000


async def test_a_pack_whose_files_changed_under_the_agent_says_to_restart_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what a half-done in-place upgrade looks like: a new probe module wanting an old one's new name
    (tmp_path / "upgraded_probes.py").write_text("from sonde.packs.base import NameFromANewerSonde\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = Pack("upgraded", "1.2.3", "a pack upgraded in place", modules=("upgraded_probes",))
    registry = PackRegistry.of([broken, *registry_for_tests().packs.values()])
    for name in ("upgraded.any.probe", "upgraded.other.probe"):
        with pytest.raises(ProbeExecutionError) as caught:
            await execute_probe(registry, name, {}, context_with(Waiters()))
        assert caught.value.code == "probe_failed"
        assert caught.value.message.startswith("pack upgraded 1.2.3 could not load its probe code")
        assert (
            "upgraded_probes: ImportError: cannot import name 'NameFromANewerSonde'" in caught.value.message
        )
        assert "restart it" in caught.value.message
    # the other packs still answer
    outcome = await execute_probe(registry, "testpack.echo.value", {"value": 1}, context_with(Waiters()))
    assert outcome.result["value"] == 1


EXITING = Pack("exiting", "1", "a probe whose code calls sys.exit")


@EXITING.probe("exiting.sys.exit", "raises SystemExit(3)")
async def exiting_probe(ctx: ProbeContext, params: NoParams) -> Result:
    raise SystemExit(3)


async def test_a_probe_raising_system_exit_fails_alone_and_the_process_goes_on() -> None:
    registry = PackRegistry.of([EXITING])
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(registry, "exiting.sys.exit", {}, context_with(Waiters()))
    assert caught.value.code == "probe_failed"
    assert caught.value.message == "probe exiting.sys.exit failed: SystemExit: 3"


def test_cancellation_and_interrupts_are_not_a_probes_own_failure() -> None:
    assert is_cancellation(KeyboardInterrupt())
    assert is_cancellation(BaseExceptionGroup("g", [ValueError(), KeyboardInterrupt()]))
    assert not is_cancellation(SystemExit(3))
    assert not is_cancellation(BaseExceptionGroup("g", [SystemExit(3)]))


def test_a_long_tail_of_long_lines_is_cut_in_a_few_passes_keeping_whole_newest_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = [f"{n:05d}" + "x" * 4995 for n in range(5000)]  # 25 MB of JSON, as a big log tail
    measured: list[int] = []
    measure = executor.json_size

    def counted(value: object) -> int:
        measured.append(measure(value))
        return measured[-1]

    monkeypatch.setattr(executor, "json_size", counted)
    capped, truncated, size = cap_result({"lines": lines}, 256 * 1024, frozenset({"lines"}))
    assert truncated
    assert capped["truncated"] is True
    assert size <= 256 * 1024
    kept = capped["lines"]
    assert kept == lines[-len(kept) :]  # the newest, whole
    assert len(kept) >= 256 * 1024 // 5003 - 2  # about as many as fit
    # a few passes over the result: halving the longest string one at a time, re-measuring
    # the whole result after each, measured thousands of times its size and took minutes
    assert sum(measured) < 10 * measure({"lines": lines})


def test_one_huge_string_is_cut_to_the_cap_in_one_step() -> None:
    text = "é" * 3_000_000
    capped, truncated, size = cap_result({"content": text, "path": "/x"}, 256 * 1024)
    assert truncated
    assert size <= 256 * 1024
    assert capped["content"].endswith("…[truncated]")
    assert text.startswith(capped["content"].removesuffix("…[truncated]"))
    assert size > 0.9 * 256 * 1024  # not cut far below what fits
    assert capped["path"] == "/x"


def test_a_list_keeps_its_start_unless_it_is_a_last_n_answer() -> None:
    rows = [{"n": n, "text": "y" * 100} for n in range(2000)]
    capped, truncated, size = cap_result({"rows": rows}, 20_000)
    assert truncated
    assert size <= 20_000
    assert capped["rows"] == rows[: len(capped["rows"])]


async def test_a_result_is_scrubbed_before_the_cap_cuts_it(tmp_path: Path) -> None:
    """An operator pattern needs its closing brace: were the content cut to fit the cap first,
    the ``TOKEN{...`` the cut went through would lose its brace and pass unredacted. (The cap
    is made small here: `system.files.read` fits its own answer under the real one.)"""
    secret = "TOKEN{" + "s" * 40 + "}"
    path = tmp_path / "big.txt"
    path.write_text(("a" * 1000 + secret) * 180 + "\n")  # one every KiB: a cut goes through one
    config = AgentConfig(allowed_paths=[str(tmp_path)], scrub_patterns=[r"TOKEN\{[^}]*\}"])
    outcome = await execute_probe(
        load_packs(),
        "system.files.read",
        {"path": str(path), "max_bytes": 192 * 1024},
        ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),))),
        max_result_bytes=64 * 1024,
        scrub=Scrubber.from_config(config).scrub_result,
    )
    content = outcome.result["content"]
    assert outcome.truncated
    assert 32 * 1024 < len(content) < 64 * 1024
    assert "TOKEN{" not in content
    assert "[REDACTED]" in content
