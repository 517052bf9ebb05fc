"""The composition root: the ONE place that builds the pipelines and the plug-ins and wires them together.

`Memory.__init__` calls `compose()`. Every plug-in reaches a pipeline here, through a constructor
argument or a registration method (never by setting another object's attributes):

==========================  =====================================================================
what                        wired into
==========================  =====================================================================
per-tenant contracts        ``EngineContext.use_contract_provider(ContractRegistry.for_tenant)``
grants (L2/L3 access)       ``RecallPipeline(gate_for=GrantsPipeline.gate)``; ``sweep`` as a purger
live fields                 ``RecallPipeline(live=LiveResolvers)``
consent requests            ``RecallPipeline.use_consent(ConsentPipeline.state)``; ``on_session_closed`` as a
                            session-close hook (a session's declines end with it)
store tiers (Redis/session) ``ErasurePipeline(erasers=[store.capabilities.erase_tiers])``;
                            ``store.capabilities.drop_local`` to events
session activity            ``EngineContext.subscribe(SessionManager.on_change)``
understanding (extraction)  ``SessionManager.add_close_hook`` -> ``Understanding.on_session_closed``
user model (derived attrs)  ``EngineContext.subscribe(DerivedRefresher)``; ``erase_user_model`` as an eraser
                            (built on first use over an `EngineHost`: understand/ports.MemoryHost)
relevance (hybrid)          ``Engine.use_relevance``: ``RecallPipeline.use_relevance``, the indexer as a
                            change listener, the vector index as eraser and purger
events (NATS)               ``events.sync.connect(...)``; ``on_local_change`` as a change listener
==========================  =====================================================================

Plug-in packages (relevance, understand, events) never import the engine (import-linter enforces it),
so there is no cycle to dodge. Two plug-ins are still imported where they are first needed, for start-up
time only: `understand` (pydantic models, ~0.5 s) when the conversation pipelines are first used, and
`events` (asyncio, NATS) when `nats_url` is set. See docs/architecture.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from usermem.config import Settings
from usermem.engine.consent import ConsentPipeline
from usermem.engine.context import Clock, EngineContext
from usermem.engine.contracts import ContractRegistry
from usermem.engine.erasure import ErasurePipeline
from usermem.engine.federation import Federation, check_domain
from usermem.engine.grants import GrantsPipeline
from usermem.engine.lifecycle import LifecyclePipeline
from usermem.engine.ports import RelevancePlugin
from usermem.engine.recall import RecallPipeline
from usermem.engine.resolvers import LiveResolvers
from usermem.engine.sessions import SessionClosed, SessionManager
from usermem.engine.usermodel import DerivedRefresher
from usermem.engine.write import WritePipeline, check_ids
from usermem.errors import ConfigError
from usermem.model import Kind, MemoryRecord, Recalled, ScoredMemory, WriteRequest, WriteResult, new_id
from usermem.policy import usermodel as um
from usermem.policy.contracts import (
    DEFAULT_CONTRACTS,
    DEFAULT_FORBIDDEN_KEYS,
    ContractSet,
    UnknownFieldPolicy,
)
from usermem.relevance import hybrid
from usermem.relevance.embed import Embedder, make_embedder
from usermem.relevance.vectors import open_index
from usermem.store.base import LiveQuery, Store
from usermem.store.tiered import build_store

log = logging.getLogger("usermem.federation")

if TYPE_CHECKING:
    from usermem.events.federation import Consumer, Relay
    from usermem.events.ports import Transport
    from usermem.events.sync import FederatedSync
    from usermem.understand.service import Understanding


def _planner_fields(ctx: EngineContext, vector_model: str | None = None) -> hybrid.QueryFields:
    """The recall planner as relevance's `query_fields(tenant, query, vector)`: the fields a query asks about
    (understand/plan.py, deterministic recogniser; one planner per tenant contract set, built on first use).
    `vector` is the query vector relevance computed for semantic search, made by the embedder `vector_model`
    names: the planner's vector head reads it (no second embedding) when it was fitted on that embedder."""
    planners: dict[int, tuple[ContractSet, object]] = {}
    lock = threading.Lock()

    def query_fields(tenant: str, query: str, vector: object = None) -> hybrid.FieldHints:
        from usermem.understand.plan import DeterministicPlanner

        contracts = ctx.contracts_for(tenant)
        with lock:
            entry = planners.get(id(contracts))
            if entry is None or entry[0] is not contracts:
                if len(planners) > 64:
                    planners.clear()
                entry = planners[id(contracts)] = (contracts, DeterministicPlanner(contracts))
        planner = entry[1]
        assert isinstance(planner, DeterministicPlanner)
        # The rules and the lexical model's fields get the fusion's field bonus; what only the vector head
        # adds (it plans any language, less precisely: docs/relevance.md) widens the candidates.
        if vector is None or vector_model is None:
            return hybrid.FieldHints(frozenset(planner.plan(query).fields))
        alone, with_vector = planner.plan_pair(query, vector, vector_model)
        sure = frozenset(alone.fields)
        return hybrid.FieldHints(sure, frozenset(with_vector.fields) - sure)

    return query_fields


