"""memoryd's MCP server."""
