"""Shared fixtures. Time is always injected: tests never sleep."""

from __future__ import annotations

import os

import pytest

from usermem import Memory

os.environ.setdefault("HF_HUB_OFFLINE", "1")

T0 = 1_790_000_000.0
DAY = 86_400.0


@pytest.fixture
def mem() -> Memory:
    m = Memory()
    yield m
    m.close()


@pytest.fixture
def file_mem(tmp_path) -> Memory:
    m = Memory(f"sqlite:///{tmp_path}/usermem.db")
    yield m
    m.close()
