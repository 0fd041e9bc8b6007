"""The MCP server: the tools over MCP (stdio and /mcp), a run's displays and output as MCP content and notifications."""
