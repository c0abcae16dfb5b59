"""What the hub serves under / and /ui/: the dashboard's own files and nothing else, and never a
redirect built from the caller's Host header. Against the shared fleet's real hub."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sonde.hub.rest import webui_dir
from tests.e2e.harness import SharedFleet

pytestmark = pytest.mark.e2e

DASHBOARD_FILES = {"index.html": "text/html", "app.js": "javascript", "app.css": "text/css"}


def plain_client(fleet: SharedFleet) -> httpx.Client:
    """No key, no redirects followed: the answer as a browser or a shared cache first sees it."""
    return httpx.Client(base_url=fleet.hub.url, timeout=10, follow_redirects=False)


def unknown_path_answer(http: httpx.Client) -> tuple[int, Any]:
    return generic(http.get("/api/v1/nonexistent"))


def generic(answer: httpx.Response) -> tuple[int, Any]:
    """A 404's status and body, the path its message names made generic (`nothing is served at
    PATH: ...`), so that the answers of different paths compare equal."""
    body = answer.json()
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        path = answer.url.raw_path.decode()
        body["error"]["message"] = body["error"].get("message", "").replace(f" at {path}:", " at PATH:")
    return answer.status_code, body


def test_a_doubled_slash_is_never_redirected_to_the_callers_host(fleet: SharedFleet) -> None:
    """Before: `/ui//x` with `Host: evil.example` answered 308 `location: http://evil.example/ui/x`
    (and `/api//v1/agents` likewise): a redirect a shared cache could keep for everyone."""
    with plain_client(fleet) as http:
        not_found = unknown_path_answer(http)
        for path in ("/ui//x", "/ui//app.js", "/api//v1/agents", "/api/v1//health"):
            answer = http.get(path, headers={"Host": "evil.example"})
            assert "location" not in answer.headers, (path, answer.headers["location"])
            assert generic(answer) == not_found, path


def test_only_the_dashboards_own_files_are_served(fleet: SharedFleet) -> None:
    """Before: `/ui/__init__.py` answered 200 (text/x-python, empty): the package's Python files
    were served as dashboard files."""
    root = webui_dir()
    others = sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and path.relative_to(root).as_posix() not in DASHBOARD_FILES
    )
    assert "__init__.py" in others
    with plain_client(fleet) as http:
        not_found = unknown_path_answer(http)
        for name, kind in DASHBOARD_FILES.items():
            answer = http.get(f"/ui/{name}")
            assert answer.status_code == 200, name
            assert kind in answer.headers["content-type"], name
        assert http.get("/").headers["content-type"].startswith("text/html")
        for name in [*others, "__pycache__/__init__.cpython-311.pyc", "app.js/", "nosuch.js", ""]:
            answer = http.get(f"/ui/{name}")
            assert answer.status_code == 404, (name, answer.status_code, answer.headers["content-type"])
            assert generic(answer) == not_found, name
