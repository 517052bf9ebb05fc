"""Dynamic decay (seed 004 §2.3): properties of the weight, the defaults, and the seed's worked example.

Defaults (model.KIND_REGISTRY, docs/lifecycle.md): preference time constant 30 days (≈37 % after 30
days), confirm threshold 0.55, drop threshold 0.3, use lifts to 0.95 × base.
"""

from __future__ import annotations

import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from usermem import Memory
from usermem.model import DAY, HOUR, KIND_REGISTRY, Kind
from usermem.policy import decay

T0 = 1_790_000_000.0
PREF_HL = KIND_REGISTRY[Kind.PREFERENCE].half_life_seconds
TAU = decay.time_constant(PREF_HL)  # 30 days

times = st.floats(min_value=0, max_value=400 * DAY, allow_nan=False)
bases = st.floats(min_value=0.05, max_value=1.0)
half_lives = st.sampled_from([spec.half_life_seconds for spec in KIND_REGISTRY.values()] + [HOUR, 7 * DAY])
opt_times = st.none() | times


@pytest.fixture
def mem(lean_mem: Memory) -> Memory:
    """These tests are about lifecycle, not relevance (those that rank with recall(query=...) use `hybrid_mem`)."""
    return lean_mem


def _d(base: float, hl: float, created: float, confirmed: float | None, used: float | None) -> decay.DecayInput:
    return decay.DecayInput(base, hl, created, confirmed, used)


# -- properties of the weight function ---------------------------------------------------------------------

@given(bases, half_lives, times, opt_times, opt_times, times, times)
def test_weight_never_rises_with_time_alone(base, hl, created, confirmed, used, t, dt):
    d = _d(base, hl, created, confirmed, used)
    assert decay.weight(d, t + dt) <= decay.weight(d, t) + 1e-12


@given(bases, half_lives, times, opt_times, opt_times, times, times)
def test_a_use_never_lowers_the_weight(base, hl, created, confirmed, used, use_at, extra):
    # A use happens at some time and is evaluated then or later; last_used_at only moves forward.
    new_use = max(use_at, used or 0.0, created)
    now = new_use + extra
    before = decay.weight(_d(base, hl, created, confirmed, used), now)
    after = decay.weight(_d(base, hl, created, confirmed, new_use), now)
    assert after >= before - 1e-12


@given(bases, half_lives, times, opt_times, opt_times, times, times)
def test_a_confirmation_never_lowers_the_weight(base, hl, created, confirmed, used, confirm_at, extra):
    new_confirm = max(confirm_at, confirmed or 0.0)
    now = max(new_confirm, used or 0.0) + extra
    before = decay.weight(_d(base, hl, created, confirmed, used), now)
    after = decay.weight(_d(base, hl, created, new_confirm, used), now)
    assert after >= before - 1e-12


@given(bases, half_lives, times, times)
def test_confirmation_restores_base_and_use_restores_095(base, hl, created, later):
    at = created + later
    assert decay.weight(_d(base, hl, created, at, None), at) == pytest.approx(base)
    assert decay.weight(_d(base, hl, created, None, at), at) == pytest.approx(
        max(decay.USE_BOOST * base, base * decay.recency(later, hl)))


@given(bases, half_lives, times, opt_times, opt_times, st.floats(min_value=0.01, max_value=0.99))
def test_crossing_at_is_where_the_weight_crosses(base, hl, created, confirmed, used, threshold):
    d = _d(base, hl, created, confirmed, used)
    t = decay.crossing_at(d, threshold)
    if t == -math.inf:
        anchor = max(created, confirmed or created)
        assert decay.weight(d, max(anchor, used or anchor)) < threshold + 1e-9
        return
    eps = max(1e-6 * hl, 1e-3)
    assert decay.weight(d, t - eps) >= threshold - 1e-9
    assert decay.weight(d, t + eps) <= threshold + 1e-9


# -- the defaults and what they imply ---------------------------------------------------------------------

def test_defaults_follow_the_seed_intent():
    fact = KIND_REGISTRY[Kind.FACT]
    assert decay.recency(3650 * DAY, fact.half_life_seconds) == pytest.approx(0.95, abs=1e-6)  # 5 % in 10 years
    assert decay.recency(30 * DAY, PREF_HL) == pytest.approx(math.exp(-1))  # 37 % after 30 days
    assert decay.recency(HOUR, KIND_REGISTRY[Kind.CONTEXT].half_life_seconds) < 0.01  # ~0 after an hour
    assert decay.CONFIRM_THRESHOLD == 0.55 and decay.DROP_THRESHOLD == 0.3 and decay.USE_BOOST == 0.95
    assert not KIND_REGISTRY[Kind.FACT].volatile and KIND_REGISTRY[Kind.PREFERENCE].volatile


