"""The package as a user gets it: `python -m build` + `twine check`, then the wheel installed into a fresh venv
gives a working `usermem` command. Offline and fast: the build runs without isolation, the wheel is installed
with --no-deps and the venv sees the dependencies of the test environment through a path file (not its
editable usermem: a plain path line does not run the `__editable__` hook, so the wheel's copy is imported)."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _run(*cmd: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src)
    return out


def test_build_makes_a_wheel_and_sdist_that_twine_accepts(dist: Path) -> None:
    version = PYPROJECT["project"]["version"]
    wheel = dist / f"usermem-{version}-py3-none-any.whl"
    assert wheel.exists() and (dist / f"usermem-{version}.tar.gz").exists()
    checked = _run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert checked.stdout.count("PASSED") == 2
    names = set(zipfile.ZipFile(wheel).namelist())
    # data the package reads at run time travels with it (migrations, models, bundled data)
    assert any(n.startswith("usermem/store/migrations/") and n.endswith(".sql") for n in names)
    assert "usermem/py.typed" in names
    assert any(n.startswith("usermem/data/") for n in names)
    meta = zipfile.ZipFile(wheel).read(f"usermem-{version}.dist-info/METADATA").decode()
    for extra in ("server", "postgres", "redis", "nats", "eval", "integrations"):
        assert f"Provides-Extra: {extra}" in meta, extra
    # the service and the back-ends are extras, not part of the core install
    core = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    for heavy in ("fastapi", "uvicorn", "psycopg", "redis", "nats-py", "mcp"):
        assert not any(line.split()[1].startswith(heavy) for line in core), heavy


def test_the_wheel_installs_into_a_fresh_venv_and_runs(dist: Path, tmp_path: Path) -> None:
    version = PYPROJECT["project"]["version"]
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run(base, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    purelib = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (purelib / "test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    _run(sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
         dist / f"usermem-{version}-py3-none-any.whl")
    shown = _run(venv / "bin" / "usermem", "--version").stdout.strip()
    assert shown == f"usermem {version}"
    # the installed copy, not this checkout, and it works embedded (SQLite) with its bundled data
    code = ("import usermem, pathlib; from usermem import Memory\n"
            "m = Memory('sqlite://')\n"
            "m.write('t', 'u', 'preference', 'diet', 'vegetarian', source='user_confirmed', now=1.0)\n"
            "print(pathlib.Path(usermem.__file__).resolve()); print(m.recall('t', 'u', now=2.0)[0].value)")
    out = _run(py, "-c", code, cwd=tmp_path).stdout.split("\n")
    assert out[0].startswith(str(venv.resolve())), out[0]
    assert out[1] == "vegetarian"


def test_version_matches_the_package_metadata() -> None:
    import usermem

    assert usermem.__version__ == PYPROJECT["project"]["version"]
