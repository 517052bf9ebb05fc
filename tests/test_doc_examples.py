"""Every ```python example in README.md and docs/*.md runs as written.

Blocks of one file run in order in one fresh namespace (later blocks continue the story of earlier ones, as
a reader would type them), in a fresh working directory, against an embedded Memory. Two markers, as the
block's first line, say why a block is not run:
- `# doc-test: needs-server (<why>)` — it talks to a running service (HTTP Client, NATS); it must compile
  (top-level await allowed) and the service flow is run by the test named in the reason;
- `# doc-test: signatures (...)` — a list of calls with their parameters, not a program; every `m.<name>(`
  in it must be a Memory method.
docs/integrations.md runs in tests/test_integration_docs.py (its blocks need the adapter libraries).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

from usermem import Client, Memory

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OWN_TEST = {"integrations.md"}
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
MARKER = re.compile(r"# doc-test: (needs-server|signatures) \((.+)\)")


def _blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def _marker(code: str) -> tuple[str, str] | None:
    found = MARKER.match(code.splitlines()[0]) if code.strip() else None
    return (found.group(1), found.group(2)) if found else None


DOCS = [p for p in FILES if p.name not in OWN_TEST and _blocks(p)]


def test_examples_are_found_and_markers_are_rare() -> None:
    every = [code for p in DOCS for code in _blocks(p)]
    assert len(every) >= 15
    marked = [code for code in every if _marker(code)]
    assert len(marked) <= 3, "most examples must run; mark only what needs a server or is a signature list"
    for code in every:  # a misspelt marker would silently run (or fail): only the two forms exist
        first = code.splitlines()[0] if code.strip() else ""
        assert not first.startswith("# doc-test") or _marker(code), first


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_examples_run_as_written(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("USERMEM_STORE_URL", "USERMEM_CONFIG", "USERMEM_LLM_BASE_URL", "USERMEM_NATS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("USERMEM_EMBEDDER", "none")  # the bundled model gives the same results, slower
    (tmp_path / "data").mkdir()
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    for i, code in enumerate(_blocks(doc)):
        where = f"{doc.name} example {i + 1}"
        marker = _marker(code)
        if marker and marker[0] == "needs-server":
            compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            called = set(re.findall(r"\bm\.([a-z_]+)\(", code))
            assert all(hasattr(Client, n) for n in called), where
            continue
        if marker and marker[0] == "signatures":
            called = set(re.findall(r"\bm\.([a-z_]+)\(", code))
            assert called and all(callable(getattr(Memory, n, None)) for n in called), \
                (where, sorted(n for n in called if not hasattr(Memory, n)))
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(code, where, "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"{where} failed: {type(exc).__name__}: {exc}\n{code}") from exc
    for value in namespace.values():
        if isinstance(value, Memory):
            value.close()
