"""Sessions: working memory that lives while a conversation does, then becomes an episode.

- `open` returns a session id. `context` memories carry it (the write pipeline requires one) and are
  recalled only while their session is open: the recall path asks `visible_context()`.
- A context write whose session id was never opened opens an *implicit* session for that user, so
  idle expiry and archiving also cover callers that invent their own ids.
- `close` archives the session as an `episode` memory (event_at = when the session opened, value =
  the key points of its context), retracts the session's context in one transaction (a retraction
  version per key: never recalled again, history kept) and then calls the close hooks with the
  transcript — the conversation pipeline registers background extraction there.
- Sessions idle for longer than their timeout (settings.session_idle_seconds, 30 min by default)
  are closed the same way by `expire_idle` (reason "idle"); recall already hides their context
  from the moment the timeout passes, whether or not the sweep has run.

Where things live (all in the generic documents table, so every backend supports it):
  (tenant, "sessions", session_id)     the session document (user_id set, so erasure removes it)
  ("*", "session_tenants", session_id) session id → tenant, for close_session(session_id) without a
                                       tenant; holds nothing but the tenant name
  ("*", "session_idle", "<deadline>|<session_id>")  an index of open sessions ordered by idle
                                       deadline, so the sweep reads only sessions that are due
  (tenant, "api_session_messages", session_id)  the transcript added with `add_messages` (user_id set):
                                       PII redacted before it is stored, appended under the user's store
                                       transaction, deleted when the session closes (explicitly or idle)
                                       and with the user (forget_user)
Closed sessions' documents expire after the retention period.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from usermem.engine.context import EngineContext, new_id
from usermem.engine.grants import is_sensitive
from usermem.engine.lifecycle import link, retraction
from usermem.engine.ports import ErasureScope
from usermem.engine.write import WritePipeline, check_ids
from usermem.errors import ConflictError, InvalidArgument, NotFound, ValidationError
from usermem.model import (
    DAY,
    AuditEvent,
    ChangeEvent,
    Kind,
    MemoryRecord,
    ScoredMemory,
    Source,
    WriteRequest,
    WriteResult,
)
from usermem.policy import pii
from usermem.policy.validate import (
    InputProblem,
    canonical_json,
    check_identifier,
    check_optional_identifiers,
    check_text,
    typed_error,
)
from usermem.store.base import LiveQuery, Store, WriteTx

if TYPE_CHECKING:
    from usermem.engine.recall import RecallPipeline

log = logging.getLogger("usermem.sessions")

SESSIONS_NS = "sessions"
INDEX_TENANT = "*"
TENANT_INDEX_NS = "session_tenants"
IDLE_INDEX_NS = "session_idle"
MESSAGES_NS = "api_session_messages"  # the name the HTTP API used before the engine kept transcripts
MAX_SESSION_MESSAGES = 2000  # messages one session keeps
MAX_ROLE_CHARS = 32
ACTOR = "usermem.sessions"
MAX_IDLE_SECONDS = 366 * DAY
MAX_POINTS = 40
MAX_POINT_CHARS = 240
_EPISODE_KEY_SAFE = re.compile(r"^[a-z0-9_.\-]{1,56}$")

Transcript = str | Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    tenant: str
    user_id: str
    opened_at: float
    last_activity_at: float
    idle_seconds: float
    client_id: str | None = None
    status: str = "open"  # open | closed
    closed_at: float | None = None
    close_reason: str | None = None  # closed | idle
    episode_id: str | None = None
    episode_error: str | None = None
    implicit: bool = False
    idle_key: str | None = None
    messages: int | None = None

    @property
    def deadline(self) -> float:
        """When the session counts as idle-expired if nothing happens before."""
        return self.last_activity_at + self.idle_seconds

    def is_open(self, now: float) -> bool:
        return self.status == "open" and now < self.deadline

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Session:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """What a close hook receives (and close_session returns)."""

    session: Session
    reason: str  # closed | idle
    context: tuple[MemoryRecord, ...] = ()  # the session's context as it was when it closed
    episode: MemoryRecord | None = None
    transcript: Transcript | None = None
    already_closed: bool = False
    # keys of context fields left out of `context` because the reader may not read them (L2/L3 without a grant);
    # close hooks get the whole context, close_session / expire_idle_sessions return what the reader may see
    withheld: tuple[str, ...] = ()
    # keys the user had forgotten while the session was open: the close hooks' extraction does not write them
    # again from a transcript that predates the forget (prepare_forget)
    forgotten_keys: tuple[str, ...] = ()

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def tenant(self) -> str:
        return self.session.tenant

    @property
    def user_id(self) -> str:
        return self.session.user_id

    @property
    def closed_at(self) -> float | None:
        return self.session.closed_at


CloseHook = Callable[[SessionClosed], None]


class TranscriptFull(ValidationError):
    """The session already keeps MAX_SESSION_MESSAGES messages (413 over HTTP)."""

    code = "transcript_full"


@dataclass(frozen=True, slots=True)
class Message:
    """One stored transcript message: the role and the content with PII already redacted."""

    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class MessagesAdded:
    """What `add_messages` did: the session after the activity, how many messages it now keeps, how
    many were added and how many of those had PII redacted before storing; `results` are the writes
    of the extraction (`extract=True`, run on the redacted messages), else empty."""

    session: Session
    stored_messages: int
    added: int
    redacted: int
    messages: tuple[Message, ...] = ()  # the messages added, as stored (redacted)
    results: tuple[WriteResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session.to_dict(), "stored_messages": self.stored_messages, "added": self.added,
                "redacted": self.redacted, "results": [r.to_dict() for r in self.results]}


FORGOTTEN = "[forgotten]"  # what a forgotten value's words become in an open session's stored transcript
_ANY_TIME = -1e300  # a `now` before every expiry: a LiveQuery that loads every current record, expired or not


def _text_leaves(value: Any) -> list[str]:
    """The strings of a stored value (a string, or the strings inside a list or mapping), stripped."""
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _text_leaves(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _text_leaves(v)]
    return []


def _words_pattern(words: Iterable[str]) -> re.Pattern[str] | None:
    """One case-insensitive pattern for the words of forgotten values, longest first (one character or fewer is
    too short to find safely in running text)."""
    kept = sorted({w for w in words if len(w) >= 2}, key=lambda w: (-len(w), w))
    if not kept:
        return None
    return re.compile("|".join(re.escape(w) for w in kept), re.IGNORECASE)


def _hold(tx: WriteTx, s: Session) -> None:
    """Make sure the user's lock is held before documents are read outside the transaction: a read
    through the transaction waits for it (PostgreSQL pipelines the lock statement of `transaction`)."""
    tx.head(episode_key(s.id))


def redact_messages(messages: Any, max_messages: int, max_chars: int,
                    field: str = "messages") -> tuple[list[Message], int]:
    """Validated messages with PII redacted by the policy's redactor (the one the output filter uses), and
    how many of them had something redacted. Raises InvalidArgument/ValidationError on anything else."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgument(f"{field} must be a list of {{'role', 'content'}} mappings")
    if not messages:
        raise ValidationError("messages must not be empty", field=field)
    if len(messages) > max_messages:
        raise ValidationError(f"{len(messages)} messages exceed the limit of {max_messages}", field=field)
    out: list[Message] = []
    redacted = 0
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("content"), str):
            raise ValidationError(f"message {i} must be a mapping with a 'content' string", field=field)
        role = m.get("role", "user")
        if not isinstance(role, str) or not 1 <= len(role) <= MAX_ROLE_CHARS:
            raise ValidationError(f"message {i}: role must be a string of 1 to {MAX_ROLE_CHARS} characters",
                                  field=field)
        content = m["content"]
        if len(content) > max_chars:
            raise ValidationError(f"message {i} is longer than {max_chars} characters", field=field)
        try:
            check_text(field, role)
            check_text(field, content)
        except InputProblem as exc:
            raise ValidationError(f"message {i}: {exc}", field=field) from None
        clean = pii.redact(content)
        clean_role = pii.redact(role)
        redacted += clean != content or clean_role != role
        out.append(Message(clean_role, clean))
    return out, redacted


