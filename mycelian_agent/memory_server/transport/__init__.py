"""Transports for the MCP server: streamable HTTP (:mod:`.http_app`) and stdio (:mod:`.stdio`)."""