def test_crossing_times_implied_by_the_defaults():
    # Fresh preference (base 1.0): asked about after ~17.9 days, dropped after ~36.1 days.
    assert decay.crossing_time(1.0, 0.55, PREF_HL) / DAY == pytest.approx(30 * math.log(1 / 0.55), abs=1e-9)
    assert decay.crossing_time(1.0, 0.55, PREF_HL) / DAY == pytest.approx(17.93, abs=0.01)
    assert decay.crossing_time(1.0, 0.3, PREF_HL) / DAY == pytest.approx(36.12, abs=0.01)
    # After a use (0.95): 16.4 days to the confirm threshold, 34.6 to the drop threshold.
    used = decay.DecayInput(1.0, PREF_HL, 0.0, None, 10 * DAY)
    assert (decay.crossing_at(used, 0.55) - 10 * DAY) / DAY == pytest.approx(16.40, abs=0.01)
    assert (decay.crossing_at(used, 0.3) - 10 * DAY) / DAY == pytest.approx(34.58, abs=0.01)


def test_the_seed_figures_do_not_fit_one_lambda():
    # "30 days -> 37 %" fixes λ = 1/30 per day; "0.95 -> 0.55 after 6 weeks" needs λ = ln(0.95/0.55)/42.
    lam_30d = 1 / 30
    lam_6w = math.log(0.95 / 0.55) / 42
    assert lam_30d / lam_6w == pytest.approx(2.56, abs=0.01)
    # And the seed's own λ = 0.1/day would leave 5 % after 30 days, not 37 %.
    assert math.exp(-0.1 * 30) == pytest.approx(0.0498, abs=1e-4)


# -- the worked example, end to end through the engine --------------------------------------------------

@pytest.mark.parametrize("value, lang, question", [
    ("暂停科技资讯推送两周", "zh", "是否需要恢复科技资讯推送？"),
    ("pause tech news for two weeks", "en", "Do you still want tech news paused?"),
])
def test_seed_worked_example_tech_news(mem: Memory, value, lang, question):
    """'No tech news for two weeks' (1.0) → search about AI chips in week 3 (back to 0.95) → weeks
    without the topic → crosses 0.55 and is flagged with its question → later dropped below 0.3."""
    t, u = "fin", "u1"
    w = mem.write(t, u, "preference", "news_topics", value, source="user_confirmed", now=T0)
    assert w.memory is not None and w.memory.confidence == 1.0

    def scored(day: float, **kw):
        found = mem.recall_scored(t, u, k=10, keys=["news_topics"], now=T0 + day * DAY, **kw)
        return found[0] if found else None

    first = scored(0)
    assert first is not None and first.weight == pytest.approx(1.0) and not first.needs_confirmation
    two_weeks = scored(14)
    assert two_weeks is not None and two_weeks.weight == pytest.approx(math.exp(-14 / 30))
    assert not two_weeks.needs_confirmation

    # Week 3: the user searches "AI芯片进展"; the memory is recalled for that turn and marked used.
    use_day = 16.0
    scored(use_day, mark_used=True)
    lifted = scored(use_day)
    assert lifted is not None and lifted.weight == pytest.approx(0.95)
    assert mem.get(t, w.memory.id).last_used_at == T0 + use_day * DAY

    # Weeks without the topic: the weight crosses the confirm threshold 16.4 days after the use.
    crossing = use_day + 30 * math.log(0.95 / 0.55)
    before = scored(crossing - 0.01)
    after = scored(crossing + 0.01)
    assert before is not None and not before.needs_confirmation and before.question is None
    assert after is not None and after.needs_confirmation
    assert after.weight == pytest.approx(0.55, abs=0.001)
    assert after.question == question
    # Without the use it would have been flagged on day 17.9 already.
    assert 30 * math.log(1 / 0.55) < use_day + 2

    # Below the drop threshold it is no longer recalled; a confirmation brings it back at base.
    drop = use_day + 30 * math.log(0.95 / 0.3)
    assert scored(drop - 0.01) is not None
    assert scored(drop + 0.01) is None
    mem.confirm(t, u, w.memory.id, now=T0 + (drop + 1) * DAY)
    back = scored(drop + 1)
    assert back is not None and back.weight == pytest.approx(1.0) and not back.needs_confirmation


