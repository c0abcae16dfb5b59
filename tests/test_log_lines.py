"""Text log lines carry their UTC offset: a hub and its agents may sit in different zones."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

LINE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} [+-]\d{4} WARNING probe: hello$")


@pytest.mark.parametrize("module", ["sonde.hub.logs", "sonde.agent.main"])
@pytest.mark.parametrize(("zone", "offset"), [("UTC", "+0000"), ("Asia/Kolkata", "+0530")])
def test_a_text_log_line_names_its_offset(module: str, zone: str, offset: str) -> None:
    setup = "configure_logging('text', 'INFO')" if module.endswith("logs") else "configure_logging('INFO')"
    code = f"import logging\nfrom {module} import configure_logging\n{setup}\nlogging.getLogger('probe').warning('hello')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TZ": zone},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    line = done.stderr.strip()
    assert LINE.match(line), line
    assert f" {offset} WARNING" in line