def _idle_key(deadline: float, session_id: str) -> str:
    # Fixed-width so that the documents' key order is deadline order.
    return f"{max(0.0, deadline):017.3f}|{session_id}"


def episode_key(session_id: str) -> str:
    """Each session gets its own episode key (episodes accumulate; one current version per key)."""
    if _EPISODE_KEY_SAFE.match(session_id):
        return f"session.{session_id}"
    return "session." + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]


def load_session(store: Store, tenant: str, session_id: str) -> Session | None:
    doc = store.get_doc(tenant, SESSIONS_NS, session_id)
    return Session.from_dict(doc) if doc else None


def visible_context(store: Store, tenant: str, user_id: str, records: Sequence[MemoryRecord], now: float,
                    session_id: str | None = None) -> set[str]:
    """Ids of the context memories among `records` that recall may return at `now`.

    A context memory is visible only while its session is open (not closed, not idle past its
    timeout) and belongs to the same user; with `session_id`, only that session's context.
    """
    sessions: dict[str, Session | None] = {}
    out: set[str] = set()
    for r in records:
        sid = r.session_id
        if sid is None or (session_id is not None and sid != session_id):
            continue
        if sid not in sessions:
            sessions[sid] = load_session(store, tenant, sid)
        s = sessions[sid]
        if s is not None and s.user_id == user_id and s.is_open(now):
            out.add(r.id)
    return out