def default_contracts(settings: Settings) -> ContractSet:
    return ContractSet(DEFAULT_CONTRACTS, UnknownFieldPolicy(settings.unknown_fields),
                       DEFAULT_FORBIDDEN_KEYS | frozenset(settings.forbidden_keys))


@dataclass
class Engine:
    """The wired pipelines and plug-ins of one `Memory`."""

    ctx: EngineContext
    write: WritePipeline
    recall: RecallPipeline
    erasure: ErasurePipeline
    lifecycle: LifecyclePipeline
    sessions: SessionManager
    contracts: ContractRegistry
    grants: GrantsPipeline
    live: LiveResolvers
    consent: ConsentPipeline
    relevance: hybrid.HybridRelevance | None = None
    events: FederatedSync | None = None
    derived: DerivedRefresher | None = None
    federation: Federation | None = None
    relay: Relay | None = None
    consumer: Consumer | None = None
    _understanding: Understanding | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _input_keys: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)

    # -- relevance ---------------------------------------------------------------------------------------

    def use_relevance(self, relevance: hybrid.HybridRelevance | Literal["hybrid"] | None = "hybrid", *,
                      embedder: Embedder | None = None, background: bool = True) -> hybrid.HybridRelevance | None:
        """Wire a relevance plug-in (or "hybrid": built from the settings; None: remove the current one)."""
        if relevance == "hybrid":
            relevance = self.build_hybrid(embedder=embedder, background=background)
        if self.relevance is not None:
            self._detach(self.relevance)
            self.relevance = None
        if relevance is not None:
            self._attach(relevance)
            self.relevance = relevance
        return relevance

    def _attach(self, plugin: RelevancePlugin) -> None:
        """Recall scores with it; its indexer follows committed changes; erasure and purge reach its index."""
        self.recall.use_relevance(plugin)
        if plugin.indexer is not None:
            self.ctx.subscribe(plugin.indexer)
        if plugin.index is not None:
            self.erasure.add_eraser(plugin.index.erase)
            self.erasure.add_purger(plugin.index.drop_orphans)

    def _detach(self, plugin: RelevancePlugin) -> None:
        """Undo `_attach` and stop the indexer (stored vectors stay)."""
        if plugin.indexer is not None:
            plugin.indexer.close()
            self.ctx.unsubscribe(plugin.indexer)
        if plugin.index is not None:
            self.erasure.remove_eraser(plugin.index.erase)
            self.erasure.remove_purger(plugin.index.drop_orphans)
        self.recall.use_relevance(None)

    def build_hybrid(self, *, embedder: Embedder | None = None, background: bool = True) -> hybrid.HybridRelevance:
        settings, store = self.ctx.settings, self.ctx.store
        if embedder is None:
            embedder = make_embedder(settings)
        contracts = self.ctx.contracts

        def describe(key: str) -> str:
            c = contracts.get(key)
            return c.description if c is not None else ""

        # The vector index the store declares (capabilities.vectors), beside the store of record.
        index = open_index(store, embedder.model_id) if embedder is not None else None
        # Tiered stores serve some kinds outside the indexed table: every live memory is then scored.
        def reload(tenant: str, user_id: str, keys: Sequence[str]) -> list[MemoryRecord]:
            # The indexer's spilled keys (hybrid.Indexer): current versions, expired ones too (now=0).
            return store.live(LiveQuery(tenant, user_id, 0.0, keys=list(keys)))

        def session_episodes(tenant: str, user_id: str, session_id: str) -> list[MemoryRecord]:
            # The turns of one session, for the index terms of the turns after them (hybrid.session_context).
            return store.live(LiveQuery(tenant, user_id, 0.0, kinds=[Kind.EPISODE], session_id=session_id))

        return hybrid.build(settings, embedder, index, describe=describe, use_candidates=not store.capabilities.tiers,
                            background=background,
                            query_fields=_planner_fields(self.ctx, embedder.model_id if embedder is not None else None),
                            reload=reload, session_episodes=session_episodes)

    # -- federation (engine/federation.py, events/federation.py, docs/federation.md) ----------------------

    def use_outbox(self, transport: Transport, origin: str) -> Federation:
        """Changes go out through the store's transactional outbox, published to `transport` by a relay."""
        from usermem.events.federation import Relay, encoder  # start-up time, see the docstring

        settings, ctx = self.ctx.settings, self.ctx
        outbox = ctx.store.capabilities.outbox
        if outbox is None:
            raise ConfigError("federation needs a store with a transactional outbox (SQLite or PostgreSQL)",
                              setting="store_url")
        fed = Federation(ctx, self.write, self.erasure, self.grants, domain=None,
                         encode=encoder(settings.nats_subject_prefix, ctx.contracts_for, settings.nats_values, origin),
                         window=settings.federate_notice_window_seconds,
                         max_drift=settings.federate_max_clock_drift_seconds)
        if self.events is not None:
            fed.suppress = self.events.caused_remotely
            fed.on_remote_cause = self.events.note_remote_cause
            self.events.use_outbox()
        ctx.use_stager(fed.stage, fed.stage_erasure)
        ctx.subscribe(fed.on_change)  # after the event sync's listener: the stream's erasure goes first
        relay = Relay(fed.pending, outbox.remove, transport)
        fed.wake = relay.wake
        relay.start()
        relay.wake()  # events left in the outbox by an earlier run
        self.federation, self.relay = fed, relay
        return fed

    def federate(self, domain: str, *, transport: Transport | None = None, catch_up_timeout: float = 30.0,
                 instance: str | None = None) -> Federation:
        """Apply other domains' changes (durable consumer), after catching up on what was missed."""
        from usermem.events.federation import Consumer, NatsTransport

        if transport is None:
            if self.events is None:
                raise ConfigError("federation needs change events: set nats_url (or pass a transport)",
                                  setting="nats_url")
            name = instance or self.ctx.settings.federate_instance or domain
            transport = NatsTransport(self.events.bus, durable="usermem-fed-" + name.replace(".", "_"),
                                      ack_wait=self.ctx.settings.federate_ack_wait_seconds)
            if not self.events.bus.wait_connected(catch_up_timeout):
                log.warning("usermem federation: NATS is unreachable; serving before catching up on missed "
                            "changes (they are applied when the connection comes up)")
        fed = self.federation
        if fed is None:
            fed = self.use_outbox(transport, new_id())
        fed.domain = check_domain(domain)
        if self.consumer is not None:
            self.consumer.stop()
        consumer = Consumer(transport, fed.apply, park=fed.park,
                            max_attempts=self.ctx.settings.federate_max_deliveries)
        consumer.catch_up(catch_up_timeout)  # before serving: what happened while this instance was away
        consumer.start()
        self.consumer = consumer
        return fed

    # -- understanding -----------------------------------------------------------------------------------

    def understanding(self) -> Understanding:
        """The conversation pipelines, built on first use (an LLM client is only made when needed)."""
        und = self._understanding
        if und is None:
            with self._lock:
                und = self._understanding
                if und is None:
                    from usermem.understand.service import Understanding  # start-up time, see the docstring

                    und = self._understanding = Understanding(EngineHost(self))
        return und

    def on_session_closed(self, closed: SessionClosed) -> None:
        """The session-close hook: background extraction over the transcript (understanding)."""
        self.understanding().on_session_closed(closed)

    # -- the user model (understand/usermodel.py): derived attributes follow their inputs ----------------

    def refresh_derived(self, tenant: str, user_id: str) -> None:
        self.understanding().modeler.refresh_derived(tenant, user_id)

    def derived_input_keys(self, tenant: str) -> frozenset[str]:
        """The fields the tenant's active rules read (cached for 30 s; `forget_rules_cache` after a change)."""
        now = time.monotonic()
        hit = self._input_keys.get(tenant)
        if hit is not None and now - hit[0] < 30.0:
            return hit[1]
        # Read like UserModeler.input_keys, without building the understanding pipelines: the worker's first
        # change would otherwise import them (~0.2 s of CPU) while the writers it runs beside hold the GIL.
        docs = self.ctx.store.list_docs(tenant, um.RULES_NS, limit=um.RULE_DOCS_READ)
        keys = um.input_keys(um.tenant_rules(dict(docs)))
        self._input_keys[tenant] = (now, keys)
        return keys

    def forget_rules_cache(self, tenant: str) -> None:
        self._input_keys.pop(tenant, None)

    def erase_user_model(self, tenant: str, user_id: str, keys: Sequence[str] | None) -> None:
        """Eraser: signals, inferences and derived attributes about the forgotten fields go with them."""
        from usermem.understand.usermodel import erase_model  # only when something is forgotten

        erase_model(self.ctx.store, tenant, user_id, keys)

    # -- lifetime ----------------------------------------------------------------------------------------

    def flush(self, timeout: float = 60.0) -> None:
        if self.relevance is not None and self.relevance.indexer is not None:
            self.relevance.indexer.flush(timeout)
        if self.derived is not None:
            self.derived.flush(timeout)

    def close(self) -> None:
        consumer, relay, self.consumer, self.relay = self.consumer, self.relay, None, None
        if consumer is not None:
            consumer.stop()
        if relay is not None:  # what is still in the outbox goes out (a second close has nothing to do)
            if self.events is None or self.events.bus.connected:  # NATS away: it waits in the outbox
                relay.drain(2.0)
            relay.close()
        if self.events is not None:
            self.events.close()
        self.live.close()
        if self.derived is not None:
            self.derived.close()
        if self.relevance is not None and self.relevance.indexer is not None:
            self.relevance.indexer.close()
        self.ctx.store.close()


