"""Architecture rules that a reader could break without noticing (docs/architecture.md).

The layer contracts themselves are checked by `lint-imports` (pyproject [tool.importlinter], `make lint`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import usermem

SRC = Path(usermem.__file__).parent
# The public API of named tuples, not private state.
NAMEDTUPLE_API = {"_make", "_fields", "_replace", "_asdict"}
# Files allowed a reach-in while their owner replaces it (none left: bench/ moved to store.sql()/analyze(),
# routes_ext.py became the per-area routers). Add an entry only with a reason and an owner.
PENDING: set[str] = set()


def _reach_ins(path: Path, root: Path = SRC) -> list[str]:
    """`x._name` where x is not self/cls: one object touching another's private attribute."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(root)}:{n.lineno}: .{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
            and n.attr not in NAMEDTUPLE_API
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]


def test_no_module_touches_another_objects_private_attributes():
    offenders = [hit for p in sorted(SRC.rglob("*.py")) if str(p.relative_to(SRC)) not in PENDING
                 for hit in _reach_ins(p)]
    assert offenders == [], "use a public method or a port (engine/ports.py) instead:\n" + "\n".join(offenders)


def test_the_rule_sees_a_reach_in(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(memory, row):\n    return memory._recall, self._ok, row._make, memory.__dict__\n",
                      encoding="utf-8")
    assert _reach_ins(sample, tmp_path) == ["sample.py:2: ._recall"]


def test_plug_ins_do_not_import_the_engine():
    """Plug-ins get ports (their own host Protocols); importing the engine would bring the cycle back."""
    for package in ("relevance", "understand", "events"):
        for p in sorted((SRC / package).rglob("*.py")):
            if p.name == "evaluate.py":  # the relevance evaluation builds a Memory; it moves to usermem.evals
                continue
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(n == "usermem.engine" or n.startswith("usermem.engine.") for n in names), \
                    f"{p.relative_to(SRC)}:{node.lineno} imports the engine"
