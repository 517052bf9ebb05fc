"""Storage backends behind one narrow protocol (see base.py). Backends hold no business rules."""

from usermem.store.base import Store, WriteTx, open_store

__all__ = ["Store", "WriteTx", "open_store"]