class EngineHost:
    """The engine as `usermem.understand` sees it (understand/ports.MemoryHost), over the pipelines."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._ctx = engine.ctx

    @property
    def settings(self) -> Settings:
        return self._ctx.settings

    @property
    def query_embedder(self) -> Embedder | None:
        """The embedder recall's relevance plug-in embeds queries with (the planner reads the same vectors)."""
        rel = self._engine.relevance
        return rel.embedder if rel is not None else None

    @property
    def store(self) -> Store:
        return self._ctx.store

    @property
    def contracts(self) -> ContractSet:
        return self._ctx.contracts

    def contracts_for(self, tenant: str) -> ContractSet:
        check_ids(tenant, "-")
        return self._ctx.contracts_for(tenant)

    def now(self, now: float | None) -> float:
        return self._ctx.now(now)

    def check_ids(self, tenant: object, user_id: object) -> None:
        check_ids(tenant, user_id)

    def write(self, tenant: str, user_id: str, request: WriteRequest, *, now: float | None = None,
              actor: str | None = None) -> WriteResult:
        return self._engine.write.write(tenant, user_id, request, now=now, actor=actor)

    def deny(self, tenant: str, user_id: str, memory_id: str, *, now: float | None = None,
             actor: str | None = None) -> object:
        return self._engine.lifecycle.deny(tenant, user_id, memory_id, now=now, actor=actor)

    def write_many(self, tenant: str, user_id: str, requests: Sequence[WriteRequest], *, now: float | None = None,
                   change_set_id: str | None = None, actor: str | None = None) -> list[WriteResult]:
        return self._engine.write.write_many(tenant, user_id, requests, now=now, change_set_id=change_set_id,
                                             actor=actor)

    def recall_scored(self, tenant: str, user_id: str, k: int, *, now: float, keys: Sequence[str] | None = None,
                      kinds: Sequence[Kind] | None = None, session_id: str | None = None,
                      actor: str | None = None, purpose: str | None = None) -> Recalled[ScoredMemory]:
        check_ids(tenant, user_id)
        return self._engine.recall.recall(tenant, user_id, k, now=now, keys=keys, kinds=kinds, session_id=session_id,
                                          actor=actor, purpose=purpose)


