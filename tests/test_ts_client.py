"""The TypeScript client (clients/typescript): its generated method table is up to date with the catalogue and
the OpenAPI schema, it has one method per catalogue operation with an HTTP route, and node's own test runner
passes its tests against a live `usermem serve` (write, recall incl. withheld, history, forget, assemble, errors,
tenant isolation, retries). Node is a backend here: missing, the tests skip — or fail under
USERMEM_REQUIRE_BACKENDS=1 (`make test` installs it from Debian: scripts/ensure_node.sh)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from apihelp import Server
from backends import unavailable

ROOT = Path(__file__).resolve().parent.parent
TS = ROOT / "clients" / "typescript"


def _which_node() -> str | None:
    return shutil.which("node") or shutil.which("nodejs")


def _node() -> str:
    node = _which_node()
    if node is None:  # as tests/backends.py does for the servers: try Debian's package once
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["bash", str(ROOT / "scripts" / "ensure_node.sh")], capture_output=True, timeout=600,
                           check=False)
        node = _which_node()
    if node is None:
        unavailable("node is not installed (make test installs Debian's nodejs: scripts/ensure_node.sh)")
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    version = re.match(r"v(\d+)", out)
    if version is None or int(version.group(1)) < 18:
        unavailable(f"node {out} is too old: the client needs Node >= 18 (global fetch, node --test)")
    return node


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def test_generated_files_are_up_to_date() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ts_client.py"), "--check"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_one_method_per_catalogue_operation_with_an_http_route() -> None:
    from usermem.interfaces.catalog import CLIENT_EXTRAS, OPERATIONS

    node = _node()
    out = subprocess.run([node, "--input-type=module", "-e",
                          "import { OPERATIONS, Client } from './src/index.js';"
                          "console.log(JSON.stringify(Object.fromEntries(Object.entries(OPERATIONS).map("
                          "([k, v]) => [k, [v.name, v.method, v.path, typeof Client.prototype[k]]]))))"],
                         cwd=TS, capture_output=True, text=True, check=True, timeout=60).stdout
    table = json.loads(out)
    expected = {_camel(op.name): (op.name, op.http.method, op.http.path) for op in OPERATIONS.values() if op.http}
    expected |= {_camel(n): (n, *r.split(" ", 1)) for n, r in CLIENT_EXTRAS.items()}
    assert {k: tuple(v[:3]) for k, v in table.items()} == expected
    assert {v[3] for v in table.values()} == {"function"}
    assert "contractsFor" not in table  # no HTTP route, so no client method (as in the Python client)


def test_absent_answers_follow_the_python_client() -> None:
    """The generator's 404 → "empty" table covers exactly the operations where the Python client maps a 404 to an
    empty answer (client_calls' `absent`), except `export` (documented: NotFound in TypeScript)."""
    import importlib.util
    import inspect

    from usermem.interfaces import client_calls as C
    from usermem.interfaces.catalog import OPERATIONS

    spec = importlib.util.spec_from_file_location("gen_ts_client", ROOT / "scripts" / "gen_ts_client.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    dummy: dict[str, object] = {"contract": {"key": "k"}, "rule": {"id": "k"}, "answers": {}, "writes": [],
                                "questions": [], "messages": []}
    python_absent = set()
    for op in OPERATIONS.values():
        if op.http is None:
            continue
        fn = getattr(C, op.name)
        kw = {n: (None if n == "tenant" else dummy.get(n, "x")) for n, p in inspect.signature(fn).parameters.items()
              if p.default is inspect.Parameter.empty}
        if op.name == "forget_range":
            kw["since"] = 1.0
        if fn(**kw).absent is not C._NO_DEFAULT:
            python_absent.add(op.name)
    assert set(gen.ABSENT) == python_absent - {"export"}


def test_node_test_runner_against_a_live_server(tmp_path: Path) -> None:
    node = _node()
    db = tmp_path / "usermem.db"
    from usermem import Memory
    from usermem.config import load_settings
    from usermem.interfaces.api.keys import KeyRing

    m = Memory(f"sqlite:///{db}", settings=load_settings(env={}, embedder="none"))
    try:
        other, _ = KeyRing(m.store).create("globex", name="ts-test")
    finally:
        m.close()
    server = Server(db, env={"USERMEM_EMBEDDER": "none"})
    try:
        env = {**os.environ, "USERMEM_URL": server.url, "USERMEM_API_KEY": server.key,
               "USERMEM_TEST_OTHER_KEY": other}
        r = subprocess.run([node, "--test", "--test-reporter=tap", "test/"], cwd=TS, capture_output=True, text=True,
                           env=env, timeout=120)
    finally:
        server.stop()
    out = r.stdout + r.stderr
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped|todo|cancelled) (\d+)$", out, re.M)}
    assert r.returncode == 0 and counts.get("fail") == 0, out[-6000:]
    assert counts.get("skipped", 0) == 0 and counts.get("cancelled", 0) == 0 and counts.get("todo", 0) == 0, out[-4000:]
    assert counts.get("pass", 0) >= 16, out[-4000:]
    passed = re.findall(r"^\s*ok \d+ - (.*)$", out, re.M)
    for topic in ("write:", "writeMany", "recall:", "withheld", "history:", "forget", "assemble:", "errors:",
                  "tenant isolation:", "429 with Retry-After", "still 429 after the retries"):
        assert any(topic in name for name in passed), (topic, passed)