def test_question_follows_the_users_language_memory(mem: Memory):
    mem.write("t", "u", "preference", "language", "English", source="user_confirmed", now=T0)
    mem.write("t", "u", "preference", "news_topics", "暂停科技资讯", source="user_confirmed", now=T0)
    flagged = [s for s in mem.recall_scored("t", "u", k=10, now=T0 + 20 * DAY) if s.needs_confirmation]
    assert [s.memory.key for s in flagged] == ["news_topics"]  # language is standing: never flagged
    assert flagged[0].question == "Do you still want tech news paused?"


def test_generic_question_for_fields_without_a_template(mem: Memory):
    mem.write("t", "u", "preference", "likes", "爵士乐", source="user_confirmed", now=T0)
    mem.write("t", "u2", "preference", "likes", "jazz", source="user_confirmed", now=T0)
    zh = mem.recall_scored("t", "u", now=T0 + 20 * DAY)[0]
    en = mem.recall_scored("t", "u2", now=T0 + 20 * DAY)[0]
    # Issue 14: the field is named by its contract's label in the user's language, never by its key.
    assert zh.needs_confirmation and zh.question == "您的喜好还是「爵士乐」吗？"
    assert en.needs_confirmation and en.question == "Is “jazz” still right for your likes?"
    mem.write("t", "u3", "preference", "news_push", "科技资讯", source="user_confirmed", now=T0)  # no contract
    raw = mem.recall_scored("t", "u3", now=T0 + 20 * DAY)[0]
    assert raw.needs_confirmation and raw.question == "您之前告诉我们「科技资讯」，现在还是这样吗？"
    assert "news_push" not in (raw.question or "")


def test_only_volatile_non_standing_memories_are_flagged_or_dropped(mem: Memory):
    t, u = "t", "u"
    mem.write(t, u, "fact", "occupation", "teacher", source="user_confirmed", now=T0)
    mem.write(t, u, "preference", "contact", "email only", source="user_confirmed", now=T0)  # standing
    mem.write(t, u, "preference", "allergy_note", "none", source="user_confirmed", now=T0)
    mem.write(t, u, "situation", "open_issue", "refund pending", now=T0)
    got = {s.memory.key: s for s in mem.recall_scored(t, u, k=10, now=T0 + 40 * DAY)}
    # 40 days: the plain preference fell below 0.3 and is gone; the standing one is kept unflagged;
    # the situation expired at 30 days (TTL); the fact is merely ranked.
    assert "allergy_note" not in got and "open_issue" not in got
    assert not got["contact"].needs_confirmation and got["contact"].weight < 0.3
    assert not got["occupation"].needs_confirmation and got["occupation"].weight > 0.99


def test_field_half_life_override_changes_the_crossing(mem: Memory):
    from usermem.policy.contracts import FieldContract

    fast = FieldContract(key="mood_music", kind=Kind.PREFERENCE, half_life_seconds=decay.half_life_for(DAY))
    m = Memory(settings=mem.settings, contracts=mem.contracts.with_contract(fast))
    m.write("t", "u", "preference", "mood_music", "lofi", source="user_confirmed", now=T0)
    day = m.recall_scored("t", "u", now=T0 + DAY)[0]
    assert day.weight == pytest.approx(math.exp(-1))  # time constant one day
    assert day.needs_confirmation
    m.close()


# -- engine-level property: observed weights ---------------------------------------------------------------

steps = st.lists(st.tuples(st.sampled_from(["wait", "use", "confirm", "look"]),
                           st.floats(min_value=0.1, max_value=12.0)), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, source=st.sampled_from(["user_confirmed", "extracted", "inferred"]))
def test_engine_weight_only_rises_on_use_or_confirmation(mem: Memory, steps, source):
    m, u = mem, uuid.uuid4().hex  # one store, a fresh user per example
    w = m.write("t", u, "preference", "reply_length", "short", source=source, now=T0)
    assert w.memory is not None
    now = T0
    last = 2.0  # weight seen last time (0 when dropped)
    for action, days in steps:
        now += days * DAY
        found = m.recall_scored("t", u, keys=["reply_length"], now=now)
        weight = found[0].weight if found else 0.0
        assert weight <= last + 1e-9, "rose with time alone"
        if action == "use" and found:
            m.recall("t", u, keys=["reply_length"], now=now, mark_used=True)
        elif action == "confirm":
            current = m.history("t", u, "reply_length")[-1]
            m.confirm("t", u, current.id, now=now)
        after = m.recall_scored("t", u, keys=["reply_length"], now=now)
        last = after[0].weight if after else 0.0
        assert last >= weight - 1e-9, "a use or confirmation lowered the weight"
        if action == "confirm":
            assert after and after[0].weight == pytest.approx(1.0) and after[0].memory.last_confirmed_at == now