def compose(settings: Settings, *, store: Store | None = None, clock: Clock | None = None,
            contracts: ContractSet | None = None) -> Engine:
    """Build the store (unless given), the pipelines and the plug-ins the settings ask for, wired."""
    if store is None:
        # The store of record, plus Redis / session tiers when the preset or routes ask for them.
        store = build_store(settings)
    ctx = EngineContext(store=store, settings=settings, contracts=contracts or default_contracts(settings),
                        clock=clock or time.time)
    # Privacy and governance (docs/privacy.md): per-tenant stored contracts, grants for L2/L3, live fields.
    registry = ContractRegistry(ctx)
    ctx.use_contract_provider(registry.for_tenant)
    grants = GrantsPipeline(ctx)
    live = LiveResolvers(ctx)
    capabilities = store.capabilities
    write = WritePipeline(ctx)
    recall = RecallPipeline(ctx, gate_for=grants.gate, live=live)
    # Redis / session tiers are erased after the store of record; expired grants leave with the purge.
    erasure = ErasurePipeline(ctx, erasers=[capabilities.erase_tiers] if capabilities.erase_tiers is not None else [],
                              purgers=[grants.sweep])
    # Lifecycle (docs/lifecycle.md): confirm / deny / revert, sessions with idle expiry and archiving.
    lifecycle = LifecyclePipeline(ctx, write, gate_for=grants.gate)  # L2/L3 results need a grant
    sessions = SessionManager(ctx, write, recall)
    ctx.subscribe(sessions.on_change)
    # a forget also takes the forgotten words out of the user's open sessions' transcripts (kept until close) and
    # the points quoting them out of closed sessions' episodes
    erasure.add_prep(sessions.prepare_forget)
    # Consent for what recall withholds (engine/consent.py): requests answered by the user become grants;
    # recall marks withheld fields declined / pending; a session's declines end with it.
    consent = ConsentPipeline(ctx, grants)
    recall.use_consent(consent.state)
    sessions.add_close_hook(consent.on_session_closed)
    engine = Engine(ctx=ctx, write=write, recall=recall, erasure=erasure, lifecycle=lifecycle, sessions=sessions,
                    contracts=registry, grants=grants, live=live, consent=consent)
    # Background extraction at session close (seed 000): understand/service.py, built on first use.
    sessions.add_close_hook(engine.on_session_closed)
    # The user model (issue 18): derived attributes recomputed off the request path after changes; what it
    # holds about forgotten fields is erased with them.
    engine.derived = DerivedRefresher(engine.refresh_derived, engine.derived_input_keys)
    ctx.subscribe(engine.derived)
    erasure.add_eraser(engine.erase_user_model)
    # Hybrid relevance for recall(query=...): vectors on write, BM25, fusion (relevance/hybrid.py).
    if settings.embedder != "none" or settings.hybrid_lexical_weight > 0:
        engine.use_relevance("hybrid")
    # Change events on NATS JetStream (events/, docs/events.md): federated sync, erasure broadcast.
    if settings.nats_url:
        from usermem.events.sync import connect as connect_events  # start-up time, see the docstring

        sync = connect_events(settings, contracts_for=ctx.contracts_for,
                              drop_local=capabilities.drop_local)
        ctx.subscribe(sync.on_local_change)
        sync.start()
        engine.events = sync
        if capabilities.outbox is not None:  # the transactional outbox (issue 17): relayed to NATS
            from usermem.events.federation import NatsTransport

            engine.use_outbox(NatsTransport(sync.bus, durable="unused"), sync.instance_id)
        if settings.federate_domain:
            engine.federate(settings.federate_domain)
    elif settings.federate_domain:
        raise ConfigError("federate_domain needs nats_url (the events travel on NATS JetStream)",
                          setting="federate_domain")
    return engine
