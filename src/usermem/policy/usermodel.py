"""The user model's pure rules (seed 004 UserMentalModel, seed 000 procedural memory): no I/O.

- **Inference confidence** from signals: every agreeing signal adds evidence, every contradicting one
  takes two agreeing signals' worth away::

      confidence = 1 - MISS ** max(0, agree - 2 * contradict)      (MISS = 0.531)

  so three explicit "shorter please" give 0.85 (the seed's number), four give 0.92, and one contradiction
  after three brings it back to 0.47. Capped at 0.95: an inference never reaches the certainty of a
  stated value.
- **Derivation rules**: `when` (field → accepted values) ⇒ `then` (a derived attribute, text in zh and en).
  A rule fires when every condition holds on the user's current values; the derived attribute names the
  rule, its version and the memories it used (its `why`).
- **Procedures**: a review queue's states and the transitions a reviewer may make.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from usermem.errors import ValidationError
from usermem.policy.validate import SURROGATE, shown

MISS = 0.531
MAX_INFERENCE_CONFIDENCE = 0.95
DEFAULT_THRESHOLD = 3
DEFAULT_SUPPRESS_DAYS = 30.0
INFERENCE_MODES: tuple[str, ...] = ("confirm", "active")
InferenceMode = Literal["confirm", "active"]
ACTIVE_IMPORTANCE = 0.2  # "active at low weight"
MAX_RULES = 200
MAX_TEXT = 500
_RULE_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_KEY = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
# The fields of a derivation rule (DeriveRule.to_dict); set_rule refuses any other.
RULE_FIELDS: frozenset[str] = frozenset({"id", "when", "then_key", "then", "version", "status", "proposed_by"})


def inference_confidence(agree: int, contradict: int = 0) -> float:
    """Confidence of an inference from `agree` agreeing and `contradict` contradicting signals."""
    if agree < 0 or contradict < 0:
        raise ValueError("signal counts are never negative")
    net = max(0, agree - 2 * contradict)
    return round(min(MAX_INFERENCE_CONFIDENCE, 1.0 - MISS**net), 4)


@dataclass(frozen=True, slots=True)
class InferencePolicy:
    """How a tenant turns signals into inferences."""

    mode: InferenceMode = "confirm"  # confirm: ask the user first | active: use at low weight at once
    threshold: int = DEFAULT_THRESHOLD  # agreeing signals (net of contradictions) before proposing
    suppress_days: float = DEFAULT_SUPPRESS_DAYS  # a denied inference is not proposed again for this long

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InferencePolicy:
        mode = d.get("mode", "confirm")
        if mode not in INFERENCE_MODES:
            raise ValidationError(f"mode must be one of {INFERENCE_MODES}, got {mode!r}", field="mode")
        threshold = d.get("threshold", DEFAULT_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or not 1 <= threshold <= 100:
            raise ValidationError("threshold must be an int between 1 and 100", field="threshold")
        days = d.get("suppress_days", DEFAULT_SUPPRESS_DAYS)
        if isinstance(days, bool) or not isinstance(days, int | float) or not 0 <= float(days) <= 3650:
            raise ValidationError("suppress_days must be a number between 0 and 3650", field="suppress_days")
        return cls(mode=mode, threshold=threshold, suppress_days=float(days))

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "threshold": self.threshold, "suppress_days": self.suppress_days}


def value_token(value: Any) -> str:
    """A stable, case- and width-insensitive token for comparing values (signals for the same value agree)."""
    text = value if isinstance(value, str) else repr(value)
    return unicodedata.normalize("NFKC", text).strip().casefold()


# -- derivation rules ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeriveRule:
    """`when` every field holds one of its values (case-insensitive; a list value holds if any item does),
    derive `then_key` with the text `then` ({"zh": ..., "en": ...})."""

    id: str
    when: Mapping[str, tuple[str, ...]]
    then_key: str
    then: Mapping[str, str]
    version: int = 1
    status: Literal["active", "proposed", "disabled"] = "active"
    proposed_by: str = "default"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeriveRule:
        if not isinstance(d, Mapping):
            raise ValidationError("a rule must be an object", field="rule")
        rid = d.get("id")
        if not isinstance(rid, str) or not _RULE_ID.match(rid):
            raise ValidationError("rule id must match [a-z0-9][a-z0-9_.-]{0,63}", field="id")
        when_raw = d.get("when")
        if not isinstance(when_raw, Mapping) or not when_raw or len(when_raw) > 8:
            raise ValidationError("`when` must map 1..8 field keys to accepted values", field="when")
        when: dict[str, tuple[str, ...]] = {}
        for key, values in when_raw.items():
            if not isinstance(key, str) or not _KEY.match(key):
                raise ValidationError(f"`when` key {shown(key)} is not a field key", field="when")
            vals = [values] if isinstance(values, str) else values
            if (not isinstance(vals, Sequence) or not vals or len(vals) > 32
                    or not all(isinstance(v, str) and 0 < len(v) <= 100 and not SURROGATE.search(v) for v in vals)):
                raise ValidationError(f"`when.{key}` must be 1..32 non-empty strings", field="when")
            when[key] = tuple(vals)
        then_key = d.get("then_key")
        if not isinstance(then_key, str) or not _KEY.match(then_key):
            raise ValidationError("then_key must be a field key", field="then_key")
        then = d.get("then")
        if (not isinstance(then, Mapping) or not then or set(then) - {"zh", "en"}
                or not all(isinstance(v, str) and 0 < len(v) <= MAX_TEXT for v in then.values())):
            raise ValidationError("`then` must be {zh?: text, en?: text} (at least one)", field="then")
        status = d.get("status", "active")
        if status not in ("active", "proposed", "disabled"):
            raise ValidationError("status must be active, proposed or disabled", field="status")
        version = d.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValidationError("version must be a positive int", field="version")
        proposed_by = d.get("proposed_by", "api")
        if not isinstance(proposed_by, str) or len(proposed_by) > 200:
            raise ValidationError("proposed_by must be a short string", field="proposed_by")
        return cls(id=rid, when=when, then_key=then_key, then=dict(then), version=version, status=status,
                   proposed_by=proposed_by)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "when": {k: list(v) for k, v in self.when.items()}, "then_key": self.then_key,
                "then": dict(self.then), "version": self.version, "status": self.status,
                "proposed_by": self.proposed_by}

    def holds(self, values: Mapping[str, Any]) -> bool:
        for key, accepted in self.when.items():
            if key not in values:
                return False
            have = values[key]
            items = have if isinstance(have, list) else [have]
            tokens = {value_token(x) for x in items}
            if not tokens & {value_token(a) for a in accepted}:
                return False
        return True

    def text(self, language: str) -> str:
        return self.then.get(language) or next(iter(self.then.values()))


@dataclass(frozen=True, slots=True)
class Derivation:
    rule: DeriveRule
    input_keys: tuple[str, ...]


def derive(rules: Sequence[DeriveRule], values: Mapping[str, Any]) -> list[Derivation]:
    """The active rules that fire on `values` (field key → current value)."""
    return [Derivation(r, tuple(sorted(r.when))) for r in rules if r.status == "active" and r.holds(values)]


DEFAULT_RULES: tuple[DeriveRule, ...] = (
    DeriveRule("pediatrician.dosing", {"occupation": ("儿科医生", "儿科大夫", "pediatrician", "paediatrician")},
               "expertise", {"zh": "熟悉儿童用药剂量", "en": "familiar with paediatric dosing"}),
    DeriveRule("pediatrician.vaccines", {"occupation": ("儿科医生", "儿科大夫", "pediatrician", "paediatrician")},
               "follows", {"zh": "关注疫苗接种指南", "en": "follows vaccination guidelines"}),
    DeriveRule("teacher.schedule", {"occupation": ("老师", "教师", "teacher", "schoolteacher")},
               "schedule_pattern", {"zh": "寒暑假有空闲", "en": "has school holidays free"}),
    DeriveRule("vegan.diet", {"diet": ("纯素", "吃纯素", "vegan")},
               "avoids", {"zh": "不吃任何动物制品（含蛋奶）", "en": "avoids all animal products, eggs and dairy included"}),
    DeriveRule("vegetarian.diet", {"diet": ("素食", "吃素", "vegetarian")},
               "avoids", {"zh": "不吃肉类", "en": "does not eat meat"}),
)


RULES_NS = "derive_rules"  # the documents namespace a tenant's own rule versions live in (id -> {current, history})
RULE_DOCS_READ = MAX_RULES * 2  # how many of those documents a read of the tenant's rules asks for


def tenant_rules(docs: Mapping[str, Mapping[str, Any]]) -> list[DeriveRule]:
    """A tenant's rules from its RULES_NS documents (rule id -> {"current": rule, ...}): the shipped defaults,
    overridden by id by the tenant's own versions, sorted by id."""
    out = {r.id: r for r in DEFAULT_RULES}
    for rid, doc in docs.items():
        out[rid] = DeriveRule.from_dict(doc["current"])
    return sorted(out.values(), key=lambda r: r.id)


