"""The end-to-end evaluation (issue 15): harness on a small fixture, the shipped scenarios, the LLM agent
against the scripted OpenAI-protocol server, `usermem eval e2e|all|readme`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fake_openai import FakeOpenAI, malformed, reply_json
from usermem.config import load_settings
from usermem.errors import ValidationError
from usermem.evals import e2e
from usermem.evals import report as rep
from usermem.interfaces.cli import _register, app

ROOT = Path(__file__).resolve().parents[1]
FIXTURE: list[dict[str, Any]] = [
    {"id": "fx-zh-move", "lang": "zh", "title": "搬家 + 工单过期", "events": [
        {"day": 0, "say": "我住在杭州"},
        {"day": 0, "write": {"kind": "situation", "key": "open_issue", "value": "订单5521退款中",
                             "source": "agent_confirmed"}},
        {"day": 1, "probe": {"ask": "帮我推荐我所在城市的餐厅", "field": "city", "expect": "answer",
                             "values": ["杭州"]}},
        {"day": 20, "say": "我上个月搬到成都了"},
        {"day": 21, "probe": {"ask": "周末想在我住的城市找个餐厅", "field": "city", "expect": "answer",
                              "values": ["成都"], "stale": ["杭州"], "case": "superseded"}},
        {"day": 45, "probe": {"ask": "我那个扣款的问题处理好了吗？", "field": "open_issue", "expect": "ask",
                              "stale": ["5521"], "case": "expired"}},
    ]},
    {"id": "fx-en-consent", "lang": "en", "title": "allergy consent, then erasure", "events": [
        {"day": 0, "say": "I'm allergic to peanuts."},
        {"day": 1, "probe": {"ask": "Order me a cake — mind my allergy", "field": "allergy", "expect": "consent",
                             "stale": ["peanut"], "case": "withheld", "level": "L3"}},
        {"day": 1.001, "consent": {"fields": ["allergy"], "hours": 1}, "say": "Yes, use my allergy info."},
        {"day": 1.002, "probe": {"ask": "Which ingredient must the cake not contain, given my allergy?",
                                 "field": "allergy", "expect": "answer", "values": ["peanut"],
                                 "case": "consented", "level": "L3"}},
        {"day": 2, "erase": ["allergy"], "say": "Please forget my allergy."},
        {"day": 2.001, "consent": {"level": "L3", "hours": 1}, "say": "You may use health info."},
        {"day": 2.002, "probe": {"ask": "Order me a cake — mind my allergy", "field": "allergy", "expect": "ask",
                                 "stale": ["peanut"], "case": "forgotten", "level": "L3"}},
    ]},
]


def _fixture() -> list[e2e.Scenario]:
    return [e2e.parse_scenario(s, "dev") for s in FIXTURE]


def _by(res: e2e.E2EResult, system: str) -> list[e2e.ProbeResult]:
    return [r for r in res.results if r.system == system]


@pytest.fixture(scope="module")
def fixture_result() -> e2e.E2EResult:
    return e2e.evaluate(_fixture())


def test_harness_on_the_fixture_tells_the_systems_apart(fixture_result: e2e.E2EResult) -> None:
    um, kv, tr, none = (_by(fixture_result, s) for s in ("usermem", "kv", "transcript", "none"))
    assert [r.success for r in um] == [True] * 6, [(r.field, r.action, r.value) for r in um]
    assert sum(r.stale_use for r in um) == 0
    # no memory: asks every time, succeeds only where not using memory is right
    assert all(r.action == "ask" for r in none) and [r.success for r in none] == [False, False, True, False, False,
                                                                                   True]
    # latest-wins KV: keeps the expired issue, uses the allergy without consent; deletes on erasure
    assert [r.case for r in kv if r.stale_use] == ["expired", "withheld"]
    assert sum(r.sensitive_without_consent for r in kv) == 1
    # the transcript keeps everything, erased data included
    assert {r.case for r in tr if r.stale_use} == {"expired", "withheld", "forgotten"}
    summ = fixture_result.by_split["dev"]
    assert summ["usermem"]["l3_without_consent"] == 0 and summ["kv"]["l3_without_consent"] == 1
    assert summ["none"]["repeated_ask_rate"] == 1.0
    assert summ["transcript"]["tokens_vs_transcript"] == 0.0


def test_usermem_never_uses_stale_forgotten_or_withheld_information_on_the_shipped_scenarios() -> None:
    """The gate: on every shipped scenario (dev and test), the usermem agent never uses a value its memory
    knew to be superseded, expired, forgotten or withheld, and never an L2/L3 value without consent."""
    scenarios = e2e.load_scenarios()
    res = e2e.evaluate(scenarios, systems=("usermem",))
    um = res.results
    offenders = [(r.scenario, r.day, r.field, r.value, r.case) for r in um
                 if r.stale_use and r.stale_cause != "update_not_captured"]
    assert offenders == []
    assert [r for r in um if r.stale_use and r.stale_kind in ("forgotten", "expired", "withheld")] == []
    assert [r for r in um if r.sensitive_without_consent] == []


def test_a_stale_use_fails_the_gate() -> None:
    """The judge is not vacuous: an agent that answers from a stale value is caught, with its cause."""
    sc = _fixture()

    class Stale:
        name = "stale"

        def reply(self, probe: e2e.Probe, view: e2e.MemoryView) -> e2e.Reply:
            return e2e.Reply("answer", probe.stale[0]) if probe.stale else e2e.Reply("answer", probe.values[0])

    res = e2e.evaluate(sc, Stale(), systems=("usermem",))
    stale = [r for r in res.results if r.stale_use]
    assert {r.case for r in stale} == {"superseded", "expired", "withheld", "forgotten"}
    assert all(r.stale_cause == "memory_layer" for r in stale)
    assert res.by_split["dev"]["usermem"]["l3_without_consent"] == 2


def test_shipped_scenarios_are_many_bilingual_split_and_cover_every_case() -> None:
    scenarios = e2e.load_scenarios()
    assert len(scenarios) >= 40
    assert {s.lang for s in scenarios} == {"zh", "en"} and {s.split for s in scenarios} == {"dev", "test"}
    for split in ("dev", "test"):
        langs = [s.lang for s in scenarios if s.split == split]
        assert langs.count("zh") >= 8 and langs.count("en") >= 8
    cases = {p.case for s in scenarios for p in s.probes}
    assert cases >= {"superseded", "corrected", "expired", "forgotten", "withheld", "consented", "revoked",
                     "priority", "pushback", "context"}
    ops = {e.op for s in scenarios for e in s.events}
    assert ops >= {"say", "system", "write", "erase", "consent", "revoke", "deny", "verify", "context"}
    # multi-session: every scenario spans more than one simulated day
    assert all(s.events[-1].day > s.events[0].day for s in scenarios)


@pytest.mark.parametrize(("bad", "msg"), [
    ({"id": "x", "lang": "fr", "events": [{"day": 0, "probe": {"ask": "a", "field": "city", "expect": "ask"}}]},
     "lang"),
    ({"id": "x", "lang": "en", "events": [{"day": 0, "say": "hi"}]}, "no probe"),
    ({"id": "x", "lang": "en", "events": [{"day": 0, "probe": {"ask": "a", "field": "city", "expect": "answer"}}]},
     "no values"),
    ({"id": "x", "lang": "en", "events": [{"day": 2, "say": "a"}, {"day": 1, "say": "b"}]}, "time order"),
    ({"id": "x", "lang": "en", "events": [{"day": 0, "probe": {"ask": "a", "field": "c", "expect": "guess"}}]},
     "expect"),
])
def test_bad_scenarios_are_refused(bad: dict[str, Any], msg: str) -> None:
    with pytest.raises(ValidationError, match=msg):
        e2e.parse_scenario(bad, "dev")


def test_judge_semantics() -> None:
    p = e2e.Probe("q", "city", "answer", ("成都",), ("杭州",), "superseded")
    assert e2e.judge(p, e2e.Reply("answer", "成都")) == (True, False, False, False)
    assert e2e.judge(p, e2e.Reply("answer", "杭州")) == (False, True, False, False)
    assert e2e.judge(p, e2e.Reply("ask")) == (False, False, True, False)
    w = e2e.Probe("q", "allergy", "consent", (), ("peanut",), "withheld", "L3")
    assert e2e.judge(w, e2e.Reply("consent")) == (True, False, False, False)
    assert e2e.judge(w, e2e.Reply("answer", "Peanuts")) == (False, True, False, True)
    assert e2e.judge(w, e2e.Reply("ask")) == (False, False, True, False)


def test_llm_agent_sees_only_what_each_system_gives_and_usermem_never_shows_a_stale_value() -> None:
    views: list[tuple[str, e2e.Probe, e2e.MemoryView]] = []
    extract = e2e.Extractor()
    with FakeOpenAI(default=reply_json({"action": "ask", "value": ""})) as server:
        server.script(malformed("{not json"))  # a failed reply falls back to asking, and is counted
        settings = load_settings(env={}, llm_base_url=server.base_url, llm_model="fake", llm_retries=0)
        agent = e2e.LLMAgent(settings, timeout=5.0)
        results = [r for sc in _fixture() for r in e2e.run_scenario(sc, agent, extract=extract, views=views)]
        agent.close()
        prompts = [m["messages"][0]["content"] for m in server.chat_requests()]
    extract.close()
    assert agent.failures == 1 and len(prompts) == len(results) == len(views)
    for (system, probe, view), prompt in zip(views, prompts, strict=True):
        assert (view.prompt or "(none)") in prompt and probe.field in prompt
        if system == "usermem" and probe.expect != "answer":  # nothing it must not use is ever shown
            assert not any(v.casefold() in prompt.casefold() for v in probe.stale), (probe, prompt)
    assert any(s == "usermem" and "CONSENT_REQUIRED" in v.prompt and "allergy" in v.prompt for s, _p, v in views)
    # the baseline shows the erased allergy to the model
    assert any(s == "transcript" and p.case == "forgotten" and "peanuts" in v.prompt for s, p, v in views)
    assert all(r.action == "ask" for r in results)


def _runner() -> CliRunner:
    _register()
    return CliRunner()


def test_cli_eval_e2e_writes_reports_into_the_given_folder(tmp_path: Path) -> None:
    data = tmp_path / "fx.json"
    data.write_text(json.dumps({"split": "dev", "scenarios": FIXTURE}, ensure_ascii=False), encoding="utf-8")
    r = _runner().invoke(app, ["eval", "e2e", "--data", str(data), "--split", "dev", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert {p.name for p in (tmp_path / "o").iterdir()} >= {"eval-e2e.json", "eval-e2e.md"}
    md = (tmp_path / "o" / "eval-e2e.md").read_text(encoding="utf-8")
    assert "| usermem | 6 | 100.0% |" in md
    missing = _runner().invoke(app, ["eval", "e2e", "--data", "no-such.json"])
    assert missing.exit_code != 0 and "does not exist" in missing.output


def test_cli_eval_e2e_llm_agent_against_the_scripted_server(tmp_path: Path) -> None:
    data = tmp_path / "fx.json"
    data.write_text(json.dumps({"split": "dev", "scenarios": FIXTURE}, ensure_ascii=False), encoding="utf-8")
    with FakeOpenAI(default=reply_json({"action": "ask", "value": ""})) as server:
        env = {"USERMEM_LLM_BASE_URL": server.base_url, "USERMEM_LLM_MODEL": "fake"}
        r = _runner().invoke(app, ["eval", "e2e", "--data", str(data), "--split", "dev", "--agent", "both",
                                   "--systems", "none,usermem", "--out", str(tmp_path / "o")], env=env)
        asked = len(server.chat_requests())
    assert r.exit_code == 0, r.output
    assert asked == 2 * 6  # two systems × six probes, one request each
    report = json.loads((tmp_path / "o" / "eval-e2e.json").read_text(encoding="utf-8"))
    assert set(report) == {"scripted", "llm"} and report["llm"]["meta"]["llm"]["ok"] == asked
    md = (tmp_path / "o" / "eval-e2e.md").read_text(encoding="utf-8")
    assert "## llm agent — dev split" in md


def test_eval_all_reports_missing_data_with_where_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default data/ folder of the project is absent here
    calls: list[str] = []
    from usermem.interfaces import cli_evals, cli_privacy, cli_understand

    def fake(name: str) -> Any:
        def run(out: Path, **_kw: Any) -> None:
            calls.append(name)
            (out / "marker").write_text("x", encoding="utf-8")
        return run

    # the long evaluations are exercised by their own tests; here only the orchestration is
    monkeypatch.setattr(cli_understand, "eval_extraction", fake("extraction"))
    monkeypatch.setattr(cli_understand, "eval_plan", fake("plan"))
    monkeypatch.setattr(cli_privacy, "eval_pii", fake("pii"))
    monkeypatch.setattr(cli_evals, "eval_e2e", fake("e2e"))
    r = _runner().invoke(app, ["eval", "all"])
    assert r.exit_code == 0, r.output
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("eval-all-")  # a fresh folder, not reports/
    summary = json.loads((runs[0] / "eval.json").read_text(encoding="utf-8"))
    states = {s["evaluation"]: s for s in summary["status"]}
    assert calls == ["extraction", "plan", "pii", "e2e"]
    assert states["locomo"]["state"] == "missing data" and "github.com/snap-research/LoCoMo" in states["locomo"]["detail"]
    assert states["memorybank"]["state"] == "missing data" and "MemoryBank" in states["memorybank"]["detail"]
    assert "missing data" in (runs[0] / "eval.md").read_text(encoding="utf-8")


def test_every_eval_command_defaults_to_a_fresh_folder_and_no_path_outside_the_project() -> None:
    import inspect

    from usermem.interfaces import cli_evals, cli_privacy, cli_relevance, cli_understand

    for fn in (cli_understand.eval_plan, cli_understand.eval_extraction, cli_understand.eval_extract,
               cli_understand.eval_assemble, cli_relevance.eval_locomo, cli_relevance.eval_memorybank,
               cli_relevance.eval_semantic, cli_privacy.eval_pii, cli_evals.eval_e2e, cli_evals.eval_all):
        params = inspect.signature(fn).parameters
        assert params["out"].default is None, fn.__name__
        for p in params.values():
            if isinstance(p.default, Path):
                assert not p.default.is_absolute() and ".." not in p.default.parts, (fn.__name__, p.default)


def test_readme_table_is_the_one_the_report_generates(monkeypatch: pytest.MonkeyPatch) -> None:
    """README's evaluation summary is generated from reports/eval.json (`usermem eval readme`)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    summary = json.loads((ROOT / "reports" / "eval.json").read_text(encoding="utf-8"))
    assert rep.update_readme(readme, summary, "reports/eval.json") == readme
    block = re.search(re.escape(rep.README_BEGIN) + r"(.*?)" + re.escape(rep.README_END), readme, re.DOTALL)
    assert block and "| evaluation | headline (split) | value |" in block.group(1)
    monkeypatch.chdir(ROOT)
    r = _runner().invoke(app, ["eval", "readme", "reports/eval.json", "--check"])
    assert r.exit_code == 0, r.output


def test_readme_update_replaces_only_its_block() -> None:
    summary = {"rows": [{"evaluation": "e2e", "metric": "m", "value": "1", "split": "test (n=3)", "how": "h"},
                        {"evaluation": "e2e", "metric": "m", "value": "2", "split": "dev (n=3)", "how": "h"},
                        {"evaluation": "locomo", "metric": "r", "value": "3", "split": "dev (n=9)", "how": "h"}],
               "status": [{"evaluation": "locomo", "state": "missing data", "detail": "get it"}]}
    text = "# T\n\nbefore\n"
    once = rep.update_readme(text, summary, "x.json")
    assert once.startswith(text.rstrip("\n")) and "| e2e | m (test (n=3)) | 1 |" in once and "dev (n=3)" not in once
    assert "| locomo | r (dev (n=9)) | 3 |" in once  # no held-out rows: its dev split is shown, labelled
    assert "| locomo | missing data | get it |" in once
    assert rep.update_readme(once, summary, "x.json") == once
