"""Moved to :mod:`usermem.evals.pii` (all evaluations live in ``usermem.evals``); this name stays importable."""

from __future__ import annotations

from usermem.evals.pii import (
    DEFAULT_SEED,
    TARGET_MAX_FP_RATE,
    TARGET_RECALL,
    Planted,
    Sample,
    build_corpus,
    evaluate,
    render_markdown,
)

__all__ = ["DEFAULT_SEED", "TARGET_MAX_FP_RATE", "TARGET_RECALL", "Planted", "Sample", "build_corpus", "evaluate",
           "render_markdown"]
