"""Every Python example in docs/integrations.md runs as written (in-memory Memory, no network)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_doc_has_examples():
    assert len(BLOCKS) == 4


@pytest.mark.parametrize("code", BLOCKS, ids=["langgraph", "openai_agents", "anthropic", "langchain"])
def test_example_runs(code: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("USERMEM_EMBEDDER", "none")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})
    text = out.getvalue()
    assert text.strip()
    if "UsermemStore(" in code:
        assert "{'text': 'planning a trip to Kyoto in spring'}" in text and "[('alice', 'notes'), " \
            "('alice', 'preference')]" in text
    if "UsermemSession(" in code:
        assert text.startswith("episode [") and "city" in text and "reply_length" in text
    if "UsermemMemoryTool(" in code:
        assert "File created successfully at: /memories/prefs.md" in text and "/memories/prefs.md" in text
    if "UsermemRetriever(" in code:
        assert text.startswith("drink: green tea\n") and 'ADD: city = "Berlin"' in text


@pytest.mark.parametrize(("module", "blocked", "extra"), [
    ("langgraph", "langgraph.store.base", "langgraph"), ("anthropic", "anthropic.lib.tools", "anthropic"),
    ("openai_agents", "agents", "openai-agents"), ("langchain", "langchain_core.callbacks", "langchain")])
def test_a_missing_framework_names_the_extra(module: str, blocked: str, extra: str,
                                              monkeypatch: pytest.MonkeyPatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, blocked, None)  # as if the framework were not installed
    monkeypatch.delitem(sys.modules, f"usermem.integrations.{module}", raising=False)
    with pytest.raises(ImportError, match=re.escape(f"pip install 'usermem[{extra}]'")):
        importlib.import_module(f"usermem.integrations.{module}")