def input_keys(rules: Sequence[DeriveRule]) -> frozenset[str]:
    """The fields the active rules among `rules` read."""
    return frozenset(k for r in rules if r.status == "active" for k in r.when)


# -- procedures --------------------------------------------------------------------------------------

PROCEDURE_STATES: tuple[str, ...] = ("proposed", "approved", "rejected", "rolled_back")
REVIEW_DECISIONS: tuple[str, ...] = ("approve", "edit", "reject")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The recorded evaluation an approval needs: which test set, what it gave, whether it passed."""

    name: str
    passed: bool
    result: str = ""

    @classmethod
    def from_any(cls, raw: Any) -> Evaluation:
        if isinstance(raw, Evaluation):
            return raw
        if not isinstance(raw, Mapping):
            raise ValidationError("evaluation must be {name, passed, result?}", field="evaluation")
        name, passed, result = raw.get("name"), raw.get("passed"), raw.get("result", "")
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise ValidationError("evaluation.name must name the test set (1..200 characters)", field="evaluation")
        if not isinstance(passed, bool):
            raise ValidationError("evaluation.passed must be true or false", field="evaluation")
        if not isinstance(result, str) or len(result) > 2000:
            raise ValidationError("evaluation.result must be text (≤ 2000 characters)", field="evaluation")
        return cls(name, passed, result)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "result": self.result}


def next_procedure_state(current: str, decision: str, evaluation: Evaluation | None) -> str:
    """The state a review moves a procedure to, or ValidationError when the move is not allowed."""
    if decision not in REVIEW_DECISIONS:
        raise ValidationError(f"decision must be one of {REVIEW_DECISIONS}", field="decision")
    if current != "proposed":
        raise ValidationError(f"only a proposed procedure can be reviewed (this one is {current})", field="decision")
    if decision == "reject":
        return "rejected"
    if decision == "edit":
        return "proposed"
    if evaluation is None:
        raise ValidationError("approval needs a recorded evaluation {name, passed, result}", field="evaluation")
    if not evaluation.passed:
        raise ValidationError(f"evaluation {evaluation.name!r} did not pass; approval refused", field="evaluation")
    return "approved"
