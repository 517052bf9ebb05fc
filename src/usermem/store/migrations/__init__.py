"""Versioned schema migrations, one directory per backend; files are NNNN_name.sql applied in order."""

from __future__ import annotations

from importlib import resources


def load(backend: str) -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration of a backend, in order."""
    folder = resources.files("usermem.store.migrations").joinpath(backend)
    out = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)
