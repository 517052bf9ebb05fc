"""Pure, deterministic policy: no I/O, no clocks, no models. Every decision here is testable code."""
