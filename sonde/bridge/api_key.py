"""The API key the bridge sends: where it came from, a newer one `sonde login` stored, and the
words for a key the hub refuses.

The bridge reads its settings once, at start. A key from the config file
(written by `sonde login`) is read again when the hub refuses the key: if
`sonde login` stored another one since, the bridge uses it from then on, so
following the advice of a 401 works without restarting the MCP client. A key
from ``SONDE_API_KEY`` or ``--api-key`` is fixed for the bridge's life, and
the advice says where to change it and that the client must then be restarted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import trio

from sonde.bridge.settings import KEY_ENV, check_api_key

log = logging.getLogger(__name__)

KEY_FLAG = "--api-key"
CAUSE_WORDS = ("revoked", "expired")  # the hub's own text already says why


@dataclass
class ApiKey:
    """The key sent now; ``origin`` is `KEY_FLAG`, `KEY_ENV` or the config file's path (then ``config_file``)."""

    value: str
    origin: str = KEY_FLAG
    config_file: Path | None = None
    hub_url: str = "URL"

    async def renewed(self, sent: str) -> bool:
        """After the hub refused ``sent``: whether there is another key to send now.

        True when another request already switched, or when the config file holds
        a key other than ``sent`` (which becomes `value`). The file is read in a thread.
        """
        if self.value != sent:
            return True
        if self.config_file is None:
            return False
        stored = await trio.to_thread.run_sync(self.stored_key)
        if stored is None or stored == sent:
            return False
        log.warning("the hub refused the API key; %s holds a new one (`sonde login`): using it", self.origin)
        self.value = stored
        return True

    def stored_key(self) -> str | None:
        """The key in the config file now; None if there is none (the reason logged)."""
        from sonde.agent.config import ConfigError, load_config

        try:
            config = load_config(self.config_file)
            return check_api_key(config.api_key) if config and config.api_key else None
        except (ConfigError, ValueError) as exc:
            log.warning("could not read a new API key from %s: %s", self.origin, exc)
            return None

    def refused(self, detail: str) -> str:
        """What to do about a key the hub refused; ``detail`` is the hub's own reason."""
        said = any(word in detail.lower() for word in CAUSE_WORDS)
        cause = "" if said else " (wrong or revoked)"
        if self.config_file is not None:
            return (
                f"the hub refused the API key the bridge read from {self.origin}{cause}: run "
                f"`sonde login --hub {self.hub_url}` with a valid key; the running bridge picks it up "
                "at its next call"
            )
        where = "the MCP client's env config" if self.origin == KEY_ENV else "the MCP client's config (args)"
        return (
            f"the hub refused the API key the bridge took from {self.origin}{cause}; the bridge reads it "
            f"only at start: fix {self.origin} in {where} for this server, then restart the MCP client"
        )
