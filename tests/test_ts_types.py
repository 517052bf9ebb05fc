"""The TypeScript client's types (clients/typescript/src/*.d.ts and typecheck/usage.ts) pass `tsc --strict`, and a
wrong call is a type error. `tsc` is Debian's node-typescript (scripts/ensure_node.sh installs it when absent);
without it the test skips — or fails under USERMEM_REQUIRE_BACKENDS=1."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

from backends import unavailable

ROOT = Path(__file__).resolve().parent.parent
TS = ROOT / "clients" / "typescript"
FLAGS = ["--noEmit", "--strict", "--target", "es2022", "--lib", "es2022,dom", "--module", "nodenext",
         "--moduleResolution", "nodenext"]


def _tsc() -> str:
    tsc = shutil.which("tsc")
    if tsc is None:  # as tests/test_ts_client.py does for node: try Debian's package once
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["bash", str(ROOT / "scripts" / "ensure_node.sh")], capture_output=True, timeout=600,
                           check=False)
        tsc = shutil.which("tsc")
    if tsc is None:
        unavailable("tsc is not installed (make test installs Debian's node-typescript: scripts/ensure_node.sh)")
    return tsc


def _compile(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tsc(), *FLAGS, *map(str, files)], capture_output=True, text=True, timeout=300,
                          cwd=TS, check=False)


def test_declarations_and_usage_type_check() -> None:
    files = [TS / "typecheck" / "usage.ts", *sorted((TS / "src").glob("*.d.ts"))]
    assert len(files) >= 3
    done = _compile(*files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_call_is_a_type_error(tmp_path: Path) -> None:
    index = (TS / "src" / "index.js").as_posix()
    good = tmp_path / "good.mts"
    good.write_text(f'import Client from "{index}";\n'
                    'const c = new Client({ url: "http://127.0.0.1:8000", apiKey: "umk_x" });\n'
                    'const d = await c.webhookDeliveries({ limit: 5 });\n'
                    'for (const x of d.items) console.log(x.state, x.attempts.length);\n', encoding="utf-8")
    done = _compile(good)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "bad.mts"
    bad.write_text(good.read_text(encoding="utf-8") + 'await c.write({ user_id: 7, kind: "fact", key: "k", value: 1 });\n'
                   'await c.createWebhook({ url: "https://example.com/h", secret: 123 });\n', encoding="utf-8")
    done = _compile(bad)
    assert done.returncode != 0
    errors = [line for line in done.stdout.splitlines() if "error TS" in line]
    assert len(errors) == 2 and all("bad.mts" in line for line in errors), done.stdout
