"""Evaluations of usermem against labelled data — one package for all of them.

* ``usermem.evals.pii`` — the PII detector on a generated, labelled zh/en corpus (``usermem eval pii``).
* ``usermem.evals.retrieval`` — recall(query=...) on LoCoMo (English) and MemoryBank (Chinese)
  (``usermem eval locomo`` / ``usermem eval memorybank``).
* extraction / plan / assemble evaluations (``usermem eval extract|plan|assemble``) move here from
  ``usermem.understand.evals``.

Evaluations sit above the engine (they build a ``Memory`` and measure it) and below the interfaces.
What they need beyond the core install (Faker for the PII corpus) is the optional extra ``eval``:
``pip install 'usermem[eval]'``. Such imports happen lazily, inside the functions that need them, and a
missing one raises :class:`MissingExtra`, which the CLI prints as one ``error:`` line (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from usermem.errors import ConfigError

RUNS_DIR = Path("runs")  # fresh output folders of `usermem eval …` (git-ignored); reports/ only when asked


@dataclass(frozen=True, slots=True)
class DataSet:
    """A public data set an evaluation reads but usermem does not ship (licence or size)."""

    name: str
    default: Path  # inside the project (git-ignored data/), never outside it
    files: str  # what must be there
    origin: str
    licence: str

    def where(self) -> str:
        return (f"{self.name}: {self.files} from {self.origin} ({self.licence}); put it under {self.default} "
                f"or pass its path")


DATASETS: dict[str, DataSet] = {
    "locomo": DataSet("LoCoMo", Path("data/locomo/locomo10.json"), "data/locomo10.json",
                      "https://github.com/snap-research/LoCoMo", "CC BY-NC 4.0, non-commercial evaluation only"),
    "memorybank": DataSet("MemoryBank", Path("data/memorybank"), "memory_bank_cn.json (in eval_data/)",
                          "https://github.com/zhongwanjun/MemoryBank-SiliconFriend", "MIT"),
}


def missing_data(key: str, path: Path) -> str:
    """One line: the data set is missing at `path`, and where to get it."""
    return f"{path} does not exist — {DATASETS[key].where()}"


def fresh_out(name: str) -> Path:
    """A new output folder for one run (runs/<name>-<run id>/): never over the committed reports/."""
    return RUNS_DIR / f"{name}-{run_info()['id']}"

__all__ = ["DATASETS", "EVAL_EXTRA_HINT", "DataSet", "MissingExtra", "fresh_out", "machine", "missing_data",
           "require", "run_info"]

EVAL_EXTRA_HINT = "pip install 'usermem[eval]'"


class MissingExtra(ConfigError):
    """An evaluation needs a package of the optional extra ``eval`` that is not installed.

    A ConfigError (so a UsermemError): the CLI prints it as one ``error:`` line and exits 2.
    """

    code = "missing_extra"

    def __init__(self, package: str, purpose: str) -> None:
        self.package = package
        self.purpose = purpose
        super().__init__(f"{purpose} needs the optional package {package!r}: {EVAL_EXTRA_HINT}")


def require(module: str, purpose: str, package: str | None = None) -> object:
    """Import `module` or raise MissingExtra naming the `eval` extra (a lazy, optional dependency)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(package or module, purpose) from None


def machine() -> dict[str, object]:
    """The machine a run measured on: enough to tell two machines (or a loaded one) apart."""
    import os
    import platform

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "cpus_usable": usable, "load_1m_at_start": round(os.getloadavg()[0], 2)}


def run_info() -> dict[str, object]:
    """Identity of one run — id, UTC start time, machine — for the header of the report it writes."""
    import time
    import uuid

    return {"id": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6],
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine()}
