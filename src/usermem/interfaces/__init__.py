"""Thin adapters over the engine: CLI, HTTP API, MCP server, Python client."""
