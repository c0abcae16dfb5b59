"""The hub: MCP, REST and the agent WebSocket in one process."""
