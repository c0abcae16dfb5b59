"""What a client on the Python MCP SDK is told when the hub refuses its request.

Regression: the hub's refusals on /mcp were its REST shape, ``{"error": {"code": "<word>",
"message"}}``. The SDK reads a non-2xx body only as a JSON-RPC error, so a wrong key, a key
revoked mid-session, a body too large, all reached its user as "Server returned an error
response". They are JSON-RPC errors now, the hub's word in ``error.data.code``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.e2e.mcpclient import mcp_client
from tests.e2e.procs import running_hub

pytestmark = pytest.mark.e2e


def only_leaf(error: BaseException) -> BaseException:
    """The one exception inside ``error``'s groups (the SDK's task groups wrap it)."""
    while isinstance(error, BaseExceptionGroup):
        (error,) = error.exceptions
    return error


async def test_the_sdk_shows_the_hubs_refusal_of_a_wrong_key_and_of_a_revoked_one(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True) as wrong:  # from the client's task group
            async with mcp_client(hub.url, "sonde_" + "Q" * 43):
                pass
        refusal = only_leaf(wrong.value)
        assert isinstance(refusal, MCPError)
        assert "a valid API key is required" in str(refusal), refusal
        assert refusal.error.data == {"code": "unauthorized"}

        created = hub.cli("hub", "key", "create", "--name", "short-lived")
        assert created.returncode == 0, created.stderr
        found = re.search(r"API key ([0-9a-f]{32})", created.stderr)
        assert found is not None, created.stderr
        async with mcp_client(hub.url, created.stdout.strip()) as client:
            assert not (await client.call_tool("list_agents", {})).is_error
            revoked = hub.cli("hub", "key", "revoke", found.group(1))
            assert revoked.returncode == 0, revoked.stderr
            refused = None
            with trio.move_on_after(15):  # the hub's cache of keys lets it go within 5 s
                while refused is None:
                    try:
                        await client.call_tool("list_agents", {})
                    except MCPError as exc:
                        refused = exc
                    await trio.sleep(0.3)
            assert refused is not None, "the revoked key was still served after 15 s"
            assert str(refused).startswith("this API key was revoked at "), refused
            assert refused.error.data == {"code": "unauthorized"}
