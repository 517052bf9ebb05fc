"""A hashing bag-of-words embedder for tests: deterministic in every process (crc32, not the salted `hash`),
no model, 64 dimensions."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from usermem.relevance.lexical import tokenize


class ToyEmbedder:
    model_id = "toy/hash@64"
    dim = 64

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for tok in tokenize(text):
            v[zlib.crc32(tok.encode()) % self.dim] += 1
        n = np.linalg.norm(v)
        return v / n if n else v

    def query(self, text: str) -> np.ndarray:
        return self._vec(text)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


class CrcBow32(ToyEmbedder):
    """32 buckets, so unrelated words collide now and then; an empty text gets the uniform unit vector (never
    the zero vector: the protocol's vectors have unit length)."""

    model_id = "test/crc-bow@32"
    dim = 32

    def _vec(self, text: str) -> np.ndarray:
        v = super()._vec(text)
        return v if v.any() else v + np.float32(1.0 / np.sqrt(self.dim))
