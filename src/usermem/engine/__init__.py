"""The engine: pipelines (write, recall, lifecycle, erasure, sessions) over policy and store."""
