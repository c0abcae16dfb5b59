"""The hub's WebSockets never take permessage-deflate.

Hypercorn agrees to it whenever a client offers it, and wsproto inflates each compressed
frame whole before hypercorn counts the message's size: before any agent key was checked,
one 199 KiB frame took the hub from 125 to 455 MiB and held its event loop 0.5-0.85 s (a
review's deflate bomb). Agents never compress (trio-websocket offers no extension), so the
hub declines the offer; a compressed frame is then a protocol error that closes the socket.
"""

from __future__ import annotations

from hypercorn.protocol import ws_stream
from wsproto.extensions import PerMessageDeflate


class DeflateDeclined(PerMessageDeflate):
    """permessage-deflate as hypercorn offers it, declining every client's offer."""

    def accept(self, offer: str) -> None:
        return None


def decline_deflate() -> None:
    """Make hypercorn's WebSocket handshakes decline permessage-deflate."""
    stream_globals = vars(ws_stream)
    current = stream_globals.get("PerMessageDeflate")
    if not (isinstance(current, type) and issubclass(current, PerMessageDeflate)):
        raise RuntimeError(
            "hypercorn.protocol.ws_stream no longer offers PerMessageDeflate; revisit sonde.hub.ws_uncompressed"
        )
    stream_globals["PerMessageDeflate"] = DeflateDeclined
