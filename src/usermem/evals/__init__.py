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

from usermem.errors import ConfigError

__all__ = ["EVAL_EXTRA_HINT", "MissingExtra", "require"]

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
