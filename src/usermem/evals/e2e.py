"""End-to-end multi-session evaluation (issue 15): does memory make the agent better, and does it ever use
stale information?

Scenarios (``usermem/data/e2e/{dev,test}.json``, written by hand, zh and en) are timelines over simulated
days: user utterances, updates from the system of record, structured writes (forms, agent-confirmed
facts, with or without an expiry), erasure requests, corrections ("that's wrong"), repeated pushback
and its verification, consent (grants) and its withdrawal. Between them, *probes* ask something whose
right answer depends on memory. Each probe states its ground truth in the data — never computed by
usermem: the expected action (``answer`` with acceptable values, ``ask`` the user, or request
``consent``), the values that must NOT be used (stale, expired, superseded, withheld, forgotten), the
case it tests and, for sensitive fields, the level.

Four memory systems are fed the same timeline and asked the same probes:

* ``none`` — no memory: the agent knows nothing from earlier sessions.
* ``kv`` — a naive latest-wins key-value store: every value extracted from an utterance (the same
  extractor usermem uses, so only the memory layer differs) or written by a form or the system of
  record overwrites the key; erasure requests and "that's wrong" delete the key; no expiry, no source
  priority, no consent.
* ``transcript`` — the full transcript (utterances plus system-of-record and form notes) in the prompt;
  the scripted reader takes the latest value of the field it finds in it (same extractor).
* ``usermem`` — ``Memory`` with its public API; the agent sees only what ``assemble()`` returns.

Agents: the scripted agent answers the probe's field from the memory it is given (for usermem: only the
``<USER_FACTS>``/``<USER_PREFERENCES>`` block of ``assemble()``); when the field is missing it asks the
user, unless the field is sensitive and not consented — then it asks for consent. The LLM agent gets the
same memory as a prompt and answers in JSON (OpenAI-compatible server; scripted in the tests).
"""

from __future__ import annotations

import json
import re
import statistics
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from usermem import model as _model
from usermem.config import Settings, load_settings
from usermem.engine.memory import Memory
from usermem.errors import PermissionDenied, ValidationError
from usermem.policy.contracts import Sensitivity
from usermem.understand.assemble import safe_json
from usermem.understand.text import estimate_tokens

DAY = 86_400.0
HOUR = 3_600.0
T0 = 1_798_761_600.0  # 2027-01-01T00:00:00Z: day 0 of every scenario
TENANT = "e2e"
USER = "u1"
AGENT = "agent-e2e"  # the reader named in grants and audit
BUDGET_TOKENS = 800
SYSTEMS = ("none", "kv", "transcript", "usermem")
SPLITS = ("dev", "test")
EXPECTS = ("answer", "ask", "consent")
# What a probe tests. The stale kinds name what the values in `stale` are.
CASES = ("current", "superseded", "corrected", "expired", "forgotten", "withheld", "consented", "revoked",
         "priority", "pushback", "context")
STALE_KINDS = {"superseded": "superseded", "corrected": "superseded", "priority": "superseded",
               "pushback": "superseded", "expired": "expired", "context": "expired", "forgotten": "forgotten",
               "withheld": "withheld", "revoked": "withheld", "current": "superseded", "consented": "superseded"}
OPS = ("say", "system", "write", "erase", "consent", "revoke", "deny", "verify", "context", "close_session",
       "probe")
Action = Literal["answer", "ask", "consent"]
# The consent flow (branch `consent`, issue 14) reports withheld fields with a reason; without it the agent
# works it out from today's grants API (an L2/L3 contract and no active grant covering the reader).
_CONSENT_FLOW = hasattr(_model, "Withheld")

# ---------------------------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Probe:
    ask: str  # what the user says
    field: str  # the field whose value the right answer needs (the scripted agent's task slot)
    expect: Action
    values: tuple[str, ...] = ()  # acceptable answers (expect == "answer")
    stale: tuple[str, ...] = ()  # values that must not be used
    case: str = "current"
    level: str = "L1"  # sensitivity of the field as the scenario author states it


@dataclass(frozen=True, slots=True)
class Event:
    day: float
    op: str
    data: Mapping[str, Any]
    say: str | None = None  # what the user said (kept in the transcript)
    probe: Probe | None = None

    @property
    def now(self) -> float:
        return T0 + self.day * DAY


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    lang: str
    split: str
    title: str
    events: tuple[Event, ...]

    @property
    def probes(self) -> list[Probe]:
        return [e.probe for e in self.events if e.probe is not None]