def clean_transcript(transcript: Any, max_messages: int,
                     max_chars: int) -> tuple[Transcript | None, int, int]:
    """A transcript passed to close_session through the guards `add_messages` applies: validated, lone
    surrogates refused, PII redacted by the policy's redactor. Returns (the redacted transcript, how many
    messages it has, how many had something redacted); raises ValidationError/InvalidArgument."""
    if transcript is None:
        return None, 0, 0
    if isinstance(transcript, str):
        if len(transcript) > max_messages * max_chars:
            raise ValidationError(f"transcript longer than {max_messages * max_chars} characters", field="transcript")
        try:
            check_text("transcript", transcript)
        except InputProblem as exc:
            raise ValidationError(str(exc), field="transcript") from None
        clean = pii.redact(transcript)
        return clean, (1 if transcript.strip() else 0), int(clean != transcript)
    if isinstance(transcript, bytes) or not isinstance(transcript, Sequence):
        raise InvalidArgument("transcript must be a str or a list of {'role', 'content'} messages")
    if not transcript:
        return [], 0, 0
    messages, redacted = redact_messages(transcript, max_messages, max_chars, field="transcript")
    return [m.to_dict() for m in messages], len(messages), redacted


def point_line(r: MemoryRecord) -> str:
    """The episode's 'key: value' line for one context memory (cut at MAX_POINT_CHARS)."""
    value = r.value if isinstance(r.value, str) else canonical_json(r.value)
    line = f"{r.key}: {value}"
    return line if len(line) <= MAX_POINT_CHARS else line[: MAX_POINT_CHARS - 1] + "…"


def key_points(context: Sequence[MemoryRecord], budget_bytes: int) -> list[str]:
    """'key: value' lines for the episode, most important first, within a byte budget."""
    ordered = sorted(context, key=lambda r: (-r.importance, r.created_at, r.key))
    points: list[str] = []
    used = 2
    for r in ordered[:MAX_POINTS]:
        line = point_line(r)
        size = len(canonical_json(line).encode("utf-8")) + 1
        if used + size > budget_bytes:
            break
        points.append(line)
        used += size
    return points


