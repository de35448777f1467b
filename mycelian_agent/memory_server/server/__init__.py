"""The MCP server side: the tools (:mod:`.app`), the store's lifetime (:mod:`.runtime`), the in-process connection
(:mod:`.local`), access control (:mod:`.access`) and the HTTP host checks (:mod:`.hosts`)."""
