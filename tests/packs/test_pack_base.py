"""`Pack` loads its probe modules on first use, in declaration order; `PythonPattern` = `Field(pattern=)`."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import pytest
from pydantic import BaseModel, Field, ValidationError

from sonde.packs.base import Pack, PackLoadError
from sonde.packs.textpattern import PythonPattern

PATTERNS = [r"^/[^\x00-\x1f]{0,4095}$", r"^[^\x00-\x1f]{1,200}$"]
VALUES: list[object] = ["/a", "rel", "/a\n", "", "a\tb", "x" * 200, "x" * 201, "/" + "é" * 4095, 3, None]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_python_pattern_schema_and_errors_match_field_pattern(pattern: str) -> None:
    class ByField(BaseModel):
        value: Annotated[str, Field(strict=True, description="d", pattern=pattern)]

    class ByPython(BaseModel):
        value: Annotated[str, Field(strict=True, description="d"), PythonPattern(pattern)]

    assert ByPython.model_json_schema() | {"title": "ByField"} == ByField.model_json_schema()
    for value in VALUES:
        outcomes = []
        for model in (ByField, ByPython):
            try:
                outcomes.append(model.model_validate({"value": value}).value)
            except ValidationError as exc:
                outcomes.append(exc.errors())
        assert outcomes[0] == outcomes[1], value


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_detection_imports_no_probe_module() -> None:
    code = (
        "import sys\n"
        "from sonde.packs.registry import load_packs\n"
        "for pack in load_packs().packs.values(): pack.detection()\n"
        "print(sorted(m for m in sys.modules if m.startswith('sonde.packs.') and m.count('.') == 3))\n"
    )
    loaded = run_python(code)
    assert "sonde.packs.system.memory" not in loaded
    assert "sonde.packs.docker.probes" not in loaded
    assert "sonde.protocol.messages" not in run_python(code.replace("m.count('.') == 3", "True"))


def test_probe_order_does_not_depend_on_what_was_imported_first() -> None:
    code = "{first}from sonde.packs.system import PACK\nprint(list(PACK.probes))\n"
    alone = run_python(code.format(first=""))
    # the redis and systemd packs import sonde.packs.system.info, which declares a system probe
    early = run_python(code.format(first="import sonde.packs.systemd.journal, sonde.packs.redis.probes\n"))
    assert alone == early
    assert alone.index("system.block.devices") < alone.index("system.info")


def test_a_probe_module_that_fails_to_import_fails_every_use_not_just_the_first() -> None:
    pack = Pack(name="broken", version="1", description="d", modules=("tests.packs.no_such_module",))
    for _ in range(2):
        with pytest.raises(
            PackLoadError,
            match=r"pack broken 1 could not load its probe code \(tests\.packs\.no_such_module: ModuleNotFoundError",
        ) as caught:
            _ = pack.probes
        assert isinstance(caught.value.__cause__, ModuleNotFoundError)
