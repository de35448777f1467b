"""The MCP server side: the tools (:mod:`.app`), the store's lifetime (:mod:`.runtime`), the in-process connection
(:mod:`.local`) and access control (:mod:`.access`)."""
