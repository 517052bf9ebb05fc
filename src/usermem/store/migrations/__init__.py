"""Versioned schema migrations, one directory per backend; files are NNNN_name.sql applied in order.

A migration whose first lines hold ``-- usermem: requires extension <name>`` is optional: the backend
applies it only where that extension is installed (or can be installed), else leaves it pending and
tries again at the next start. Inside it, ``@extschema:<name>@`` stands for the extension's schema.
Later migrations never depend on an optional one, except optional ones that need the same extension (applied
in order after it, in the same start; PostgreSQL 0009 alters 0004's table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_REQUIRES = re.compile(r"^--\s*usermem:\s*requires extension\s+([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    requires: tuple[str, ...] = ()  # PostgreSQL extensions this migration needs (optional migration)


def load_migrations(backend: str) -> list[Migration]:
    """Every migration of a backend, in order."""
    folder = resources.files("usermem.store.migrations").joinpath(backend)
    out = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            text = entry.read_text(encoding="utf-8")
            header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
            out.append(Migration(int(entry.name.split("_", 1)[0]), entry.name, text,
                                 tuple(_REQUIRES.findall(header))))
    return sorted(out, key=lambda m: m.version)


def load(backend: str) -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration of a backend, in order."""
    return [(m.version, m.name, m.sql) for m in load_migrations(backend)]
