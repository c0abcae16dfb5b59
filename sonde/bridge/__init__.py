"""`sonde mcp-bridge`: stdio JSON-RPC <-> the hub's Streamable HTTP endpoint."""
