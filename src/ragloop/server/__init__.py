"""Serving ragloop: the HTTP API with its web page (:mod:`.app`), the OpenAI-compatible route
(:mod:`.openai_compat`) and the MCP server (:mod:`.mcp`), all clients of one :class:`Service`
(:mod:`.service`) with its access control (:mod:`.access`). Needs ``ragloop[server]``."""