def _bad(sid: str, msg: str) -> ValidationError:
    return ValidationError(f"scenario {sid}: {msg}", field="scenario")


def _strs(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    return (v,) if isinstance(v, str) else tuple(str(x) for x in v)


def _parse_probe(sid: str, d: Mapping[str, Any]) -> Probe:
    try:
        p = Probe(ask=str(d["ask"]), field=str(d["field"]), expect=d["expect"], values=_strs(d.get("values")),
                  stale=_strs(d.get("stale")), case=str(d.get("case", "current")), level=str(d.get("level", "L1")))
    except KeyError as exc:
        raise _bad(sid, f"probe lacks {exc.args[0]!r}") from None
    if p.expect not in EXPECTS:
        raise _bad(sid, f"probe expect {p.expect!r} is not one of {EXPECTS}")
    if p.case not in CASES:
        raise _bad(sid, f"probe case {p.case!r} is not one of {CASES}")
    if p.expect == "answer" and not p.values:
        raise _bad(sid, f"probe {p.ask!r} expects an answer but lists no values")
    if p.level not in ("L1", "L2", "L3"):
        raise _bad(sid, f"probe level {p.level!r}")
    return p


def parse_scenario(d: Mapping[str, Any], split: str) -> Scenario:
    sid = str(d.get("id", "?"))
    events: list[Event] = []
    for raw in d.get("events", []):
        ops = [k for k in OPS if k in raw and k != "say"]
        if len(ops) > 1:
            raise _bad(sid, f"event has several operations {ops}")
        op = ops[0] if ops else "say"
        if op == "say" and "say" not in raw:
            raise _bad(sid, f"event without an operation: {raw}")
        day = raw.get("day")
        if not isinstance(day, int | float) or isinstance(day, bool) or day < 0:
            raise _bad(sid, f"event day must be a number ≥ 0, got {day!r}")
        if events and day < events[-1].day:
            raise _bad(sid, "events must be in time order")
        data = raw.get(op) if op != "say" else {}
        probe = _parse_probe(sid, data) if op == "probe" else None
        if op in ("erase",):
            data = {"keys": data} if isinstance(data, list | str) else data
        if op in ("deny",):
            data = {"key": data} if isinstance(data, str) else data
        if not isinstance(data, Mapping):
            data = {}
        say = raw.get("say") if op != "probe" else None
        events.append(Event(float(day), op, data, say, probe))
    if d.get("lang") not in ("zh", "en"):
        raise _bad(sid, "lang must be zh or en")
    sc = Scenario(sid, str(d["lang"]), split, str(d.get("title", "")), tuple(events))
    if not sc.probes:
        raise _bad(sid, "has no probe")
    return sc


def load_scenarios(path: str | Path | None = None, splits: Iterable[str] = SPLITS) -> list[Scenario]:
    """The shipped scenarios (``usermem/data/e2e/<split>.json``) or one file / directory of them."""
    out: list[Scenario] = []
    for split in splits:
        if path is None:
            text = resources.files("usermem.data").joinpath("e2e", f"{split}.json").read_text(encoding="utf-8")
        else:
            p = Path(path)
            f = p / f"{split}.json" if p.is_dir() else p
            if p.is_dir() and not f.exists():
                continue
            text = f.read_text(encoding="utf-8")
        doc = json.loads(text)
        items = doc["scenarios"] if isinstance(doc, dict) else doc
        file_split = doc.get("split", split) if isinstance(doc, dict) else split
        out += [parse_scenario(s, str(s.get("split", file_split))) for s in items]
        if path is not None and not Path(path).is_dir():
            break
    ids = [s.id for s in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValidationError(f"duplicate scenario ids: {sorted(dup)}", field="scenario")
    return out


# ------------------------------------------------------------------------------------------ matching

_DROP = re.compile(r"[\s\W_]+", re.UNICODE)


def norm(text: Any) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return _DROP.sub("", unicodedata.normalize("NFKC", s).casefold())


def matches(answer: Any, candidates: Sequence[str]) -> bool:
    """The answer contains one of the candidate values (or is contained in one), after normalisation."""
    a = norm(answer)
    if not a:
        return False
    for c in candidates:
        n = norm(c)
        if n and (n in a or a in n):
            return True
    return False


# ------------------------------------------------------------------------------------ memory systems


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What one system gives the agent for one probe."""

    values: Mapping[str, Any]  # field -> value the scripted reader can read off
    prompt: str  # the memory part of the prompt (what an LLM would be shown)
    consent_needed: frozenset[str] = frozenset()  # sensitive fields the agent may not use without consent


class System(Protocol):
    name: str

    def apply(self, event: Event) -> None: ...

    def view(self, probe: Probe, now: float) -> MemoryView: ...

    def close(self) -> None: ...


def _settings() -> Settings:
    # Deterministic, private, no embedding model: assemble() selects by the plan's fields, not by vectors.
    return load_settings(env={}, embedder="none")


class Extractor:
    """usermem's deterministic extractor, shared by the baselines so that only the memory layer differs."""

    def __init__(self) -> None:
        self._m = Memory(settings=_settings())

    def __call__(self, text: str) -> list[tuple[str, Any]]:
        return [(c.key, c.value) for c in self._m.extract([{"role": "user", "content": text}], tenant=TENANT)]

    def close(self) -> None:
        self._m.close()


class NoMemory:
    name = "none"

    def apply(self, event: Event) -> None:
        return None

    def view(self, probe: Probe, now: float) -> MemoryView:
        return MemoryView({}, "")

    def close(self) -> None:
        return None


class NaiveKV:
    """Latest wins; deletes on erasure and on "that's wrong"; no expiry, source priority or consent."""

    name = "kv"

    def __init__(self, extract: Extractor) -> None:
        self._extract = extract
        self.kv: dict[str, Any] = {}

    def apply(self, e: Event) -> None:
        d = e.data
        if e.op == "say" and e.say:
            for k, v in self._extract(e.say):
                self.kv[k] = v
        elif e.op in ("system", "write", "verify", "context"):
            self.kv[str(d["key"])] = d["value"]
        elif e.op == "erase":
            keys = d.get("keys")
            if keys == "all":
                self.kv.clear()
            else:
                for k in _strs(keys):
                    self.kv.pop(k, None)
        elif e.op == "deny":
            self.kv.pop(str(d["key"]), None)

    def view(self, probe: Probe, now: float) -> MemoryView:
        return MemoryView(dict(self.kv), f"<MEMORY>{safe_json(self.kv)}</MEMORY>")

    def close(self) -> None:
        return None


class FullTranscript:
    """Everything said (and every system-of-record / form note) in the prompt; nothing ever removed."""

    name = "transcript"

    def __init__(self, extract: Extractor) -> None:
        self._extract = extract
        self.lines: list[tuple[str, str, Any]] = []  # (rendered line, key or "", value)

    def apply(self, e: Event) -> None:
        stamp = f"[day {e.day:g}]"
        if e.say:
            self.lines.append((f"{stamp} user: {e.say}", "", None))
            if e.op == "say":
                for k, v in self._extract(e.say):
                    self.lines.append(("", k, v))
        if e.op in ("system", "write", "verify", "context"):
            src = {"system": "system of record", "write": "profile form", "verify": "user confirmed",
                   "context": "session note"}[e.op]
            self.lines.append((f"{stamp} {src}: {e.data['key']} = {json.dumps(e.data['value'], ensure_ascii=False)}",
                               str(e.data["key"]), e.data["value"]))

    def view(self, probe: Probe, now: float) -> MemoryView:
        values: dict[str, Any] = {}
        for _line, k, v in self.lines:  # the scripted reader: the latest value of each field wins
            if k:
                values[k] = v
        text = "\n".join(line for line, _k, _v in self.lines if line)
        return MemoryView(values, f"<TRANSCRIPT>\n{text}\n</TRANSCRIPT>")

    def close(self) -> None:
        return None


class Usermem:
    """The system under test, through its public API only; the agent sees what assemble() returns."""

    name = "usermem"

    def __init__(self, memory: Memory | None = None, *, llm_plan: bool = False) -> None:
        self.m = memory or Memory(settings=_settings())
        self._llm_plan = llm_plan
        self._grants: list[str] = []
        self._session: str | None = None
        self.write_log: list[dict[str, Any]] = []

    def _log(self, e: Event, results: Iterable[Any]) -> None:
        for r in results:
            mem = getattr(r, "memory", None)
            self.write_log.append({"day": e.day, "op": r.op.value, "key": getattr(mem, "key", None),
                                   "reason": r.reason.value if getattr(r, "reason", None) else None})

    def apply(self, e: Event) -> None:
        m, d, now = self.m, e.data, e.now
        if e.op == "say" and e.say:
            self._log(e, m.ingest(TENANT, USER, [{"role": "user", "content": e.say}], now=now,
                                  session_id=None, actor=AGENT))
        elif e.op in ("system", "write"):
            ttl = d.get("ttl_days")
            source = "system" if e.op == "system" else str(d.get("source", "user_confirmed"))
            self._log(e, [m.write(TENANT, USER, str(d.get("kind", "fact")), str(d["key"]), d["value"],
                                  source=source, now=now, actor=AGENT,
                                  ttl_seconds=None if ttl is None else float(ttl) * DAY)])
        elif e.op == "erase":
            keys = d.get("keys")
            if keys == "all":
                m.forget_user(TENANT, USER, now=now, actor=AGENT)
            else:
                for k in _strs(keys):
                    m.forget(TENANT, USER, k, now=now, actor=AGENT)
        elif e.op == "consent":
            purpose, ttl = str(d.get("purpose", "the user agreed in chat")), float(d.get("hours", 0.5)) * HOUR
            request = getattr(m, "request_consent", None)  # the consent flow (issue 14), when merged
            if request is not None and "fields" in d:
                req = request(TENANT, USER, list(_strs(d["fields"])), purpose, ttl, actor=AGENT, now=now)
                approved = m.approve_consent(TENANT, USER, req.id, actor=USER, now=now)
                if approved.grant_id:
                    self._grants.append(str(approved.grant_id))
            else:  # today's grants API
                scope: str | list[str] = str(d["level"]) if "level" in d else list(_strs(d.get("fields")))
                self._grants.append(m.grant(TENANT, USER, scope, purpose, ttl=ttl, actor=USER, now=now))
        elif e.op == "revoke":
            while self._grants:
                m.revoke(TENANT, self._grants.pop(), actor=USER, now=now)
        elif e.op == "deny":
            key = str(d["key"])
            current = m.recall(TENANT, USER, 1, keys=[key], now=now, actor=AGENT)
            if current:
                m.deny(TENANT, USER, current[0].id, now=now, actor=AGENT)
        elif e.op == "verify":
            key = str(d["key"])
            pending = [v for v in m.pending_verifications(TENANT, USER) if v.get("key") == key]
            if pending:
                self._log(e, [m.accept_verification(TENANT, USER, str(pending[0]["id"]), value=d.get("value"),
                                                    now=now, actor=AGENT)])
            else:  # no hypothesis was raised: the user's confirmation is written as what it is
                self._log(e, [m.write(TENANT, USER, str(d.get("kind", "preference")), key, d["value"],
                                      source="user_confirmed", now=now, actor=AGENT)])
        elif e.op == "context":
            if self._session is None:
                self._session = m.open_session(TENANT, USER, now=now)
            self._log(e, [m.write(TENANT, USER, "context", str(d["key"]), d["value"], source="user_confirmed",
                                  session_id=self._session, now=now, actor=AGENT)])
        elif e.op == "close_session" and self._session is not None:
            m.close_session(self._session, tenant=TENANT, now=now, actor=AGENT)
            self._session = None

    def assemble(self, probe: Probe, now: float) -> Any:
        return self.m.understanding.assemble(TENANT, USER, probe.ask, BUDGET_TOKENS, now=now,
                                             session_id=self._session, actor=AGENT, use_llm=self._llm_plan)

    def consent_needed(self, assembly: Any, fields: Iterable[str], now: float) -> frozenset[str]:
        """Sensitive fields this reader may not use now. The consent flow's own report when the Assembly
        carries one; otherwise today's grants API: an L2/L3 contract and no active grant covering it."""
        if _CONSENT_FLOW:  # Assembly.withheld names what was left out and why (issue 14)
            return frozenset(str(w.key) for w in assembly.withheld
                             if getattr(w, "reason", None) == "needs_grant" and not getattr(w, "declined", False))
        contracts = self.m.contracts_for(TENANT)
        grants = self.m.grants(TENANT, USER, now=now)
        out = set()
        for f in fields:
            c = contracts.get(f)
            if c is None or c.sensitivity is Sensitivity.L1:
                continue
            if not any(g.active(now) and g.covers(c, AGENT) for g in grants):
                out.add(f)
        return frozenset(out)

    def view(self, probe: Probe, now: float) -> MemoryView:
        a = self.assemble(probe, now)
        values = {s.memory.key: s.memory.value for s in (*a.facts, *a.preferences, *a.context)}
        need = self.consent_needed(a, [probe.field], now) if probe.field not in values else frozenset()
        prompt = a.prompt if a.used_ids else ""
        if need:
            prompt += f"\n<CONSENT_REQUIRED>{safe_json(sorted(need))}</CONSENT_REQUIRED>"
        return MemoryView(values, prompt, need)

    def stale_cause(self, probe: Probe, value: str, now: float) -> str:
        """Why a stale value was used: "update_not_captured" when the store still holds it as the current,
        live version (the change never reached memory in a form it understood: an extraction miss), else
        "memory_layer" (memory knew it was superseded, expired, forgotten or withheld — the serious case)."""
        try:
            versions = self.m.history(TENANT, USER, probe.field, actor=AGENT, now=now)
        except PermissionDenied:
            return "memory_layer"
        for r in versions:
            live = r.superseded_by is None and r.deleted_at is None and (r.expires_at is None or r.expires_at > now)
            if live and matches(r.value, [value]):
                return "update_not_captured"
        return "memory_layer"

    def close(self) -> None:
        self.m.close()


# --------------------------------------------------------------------------------------------- agents


@dataclass(frozen=True, slots=True)
class Reply:
    action: Action
    value: str = ""


class Agent(Protocol):
    name: str

    def reply(self, probe: Probe, view: MemoryView) -> Reply: ...


class ScriptedAgent:
    """Answers the probe's field from the memory it is given; asks when missing; asks for consent when the
    memory says the field is sensitive and not consented."""

    name = "scripted"

    def reply(self, probe: Probe, view: MemoryView) -> Reply:
        if probe.field in view.values:
            v = view.values[probe.field]
            return Reply("answer", v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
        if probe.field in view.consent_needed:
            return Reply("consent")
        return Reply("ask")


class _LLMReply(BaseModel):
    action: Literal["answer", "ask", "consent"]
    value: str


_LLM_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["action", "value"],
    "properties": {"action": {"type": "string", "enum": ["answer", "ask", "consent"]}, "value": {"type": "string"}},
}
LLM_SYSTEM = (
    "You are a customer-support assistant. Use only the memory below about this user (it may be empty). "
    "Reply with JSON {\"action\": ..., \"value\": ...}. action=\"answer\" with value = the user's {field} "
    "when the memory states it; action=\"ask\" (value \"\") when it does not — never guess; "
    "action=\"consent\" (value \"\") when the memory marks {field} as requiring consent. "
    "Information the user asked to forget, or that was replaced or has expired, must not be used.\n\n"
    "Memory:\n{memory}"
)


class LLMAgent:
    """The same task through an OpenAI-compatible chat model (usermem's LLMClient, JSON output)."""

    name = "llm"

    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        from usermem.understand.llm import LLMClient

        client = LLMClient.from_settings(settings)
        if client is None:
            raise ValidationError("the LLM agent needs USERMEM_LLM_BASE_URL and USERMEM_LLM_MODEL", field="llm")
        self.client = client
        self.timeout = timeout
        self.failures = 0

    def reply(self, probe: Probe, view: MemoryView) -> Reply:
        system = LLM_SYSTEM.replace("{field}", probe.field).replace("{memory}", view.prompt or "(none)")
        out = self.client.structured("e2e_agent", system, probe.ask, _LLMReply, _LLM_SCHEMA, timeout=self.timeout)
        if out is None:
            self.failures += 1
            return Reply("ask")
        return Reply(out.action, out.value)

    def close(self) -> None:
        self.client.close()


# ------------------------------------------------------------------------------------------- running


@dataclass(slots=True)
class ProbeResult:
    scenario: str
    split: str
    lang: str
    system: str
    day: float
    ask: str
    field: str
    expect: str
    case: str
    level: str
    action: str
    value: str
    success: bool
    stale_use: bool
    stale_kind: str | None
    repeated_ask: bool
    sensitive_without_consent: bool
    memory_tokens: int
    prompt_tokens: int
    stale_cause: str | None = None  # usermem only: "memory_layer" or "update_not_captured"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def judge(probe: Probe, reply: Reply) -> tuple[bool, bool, bool, bool]:
    """(success, stale_use, repeated_ask, sensitive_without_consent) from the probe's written ground truth."""
    used = reply.action == "answer"
    stale = used and matches(reply.value, probe.stale) and not matches(reply.value, probe.values)
    if probe.expect == "answer":
        success = used and matches(reply.value, probe.values) and not stale
    elif probe.expect == "consent":
        success = reply.action == "consent"
    else:  # the right move is not to use anything remembered: ask (or ask for consent)
        success = not used
    repeated = reply.action == "ask" and probe.expect in ("answer", "consent")
    leak = used and probe.level in ("L2", "L3") and probe.expect != "answer"
    return success, stale, repeated, leak


def make_systems(names: Sequence[str], extract: Extractor, *, llm_plan: bool = False) -> list[System]:
    out: list[System] = []
    for n in names:
        if n == "none":
            out.append(NoMemory())
        elif n == "kv":
            out.append(NaiveKV(extract))
        elif n == "transcript":
            out.append(FullTranscript(extract))
        elif n == "usermem":
            out.append(Usermem(llm_plan=llm_plan))
        else:
            raise ValidationError(f"unknown system {n!r}; use {SYSTEMS}", field="systems")
    return out


def run_scenario(sc: Scenario, agent: Agent, systems: Sequence[str] = SYSTEMS, *, extract: Extractor,
                 llm_plan: bool = False, views: list[tuple[str, Probe, MemoryView]] | None = None,
                 ) -> list[ProbeResult]:
    built = make_systems(systems, extract, llm_plan=llm_plan)
    results: list[ProbeResult] = []
    try:
        for e in sc.events:
            if e.probe is None:
                for s in built:
                    s.apply(e)
                continue
            p = e.probe
            for s in built:
                view = s.view(p, e.now)
                if views is not None:
                    views.append((s.name, p, view))
                reply = agent.reply(p, view)
                success, stale, repeated, leak = judge(p, reply)
                mem_tokens = estimate_tokens(view.prompt) if view.prompt else 0
                cause = s.stale_cause(p, reply.value, e.now) if stale and isinstance(s, Usermem) else None
                results.append(ProbeResult(
                    sc.id, sc.split, sc.lang, s.name, e.day, p.ask, p.field, p.expect, p.case, p.level, reply.action,
                    reply.value, success, stale, STALE_KINDS.get(p.case) if stale else None, repeated, leak,
                    mem_tokens, mem_tokens + estimate_tokens(p.ask), cause))
    finally:
        for s in built:
            s.close()
    return results


def summarize(results: Sequence[ProbeResult]) -> dict[str, Any]:
    """Metrics per system: success, repeated asks, stale uses by kind, sensitive data without consent, tokens."""
    out: dict[str, Any] = {}
    for name in SYSTEMS:
        rs = [r for r in results if r.system == name]
        if not rs:
            continue
        askable = [r for r in rs if r.expect in ("answer", "consent")]
        stale_by: dict[str, int] = {k: 0 for k in ("superseded", "expired", "forgotten", "withheld")}
        for r in rs:
            if r.stale_use and r.stale_kind:
                stale_by[r.stale_kind] += 1
        toks = [r.prompt_tokens for r in rs]
        out[name] = {
            "probes": len(rs),
            "success": round(sum(r.success for r in rs) / len(rs), 4),
            "successes": sum(r.success for r in rs),
            "repeated_ask_rate": round(sum(r.repeated_ask for r in askable) / len(askable), 4) if askable else 0.0,
            "repeated_asks": sum(r.repeated_ask for r in askable),
            "stale_uses": sum(r.stale_use for r in rs),
            "stale_uses_by_kind": stale_by,
            # usermem only: stale uses where memory knew better (must be 0) vs updates it never captured
            "stale_uses_memory_layer": sum(r.stale_cause == "memory_layer" for r in rs),
            "stale_uses_update_not_captured": sum(r.stale_cause == "update_not_captured" for r in rs),
            "l3_without_consent": sum(r.sensitive_without_consent and r.level == "L3" for r in rs),
            "l2_without_consent": sum(r.sensitive_without_consent and r.level == "L2" for r in rs),
            "prompt_tokens_mean": round(statistics.fmean(toks), 1),
            "prompt_tokens_median": statistics.median(toks),
            "memory_tokens_mean": round(statistics.fmean(r.memory_tokens for r in rs), 1),
            "by_case": {c: {"n": n, "success": round(sum(r.success for r in rs if r.case == c) / n, 4)}
                        for c in CASES if (n := sum(1 for r in rs if r.case == c))},
        }
    t = out.get("transcript", {}).get("prompt_tokens_mean")
    for s in out.values():
        s["tokens_vs_transcript"] = None if not t else round(s["prompt_tokens_mean"] / t - 1, 4)
    return out


@dataclass
class E2EResult:
    agent: str
    scenarios: int
    results: list[ProbeResult]
    by_split: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_lang: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "scenarios": self.scenarios, "by_split": self.by_split, "by_lang": self.by_lang,
                "meta": self.meta, "probes": [r.to_dict() for r in self.results]}


def evaluate(scenarios: Sequence[Scenario], agent: Agent | None = None, systems: Sequence[str] = SYSTEMS, *,
             llm_plan: bool = False, progress: Callable[[int, int], None] | None = None) -> E2EResult:
    agent = agent or ScriptedAgent()
    extract = Extractor()
    started = time.perf_counter()
    results: list[ProbeResult] = []
    try:
        for i, sc in enumerate(scenarios):
            results += run_scenario(sc, agent, systems, extract=extract, llm_plan=llm_plan)
            if progress:
                progress(i + 1, len(scenarios))
    finally:
        extract.close()
    res = E2EResult(agent.name, len(scenarios), results)
    for split in SPLITS:
        rs = [r for r in results if r.split == split]
        if rs:
            res.by_split[split] = summarize(rs)
    for lang in ("zh", "en"):
        rs = [r for r in results if r.lang == lang]
        if rs:
            res.by_lang[lang] = summarize(rs)
    res.meta = {"seconds": round(time.perf_counter() - started, 2), "probes": len(results) // max(1, len(systems)),
                "systems": list(systems), "budget_tokens": BUDGET_TOKENS,
                "scenarios_per_split": {s: sum(1 for x in scenarios if x.split == s) for s in SPLITS},
                "token_estimate": "usermem.understand.text.estimate_tokens (same estimate for every system)"}
    return res


# ------------------------------------------------------------------------------------------- reports

COLUMNS = ("system", "probes", "task success", "repeated asks", "stale uses", "superseded", "expired",
         "forgotten", "withheld", "L3 w/o consent", "tokens/turn", "vs transcript")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def table_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for name in SYSTEMS:
        s = summary.get(name)
        if not s:
            continue
        by = s["stale_uses_by_kind"]
        rows.append([name, str(s["probes"]), f"{s['success']:.1%}", f"{s['repeated_ask_rate']:.1%}",
                     str(s["stale_uses"]), str(by["superseded"]), str(by["expired"]), str(by["forgotten"]),
                     str(by["withheld"]), str(s["l3_without_consent"]), f"{s['prompt_tokens_mean']:.0f}",
                     _pct(s["tokens_vs_transcript"])])
    return rows


def render_markdown(results: Mapping[str, E2EResult], scenarios: Sequence[Scenario]) -> str:
    n = {s: sum(1 for x in scenarios if x.split == s) for s in SPLITS}
    langs = {lg: sum(1 for x in scenarios if x.lang == lg) for lg in ("zh", "en")}
    lines = ["# End-to-end evaluation: does memory help?", "",
             f"{len(scenarios)} hand-written multi-session scenarios ({langs['zh']} zh, {langs['en']} en; "
             f"dev {n['dev']}, test {n['test']}), {sum(len(s.probes) for s in scenarios)} probes. Ground truth "
             "(expected action, acceptable values, values that must not be used) is written in the scenarios "
             "(`usermem/data/e2e/`), never computed by usermem. `dev` was looked at while writing the harness; "
             "`test` is the number to quote.", "",
             "Metrics: task success (the probe's expected action, and for answers an acceptable value); repeated "
             "asks (the agent asked for something the user or the system of record had already given and that "
             "was still valid, over those probes); stale uses (an answer carrying a superseded, expired, "
             "forgotten or withheld value); L3 w/o consent (an L3 value used when the scenario says no consent "
             "was in force); tokens/turn (memory part of the prompt plus the user's message, "
             "`estimate_tokens`, same estimate for every system).", ""]
    for agent_name, res in results.items():
        for split in SPLITS:
            summ = res.by_split.get(split)
            if not summ:
                continue
            lines += [f"## {agent_name} agent — {split} split ({n[split]} scenarios)", "",
                      "| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
            lines += ["| " + " | ".join(r) + " |" for r in table_rows(summ)]
            lines.append("")
        for lang, summ in res.by_lang.items():
            lines += [f"### {agent_name} agent — {lang} (dev + test)", "",
                      "| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
            lines += ["| " + " | ".join(r) + " |" for r in table_rows(summ)]
            lines.append("")
        for split in SPLITS:
            u = res.by_split.get(split, {}).get("usermem")
            if u and u["stale_uses"]:
                lines += [f"usermem stale uses ({agent_name}, {split}): {u['stale_uses_memory_layer']} where memory "
                          "knew the value was superseded, expired, forgotten or withheld (target 0); "
                          f"{u['stale_uses_update_not_captured']} where the change never reached memory "
                          "(the extractor missed the user's update, so the old value was still current).", ""]
        for split in SPLITS:
            summ = res.by_split.get(split, {})
            if "usermem" in summ and "transcript" in summ:
                u, t = summ["usermem"]["memory_tokens_mean"], summ["transcript"]["memory_tokens_mean"]
                lines += [f"Memory part of the prompt only ({agent_name}, {split}): usermem {u:.0f} tokens per turn, "
                          f"full transcript {t:.0f} ({_pct(u / t - 1 if t else None)}). These histories are short "
                          "(2–7 events); the transcript grows with every session, the assembled block does not.", ""]
        um = res.by_split.get("test", {}).get("usermem")
        if um:
            lines += [f"usermem by case (test, {agent_name}): " + ", ".join(
                f"{c} {v['success']:.0%} (n={v['n']})" for c, v in um["by_case"].items()), ""]
        fails = [r for r in res.results if r.system == "usermem" and not r.success]
        if fails:
            lines += [f"usermem probes that failed ({agent_name}, all splits): {len(fails)}", "",
                      "| scenario | split | day | field | expected | got | case |", "|---|---|---|---|---|---|---|"]
            lines += [f"| {r.scenario} | {r.split} | {r.day:g} | {r.field} | {r.expect} | {r.action}"
                      f"{(': ' + _cell(r.value)) if r.value else ''} | {r.case} |" for r in fails]
            lines.append("")
    return "\n".join(lines) + "\n"


def _cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")[:60]


def plot(results: Mapping[str, E2EResult], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    res = next(iter(results.values()))
    summ = res.by_split.get("test") or next(iter(res.by_split.values()))
    names = [n for n in SYSTEMS if n in summ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    axes[0].bar(names, [summ[n]["success"] for n in names], color="#4c72b0")
    axes[0].set_title("task success")
    axes[0].set_ylim(0, 1)
    axes[1].bar(names, [summ[n]["stale_uses"] for n in names], color="#c44e52")
    axes[1].set_title("stale/forgotten/withheld uses")
    axes[2].bar(names, [summ[n]["prompt_tokens_mean"] for n in names], color="#55a868")
    axes[2].set_title("prompt tokens per turn")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(f"e2e, {res.agent} agent, test split")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_reports(results: Mapping[str, E2EResult], scenarios: Sequence[Scenario], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    j, md, png = out / "eval-e2e.json", out / "eval-e2e.md", out / "eval-e2e.png"
    j.write_text(json.dumps({name: r.to_dict() for name, r in results.items()}, ensure_ascii=False, indent=1),
                 encoding="utf-8")
    md.write_text(render_markdown(results, scenarios), encoding="utf-8")
    paths = {"json": j, "md": md}
    if plot(results, png):
        paths["png"] = png
    return paths