class SessionManager:
    def __init__(self, ctx: EngineContext, write: WritePipeline, recall: RecallPipeline | None = None,
                 *, hooks: Iterable[CloseHook] = ()) -> None:
        self.ctx = ctx
        self.write = write
        self.recall = recall
        self._hooks: list[CloseHook] = list(hooks)
        self._closing = threading.RLock()  # re-entrant: archiving writes, whose listener may close

    def add_close_hook(self, hook: CloseHook) -> None:
        """Call `hook(SessionClosed)` after each close (explicit or idle)."""
        self._hooks.append(hook)

    # -- documents ---------------------------------------------------------------------------------

    def _save(self, s: Session, at: float) -> Session:
        store = self.ctx.store
        expires = None
        if s.status != "open":
            expires = at + self.ctx.settings.retention_days * DAY
        new_idle = _idle_key(s.deadline, s.id) if s.status == "open" else None
        if s.idle_key and s.idle_key != new_idle:
            store.delete_doc(INDEX_TENANT, IDLE_INDEX_NS, s.idle_key)
        first = s.idle_key is None
        s = Session.from_dict({**s.to_dict(), "idle_key": new_idle})
        store.put_doc(s.tenant, SESSIONS_NS, s.id, s.to_dict(), now=at, user_id=s.user_id, expires_at=expires)
        if first or s.status != "open":  # opened or closed: (re)write the id → tenant index
            store.put_doc(INDEX_TENANT, TENANT_INDEX_NS, s.id, {"tenant": s.tenant}, now=at, expires_at=expires)
        if new_idle is not None:
            store.put_doc(INDEX_TENANT, IDLE_INDEX_NS, new_idle, {"tenant": s.tenant, "session_id": s.id}, now=at)
        return s

    def resolve(self, session_id: str, tenant: str | None = None) -> Session:
        """The session; without a tenant the id is looked up in the session→tenant index."""
        if not isinstance(session_id, str):
            raise InvalidArgument(f"session_id must be a str, got {type(session_id).__name__}")
        if tenant is None:
            idx = self.ctx.store.get_doc(INDEX_TENANT, TENANT_INDEX_NS, session_id)
            if idx is None:
                raise NotFound(f"session {session_id!r} not found")
            tenant = str(idx["tenant"])
        s = load_session(self.ctx.store, tenant, session_id)
        if s is None:
            raise NotFound(f"session {session_id!r} not found")
        return s

    # -- open / touch --------------------------------------------------------------------------------

    def open(self, tenant: str, user_id: str, client_id: str | None = None, *, now: float | None = None,
             idle_seconds: float | None = None, session_id: str | None = None, implicit: bool = False) -> str:
        check_ids(tenant, user_id)
        try:
            if client_id is not None:
                check_identifier("client_id", client_id)
            if session_id is not None:
                check_identifier("session_id", session_id)
        except TypeError as exc:
            raise InvalidArgument(str(exc)) from None
        except InputProblem as exc:
            raise ValidationError(str(exc), field=exc.field) from None
        idle = self.ctx.settings.session_idle_seconds if idle_seconds is None else idle_seconds
        if isinstance(idle, bool) or not isinstance(idle, int | float) or not 1 <= idle <= MAX_IDLE_SECONDS:
            raise ValidationError(f"idle_seconds must be between 1 and {MAX_IDLE_SECONDS:.0f}", field="idle_seconds")
        at = self.ctx.now(now)
        sid = session_id or new_id()
        if session_id is not None and self.ctx.store.get_doc(INDEX_TENANT, TENANT_INDEX_NS, sid) is not None:
            raise ValidationError(f"session id {sid!r} is already in use", field="session_id")
        s = self._save(Session(sid, tenant, user_id, at, at, float(idle), client_id=client_id, implicit=implicit),
                       at)
        self.ctx.store.append_audit(AuditEvent(tenant=tenant, at=at, action="session_open", user_id=user_id,
                                               actor=ACTOR if implicit else None,
                                               detail={"session_id": s.id, "implicit": implicit}))
        return s.id

    def touch(self, session_id: str, *, tenant: str | None = None, now: float | None = None) -> Session:
        """Count activity now (postpones idle expiry). A session already past its timeout is closed instead."""
        at = self.ctx.now(now)
        s = self.resolve(session_id, tenant)
        if s.status != "open":
            return s
        if not s.is_open(at):
            return self.close(s.id, tenant=s.tenant, now=at, reason="idle").session
        if at > s.last_activity_at:
            s = self._save(Session.from_dict({**s.to_dict(), "last_activity_at": at}), at)
        return s

    def list_sessions(self, tenant: str, user_id: str, *, status: str | None = None, now: float | None = None,
             limit: int = 1000) -> list[Session]:
        check_ids(tenant, user_id)
        at = self.ctx.now(now)
        docs = self.ctx.store.list_docs(tenant, SESSIONS_NS, user_id=user_id, now=at, limit=limit)
        out = [Session.from_dict(d) for _, d in docs]
        if status == "open":
            return [s for s in out if s.is_open(at)]
        if status is not None:
            return [s for s in out if not s.is_open(at)]
        return out

    def context(self, session_id: str, *, tenant: str | None = None, now: float | None = None, k: int = 20,
                mark_used: bool = True) -> list[ScoredMemory]:
        """The session's live context, best first (empty once the session is closed). Counts as activity."""
        at = self.ctx.now(now)
        s = self.touch(session_id, tenant=tenant, now=at)
        if not s.is_open(at) or self.recall is None:
            return []
        return self.recall.recall(s.tenant, s.user_id, k, now=at, kinds=[Kind.CONTEXT], session_id=s.id,
                                  mark_used=mark_used)

    # -- transcript ----------------------------------------------------------------------------------

    def add_messages(self, session_id: str, messages: Sequence[Mapping[str, Any]], *, tenant: str | None = None,
                     now: float | None = None, actor: str | None = None) -> MessagesAdded:
        """Append messages to the session's transcript, PII redacted first; counts as activity.

        The append is one read-modify-write under the user's store transaction (the per-user lock of
        the store: a PostgreSQL advisory lock, SQLite's write transaction), so concurrent appends from
        any number of processes never lose a message and a close cannot leave an orphan behind (close
        deletes the transcript under the same lock). Raises ConflictError when the session is closed
        (or idle past its timeout: it is closed then), TranscriptFull beyond MAX_SESSION_MESSAGES.
        The audit entry (`session_messages`) names counts and PII kinds, never text.
        """
        at = self.ctx.now(now)
        try:
            check_optional_identifiers(actor=actor)  # the audit never keeps personal data
        except (TypeError, InputProblem) as exc:
            raise typed_error(exc) from None
        limits = self.ctx.limits
        clean, redacted = redact_messages(messages, limits.max_messages, limits.max_message_chars)
        s = self.touch(session_id, tenant=tenant, now=at)  # closes it first when it idled out
        if s.status != "open":
            raise ConflictError(f"session {session_id!r} is closed")
        store = self.ctx.store
        with self.ctx.transaction(s.tenant, s.user_id) as tx:
            _hold(tx, s)
            current = load_session(store, s.tenant, s.id)
            if current is None or current.status != "open":
                raise ConflictError(f"session {session_id!r} is closed")
            doc = store.get_doc(s.tenant, MESSAGES_NS, s.id) or {"messages": []}
            kept = list(doc.get("messages") or [])
            if len(kept) + len(clean) > MAX_SESSION_MESSAGES:
                raise TranscriptFull(f"a session keeps at most {MAX_SESSION_MESSAGES} messages", field="messages")
            kept.extend(m.to_dict() for m in clean)
            store.put_doc(s.tenant, MESSAGES_NS, s.id, {"messages": kept}, now=at, user_id=s.user_id)
            tx.audit(AuditEvent(tenant=s.tenant, at=at, action="session_messages", user_id=s.user_id,
                                actor=actor or ACTOR, detail={"session_id": s.id, "added": len(clean),
                                                              "redacted": redacted, "stored": len(kept)}))
        return MessagesAdded(s, len(kept), len(clean), redacted, tuple(clean))

    def stored_messages(self, session: Session) -> list[dict[str, Any]] | None:
        """The transcript kept for an open session (already redacted), or None."""
        doc = self.ctx.store.get_doc(session.tenant, MESSAGES_NS, session.id)
        return list(doc["messages"]) if doc and doc.get("messages") else None

    def _forgotten_keys(self, s: Session) -> tuple[str, ...]:
        doc = self.ctx.store.get_doc(s.tenant, MESSAGES_NS, s.id)
        return tuple(doc.get("forgotten_keys") or ()) if doc else ()

    def prepare_forget(self, tenant: str, user_id: str, scope: ErasureScope) -> Callable[[], int] | None:
        """ErasurePrep (engine/erasure.py; `forget(keys)`, `forget_range`, an erasure applied by ids): what the
        sessions hold of the versions about to go, read before they go, and taken out after.

        - The user's open sessions keep their transcripts until they close: the words of the erased versions
          become FORGOTTEN there and the keys are noted, so the close — its episode and its background extraction
          — does not bring the forgotten field back from what the user had said.
        - A closed session's episode quotes its context as 'key: value' points: an episode quoting an erased
          version (any point of a forgotten key, for `forget(keys)`) gets a new version without those points, and
          every version that quoted them is erased with the rest.

        None when there is nothing of the kind. Returns, when run, how many messages and episodes changed."""
        store = self.ctx.store
        opened = [x for x in self.list_sessions(tenant, user_id) if x.status == "open"]
        episodes = [r for r in store.live(LiveQuery(tenant, user_id, _ANY_TIME, kinds=[Kind.EPISODE]))
                    if isinstance(r.value, dict) and r.value.get("points")]
        if not opened and not episodes:
            return None
        going = self._going(tenant, user_id, scope)
        steps = [step for step in (self._transcripts_step(tenant, user_id, scope, opened, going),
                                   self._episodes_step(tenant, user_id, scope, episodes, going)) if step is not None]
        if not steps:
            return None
        return lambda: sum(step() for step in steps)

    def _going(self, tenant: str, user_id: str, scope: ErasureScope) -> list[MemoryRecord]:
        """The versions a forget of `scope` is about to erase (read before it does)."""
        store = self.ctx.store
        if scope.memory_ids is not None:  # applied from another instance: exactly these versions
            return [r for r in store.get_many(tenant, scope.memory_ids) if r.user_id == user_id]
        keys = list(scope.keys) if scope.keys is not None else sorted({
            r.key for r in store.live(LiveQuery(tenant, user_id, _ANY_TIME, include_retracted=True))})
        return [r for key in keys for r in store.history(tenant, user_id, key) if scope.covers(r.key, r.created_at)]

    def _transcripts_step(self, tenant: str, user_id: str, scope: ErasureScope, opened: Sequence[Session],
                          going: Sequence[MemoryRecord]) -> Callable[[], int] | None:
        if not opened:
            return None
        store = self.ctx.store
        words: set[str] = set()
        erased = set(scope.keys or ())
        for r in going:
            erased.add(r.key)
            words.update(_text_leaves(r.value))
            words.update(_text_leaves(r.canonical))
        if not erased:
            return None
        pattern = _words_pattern(words)

        def scrub() -> int:
            changed = 0
            with self.ctx.transaction(tenant, user_id) as tx:
                for x in opened:
                    _hold(tx, x)
                    current = load_session(store, tenant, x.id)
                    if current is None or current.status != "open":
                        continue
                    doc = store.get_doc(tenant, MESSAGES_NS, x.id) or {"messages": []}
                    messages = []
                    for m in doc.get("messages") or []:
                        text = str(m.get("content", ""))
                        clean = pattern.sub(FORGOTTEN, text) if pattern is not None else text
                        changed += clean != text
                        messages.append({**m, "content": clean})
                    forgotten = sorted({*(doc.get("forgotten_keys") or ()), *erased})
                    store.put_doc(tenant, MESSAGES_NS, x.id, {"messages": messages, "forgotten_keys": forgotten},
                                  now=scope.at, user_id=user_id)
            return changed

        return scrub

    def _episodes_step(self, tenant: str, user_id: str, scope: ErasureScope, episodes: Sequence[MemoryRecord],
                       going: Sequence[MemoryRecord]) -> Callable[[], int] | None:
        store = self.ctx.store
        lines = {point_line(r) for r in going if r.kind is Kind.CONTEXT}
        erased = {r.id for r in going}
        prefixes = tuple(f"{k}: " for k in scope.keys or ())

        def quoted(point: object) -> bool:
            return isinstance(point, str) and (point in lines or (bool(prefixes) and point.startswith(prefixes)))

        hit = [r for r in episodes if r.id not in erased and any(quoted(p) for p in r.value["points"])]
        if not hit:
            return None

        def rewrite() -> int:
            at = scope.at
            for old in hit:
                kept = [p for p in old.value["points"] if not quoted(p)]
                request = WriteRequest(kind=Kind.EPISODE.value, key=old.key, value={**old.value, "points": kept},
                                       source=old.source.value, event_at=old.event_at, session_id=old.session_id,
                                       client_id=old.client_id)
                self.write.write(tenant, user_id, request, now=at, actor=ACTOR)
                quoting = [v.id for v in store.history(tenant, user_id, old.key)
                           if isinstance(v.value, dict) and any(quoted(p) for p in v.value.get("points") or ())]
                if quoting:
                    store.soft_delete(tenant, user_id, at, ids=quoting, audit=AuditEvent(
                        tenant=tenant, at=at, action="forget", user_id=user_id, actor=ACTOR,
                        detail={"episode": old.key, "versions": len(quoting), "reason": "quoted forgotten points"}))
            return len(hit)

        return rewrite

    def _drop_messages(self, s: Session) -> None:
        with self.ctx.transaction(s.tenant, s.user_id) as tx:  # after any append holding the lock
            _hold(tx, s)
            self.ctx.store.delete_doc(s.tenant, MESSAGES_NS, s.id)

    # -- close ---------------------------------------------------------------------------------------

    def close(self, session_id: str, transcript: Transcript | None = None, *, tenant: str | None = None,
              now: float | None = None, actor: str | None = None, reason: str = "closed") -> SessionClosed:
        """Archive the session as an episode, retract its context, run the close hooks. Idempotent.

        Without a `transcript`, the messages added with `add_messages` (redacted) are the transcript.
        The stored transcript is deleted either way (explicit and idle closes alike).
        """
        at = self.ctx.now(now)
        limits = self.ctx.limits
        # A transcript passed here goes through the guards add_messages applies (PII redacted before the
        # close hooks — background extraction included — see it); nothing of it is stored but its count.
        transcript, messages, redacted = clean_transcript(transcript, limits.max_messages,
                                                          limits.max_message_chars)
        # One closer at a time in this process (an API thread and the idle sweeper may race);
        # the hooks run outside the lock.
        with self._closing:
            s = self.resolve(session_id, tenant)
            if s.status != "open":
                self._drop_messages(s)  # a transcript appended while another closer ran
                episode = self.ctx.store.get(s.tenant, s.episode_id) if s.episode_id else None
                return SessionClosed(s, s.close_reason or "closed", episode=episode, already_closed=True)
            forgotten = self._forgotten_keys(s)
            if transcript is None:
                transcript = self.stored_messages(s)
                messages = len(transcript) if transcript else 0
            if reason == "closed" and not s.is_open(at):
                reason = "idle"  # it had already timed out; say so
            ended = at if reason == "closed" else min(at, s.deadline)
            context = self.ctx.store.live(LiveQuery(s.tenant, s.user_id, at, kinds=[Kind.CONTEXT], session_id=s.id))
            cs = new_id()
            episode, episode_error = self._archive(s, context, messages, ended, reason, at, cs)
            tombstones = self._retract_context(s, context, at, cs, actor, reason, episode, redacted)
            s = self._save(Session.from_dict({**s.to_dict(), "status": "closed", "closed_at": at,
                                              "close_reason": reason, "episode_id": episode.id if episode else None,
                                              "episode_error": episode_error, "messages": messages}), at)
            self._drop_messages(s)
        if tombstones:
            self.ctx.emit(ChangeEvent(s.tenant, s.user_id, "write", at, keys=tuple(t.key for t in tombstones),
                                      memory_ids=tuple(t.id for t in tombstones), causality_id=cs,
                                      records=tuple(tombstones)))
        self.ctx.emit(ChangeEvent(s.tenant, s.user_id, "session_closed", at, keys=tuple(r.key for r in context),
                                  memory_ids=tuple(t.id for t in tombstones) + ((episode.id,) if episode else ()),
                                  client_id=s.client_id, causality_id=cs, records=tuple(tombstones)))
        closed = SessionClosed(s, reason, tuple(context), episode, transcript, forgotten_keys=forgotten)
        for hook in list(self._hooks):
            try:
                hook(closed)
            except Exception:  # a hook failing must not undo a close that already happened
                log.exception("session close hook %r failed for session %s", hook, s.id)
        return closed

    def _archive(self, s: Session, context: Sequence[MemoryRecord], messages: int, ended: float, reason: str,
                 at: float, cs: str) -> tuple[MemoryRecord | None, str | None]:
        if not context and not messages:
            return None, None  # nothing happened worth remembering
        budget = self.ctx.settings.max_value_bytes - 1024
        # The episode is an L1 memory any reader of the user may recall: the value of an L2/L3 context field
        # (readable only under a grant) is not copied into it (probe 8).
        contracts = self.ctx.contracts_for(s.tenant)
        shown = [r for r in context if not is_sensitive(contracts.get(r.key))]
        value: dict[str, Any] = {"session_id": s.id, "opened_at": s.opened_at, "ended_at": ended, "closed_by": reason,
                                 "points": key_points(shown, budget), "messages": messages}
        if s.client_id:
            value["client_id"] = s.client_id
        request = WriteRequest(kind=Kind.EPISODE.value, key=episode_key(s.id), value=value,
                               source=Source.EXTRACTED.value, event_at=s.opened_at, session_id=s.id,
                               client_id=s.client_id)
        result = self.write.write(s.tenant, s.user_id, request, now=at, change_set_id=cs, actor=ACTOR)
        if result.memory is None:
            log.warning("session %s not archived: %s %s", s.id, result.reason, result.detail)
            return None, f"{result.reason.value if result.reason else result.op.value}: {result.detail or ''}".strip()
        return result.memory, None

    def _retract_context(self, s: Session, context: Sequence[MemoryRecord], at: float, cs: str, actor: str | None,
                         reason: str, episode: MemoryRecord | None, redacted: int = 0) -> list[MemoryRecord]:
        tombstones: list[MemoryRecord] = []
        with self.ctx.transaction(s.tenant, s.user_id) as tx:
            for r in context:
                head = tx.head(r.key)
                if head is None or head.id != r.id:
                    continue  # already replaced (e.g. by another session's write of the same key)
                tomb = retraction(head, at=at, source=Source.SYSTEM, change_set_id=cs, actor=actor or ACTOR)
                link(tx, head, tomb, at)
                tombstones.append(tomb)
            tx.audit(AuditEvent(tenant=s.tenant, at=at, action="session_close", user_id=s.user_id,
                                actor=actor or ACTOR, memory_id=episode.id if episode else None,
                                detail={"session_id": s.id, "reason": reason, "context": len(context),
                                        "retracted": len(tombstones), "change_set_id": cs,
                                        **({"transcript_redacted": redacted} if redacted else {})}))
        return tombstones

    # -- idle expiry -----------------------------------------------------------------------------------

    def expire_idle(self, *, now: float | None = None, tenant: str | None = None,
                    batch: int = 500, max_sessions: int = 100_000) -> list[SessionClosed]:
        """Close every session whose idle timeout has passed (reason "idle"); returns what was closed."""
        at = self.ctx.now(now)
        store = self.ctx.store
        closed: list[SessionClosed] = []
        seen: set[str] = set()
        while len(closed) < max_sessions:
            entries = store.list_docs(INDEX_TENANT, IDLE_INDEX_NS, limit=batch + len(seen))
            progressed = False
            for key, entry in entries:
                if key in seen:
                    continue
                deadline = float(key.split("|", 1)[0])
                if deadline > at:
                    break
                seen.add(key)
                t, sid = str(entry.get("tenant")), str(entry.get("session_id"))
                if tenant is not None and t != tenant:
                    continue
                progressed = True
                s = load_session(store, t, sid)
                if s is None:  # erased with its user
                    store.delete_doc(INDEX_TENANT, IDLE_INDEX_NS, key)
                    store.delete_doc(INDEX_TENANT, TENANT_INDEX_NS, sid)
                    continue
                if s.idle_key != key or s.status != "open":
                    store.delete_doc(INDEX_TENANT, IDLE_INDEX_NS, key)  # stale entry
                    continue
                if s.is_open(at):
                    continue
                closed.append(self.close(sid, tenant=t, now=at, reason="idle"))
            if not progressed:
                break
        return closed

    # -- write listener --------------------------------------------------------------------------------

    def on_change(self, event: ChangeEvent) -> None:
        """Keeps sessions in step with context writes: implicit open, activity, late writes retracted."""
        if event.action != "write":
            return
        by_session: dict[str, list[MemoryRecord]] = {}
        for r in event.records:
            if r.kind is Kind.CONTEXT and r.session_id and not r.retracted:
                by_session.setdefault(r.session_id, []).append(r)
        for sid, records in by_session.items():
            s = load_session(self.ctx.store, event.tenant, sid)
            if s is None:
                if self.ctx.store.get_doc(INDEX_TENANT, TENANT_INDEX_NS, sid) is None:
                    self.open(event.tenant, event.user_id, records[0].client_id, now=event.at, session_id=sid,
                              implicit=True)
                    continue
                # Known to the index but not here: another tenant's session, or one erased with its user.
                self._retract_late(event, records, "session is unknown to this tenant")
                continue
            if s.user_id != event.user_id:
                self._retract_late(event, records, "session belongs to another user")
            elif s.status != "open":
                self._retract_late(event, records, "session is closed")
            elif not s.is_open(event.at):
                self.close(sid, tenant=s.tenant, now=event.at, reason="idle")  # archives the late write too
            elif event.at > s.last_activity_at:
                self._save(Session.from_dict({**s.to_dict(), "last_activity_at": event.at}), event.at)

    def _retract_late(self, event: ChangeEvent, records: Sequence[MemoryRecord], why: str) -> None:
        tombstones: list[MemoryRecord] = []
        with self.ctx.transaction(event.tenant, event.user_id) as tx:
            for r in records:
                head = tx.head(r.key)
                if head is None or head.id != r.id:
                    continue
                tomb = retraction(head, at=event.at, source=Source.SYSTEM, change_set_id=None, actor=ACTOR)
                link(tx, head, tomb, event.at)
                tombstones.append(tomb)
            tx.audit(AuditEvent(tenant=event.tenant, at=event.at, action="session_late_write", user_id=event.user_id,
                                actor=ACTOR, detail={"session_id": records[0].session_id, "reason": why,
                                                     "retracted": len(tombstones)}))
        if tombstones:
            self.ctx.emit(ChangeEvent(event.tenant, event.user_id, "write", event.at,
                                      keys=tuple(t.key for t in tombstones),
                                      memory_ids=tuple(t.id for t in tombstones), records=tuple(tombstones)))


def episodes(recall: RecallPipeline, tenant: str, user_id: str, *, now: float, since: float | None = None,
             until: float | None = None, limit: int = 10) -> list[MemoryRecord]:
    """Live episodes whose event time (else write time) lies in [since, until), most recent event first.

    Goes through the recall pipeline, so disabled fields and authorization rules apply as for recall.
    """
    check_ids(tenant, user_id)
    for name, v in (("since", since), ("until", until)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v != v):
            raise InvalidArgument(f"{name} must be Unix seconds (float), got {v!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError("limit must be a positive int", field="limit")
    lo = -float("inf") if since is None else since
    hi = float("inf") if until is None else until

    def when(r: MemoryRecord) -> float:
        return r.event_at if r.event_at is not None else r.created_at

    found = [s.memory for s in recall.scored(tenant, user_id, now=now, kinds=[Kind.EPISODE])
             if lo <= when(s.memory) < hi]
    found.sort(key=lambda r: (-when(r), r.id))
    return found[:limit]
