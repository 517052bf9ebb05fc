"""How many examples a hypothesis property runs: fewer in `make test`, the full count when thorough.

`make test` (scripts/run_tests.sh) must stay well under its 15-minute budget on a 2-core machine, so the
slow properties (a Memory, a store or a server per example) run a quarter of their examples there. The
invariants are the same; only the number of generated cases differs. `USERMEM_HYPOTHESIS_PROFILE=thorough`
(`make test-thorough`, for nightly runs and before a release) runs every property with its full count.
A failing example found either way is saved in `.hypothesis/` and replayed first on the next run.
"""

from __future__ import annotations

import os

PROFILE = os.environ.get("USERMEM_HYPOTHESIS_PROFILE", "ci").strip().lower() or "ci"
if PROFILE not in {"ci", "thorough"}:
    raise ValueError(f"USERMEM_HYPOTHESIS_PROFILE={PROFILE!r}: expected 'ci' or 'thorough'")


def examples(full: int, *, floor: int = 10) -> int:
    """`full` under the thorough profile; a quarter of it (at least `floor`, at most `full`) in `make test`."""
    if PROFILE == "thorough":
        return full
    return min(full, max(floor, full // 4))
