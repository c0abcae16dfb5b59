"""`sonde hub --log-format json`: every line on stderr is one JSON object, for a log shipper.

Before, the hub wrote its first-start banner (eight lines), ``sonde hub listening on ...``
and ``sonde hub: shutting down`` as plain text between the JSON records, and the SDK's
refusal of a Host came as its own bare line: a shipper reading line by line choked on
them. Text mode keeps them as they were (tests/e2e/test_first_key.py).
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.procs import base_env, on_a_terminal, running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def records(lines: list[str]) -> list[dict[str, Any]]:
    """Each line as the JSON object it must be (a line that is not one fails here, named)."""
    parsed = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(record, dict), line
        assert {"ts", "level", "logger", "message"} <= record.keys(), record
        parsed.append(record)
    return parsed


def test_every_stderr_line_of_a_json_hub_is_one_json_object(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--log-format", "json") as hub:
        with httpx.Client(base_url=hub.url, timeout=10) as http:
            # a refused login and a refused Host: warnings of the hub's and of the SDK's
            assert http.get("/api/v1/api-keys", headers={"Authorization": "Bearer nope"}).status_code == 401
            assert (
                http.get(
                    "/mcp", headers={"Authorization": f"Bearer {hub.admin_key}", "Host": "evil.example"}
                ).status_code
                == 421
            )
        assert hub.proc.stop(signal.SIGTERM) == 0
    said = records(hub.proc.lines)
    messages = [record["message"] for record in said]
    [first_key] = [r for r in said if r["message"].startswith("first start: created an admin API key")]
    assert first_key["keyFile"] == str(hub.data_dir / "first-admin-key")
    assert hub.admin_key not in hub.proc.output
    [listening] = [r for r in said if r["message"].startswith("sonde hub listening on ")]
    assert listening["url"] == hub.url
    assert listening["mcpUrl"] == f"{hub.url}/mcp"
    [stopping] = [r for r in said if r["message"] == "sonde hub: shutting down"]
    assert (stopping["level"], stopping["signal"]) == ("info", "SIGTERM")
    assert any("Running on http://" in message for message in messages)  # hypercorn's, as a record
    # named hypercorn, not hypercorn.error: a search of the log for "error" found it at each start
    assert not any("error" in record["logger"] for record in said if record["level"] == "info"), said


def test_a_json_hub_on_a_terminal_keeps_the_first_key_out_of_its_log(tmp_path: Path) -> None:
    # JSON lines are for a shipper even when stderr is a terminal: the key goes to the file
    data_dir = tmp_path / "data"
    args = ["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir), "--log-format", "json"]
    with on_a_terminal(args, base_env(tmp_path / "home"), re.compile("sonde hub listening on")) as seen:
        pass
    said = records([line for line in seen.replace("\r\n", "\n").splitlines() if line.strip()])
    key = (data_dir / "first-admin-key").read_text().strip()
    assert key.startswith("sonde_")
    assert key not in seen
    assert any(r.get("keyFile") == str(data_dir / "first-admin-key") for r in said), said
