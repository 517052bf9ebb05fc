"""`usermem eval e2e` (does memory help?), `usermem eval all` (every evaluation, one report) and
`usermem eval readme` (the README summary table from that report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from usermem.interfaces import cli_output
from usermem.interfaces.cli import console, eval_app
from usermem.interfaces.cli_output import esc, say, table

OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Output directory (default: a fresh runs/<name>-<run id>/; never the committed reports/)")]


def _agents(agent: str) -> list[str]:
    if agent not in ("scripted", "llm", "both"):
        raise typer.BadParameter("use scripted, llm or both", param_hint="--agent")
    return ["scripted", "llm"] if agent == "both" else [agent]


@eval_app.command("e2e")
def eval_e2e(
    data: Annotated[Path | None, typer.Option(
        "--data", help="Scenario file or directory with dev.json/test.json (default: the shipped scenarios)")] = None,
    split: Annotated[str, typer.Option("--split", help="dev | test | both")] = "both",
    agent: Annotated[str, typer.Option("--agent", help="scripted | llm | both (llm needs USERMEM_LLM_*)")] = "scripted",
    systems: Annotated[str, typer.Option("--systems", help="Comma-separated: none,kv,transcript,usermem")] =
        "none,kv,transcript,usermem",
    out: OutOpt = None,
) -> None:
    """Multi-session scenarios: task success, repeated asks, stale/forgotten/withheld uses, L3 without consent
    and prompt tokens per turn — no memory vs latest-wins KV vs full transcript vs usermem.

    Exits 1 when usermem used information its memory knew to be stale, forgotten or withheld.
    Example: usermem eval e2e --split test
    """
    from usermem.config import load_settings
    from usermem.evals import e2e, fresh_out

    if split not in ("dev", "test", "both"):
        raise typer.BadParameter("use dev, test or both", param_hint="--split")
    names = [s.strip() for s in systems.split(",") if s.strip()]
    if not names or set(names) - set(e2e.SYSTEMS):
        raise typer.BadParameter(f"choose from {', '.join(e2e.SYSTEMS)}", param_hint="--systems")
    if data is not None and not data.exists():
        raise typer.BadParameter(f"{data} does not exist (the shipped scenarios are used without --data)",
                                 param_hint="--data")
    out = cli_output.writable_dir(out or fresh_out("eval-e2e"))
    scenarios = e2e.load_scenarios(data, splits=e2e.SPLITS if split == "both" else (split,))
    results: dict[str, e2e.E2EResult] = {}
    for ag in _agents(agent):
        if ag == "scripted":
            runner: Any = e2e.ScriptedAgent()
            llm_plan = False
        else:
            settings = load_settings()
            if not settings.llm_base_url or not settings.llm_model:
                console.print(say("[yellow]llm agent skipped:[/yellow] set USERMEM_LLM_BASE_URL and USERMEM_LLM_MODEL",
                                  "[yellow]已跳过 LLM 智能体：[/yellow]请设置 USERMEM_LLM_BASE_URL 和 USERMEM_LLM_MODEL"))
                continue
            runner = e2e.LLMAgent(settings)
            llm_plan = False  # the memory side stays deterministic: only the agent differs
        with console.status(say(f"running {len(scenarios)} scenarios ({ag} agent)…",
                                f"正在运行 {len(scenarios)} 个场景（{ag}）…")):
            results[ag] = e2e.evaluate(scenarios, runner, names, llm_plan=llm_plan)
        if ag == "llm":
            results[ag].meta["llm"] = runner.client.stats.to_dict()
            results[ag].meta["llm_failures"] = runner.failures
            runner.close()
    bad = 0
    for ag, res in results.items():
        for sp, summ in res.by_split.items():
            t = table(f"e2e — {ag} agent, {sp} split", *e2e.COLUMNS)
            for row in e2e.table_rows(summ):
                t.add_row(*row)
            console.print(t)
            um = summ.get("usermem")
            if um:
                bad += um["stale_uses_memory_layer"] + um["l3_without_consent"] + um["l2_without_consent"]
                if um["stale_uses_update_not_captured"]:
                    console.print(say(
                        f"{sp}: {um['stale_uses_update_not_captured']} stale use(s) by usermem came from updates "
                        "it never captured (extraction missed the change); see the report",
                        f"{sp}：usermem 有 {um['stale_uses_update_not_captured']} 次过期使用源于未捕获的更新（抽取遗漏），见报告"))
    paths = e2e.write_reports(results, scenarios, out)
    console.print(say("reports: ", "报告：") + ", ".join(esc(p) for p in paths.values()))
    if bad:
        console.print(say(f"[red]usermem used stale, forgotten or withheld information {bad} time(s)[/red]",
                          f"[red]usermem 使用了过期、已删除或未授权的信息 {bad} 次[/red]"))
        raise typer.Exit(1)


@eval_app.command("all")
def eval_all(
    out: OutOpt = None,
    locomo: Annotated[Path | None, typer.Option(
        "--locomo", help="locomo10.json (default: data/locomo/locomo10.json in this project)")] = None,
    memorybank: Annotated[Path | None, typer.Option(
        "--memorybank", help="Directory with memory_bank_cn.json (default: data/memorybank in this project)")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Smaller PII corpus, first LoCoMo conversation only")] = False,
) -> None:
    """Run every evaluation (extraction, plan, locomo, memorybank, pii, e2e) and write eval.md + eval.json + a plot.

    A missing data set is reported with where to get it; the other evaluations still run.
    Example: usermem eval all --locomo ../shared/data/locomo/locomo10.json --memorybank ../shared/data/memorybank
    """
    from usermem.evals import DATASETS, fresh_out, missing_data, run_info
    from usermem.evals import report as rep
    from usermem.interfaces import cli_privacy, cli_relevance, cli_understand

    run = run_info()
    out = cli_output.writable_dir(out or fresh_out("eval-all"))
    details = out / "eval"
    locomo = locomo or DATASETS["locomo"].default
    memorybank = memorybank or DATASETS["memorybank"].default
    statuses: list[rep.Status] = []

    def step(name: str, fn: Any, **kw: Any) -> None:
        target = cli_output.writable_dir(details / name)
        console.rule(esc(name))
        try:
            fn(out=target, **kw)
            statuses.append(rep.Status(name, "ran", f"eval/{name}/"))
        except typer.Exit as exc:
            code = exc.exit_code
            statuses.append(rep.Status(name, "target missed" if code == 1 else "failed",
                                       f"exit {code}; eval/{name}/"))
        except Exception as exc:
            statuses.append(rep.Status(name, "failed", f"{type(exc).__name__}: {exc}"))

    step("extraction", cli_understand.eval_extraction, bank=None)
    step("plan", cli_understand.eval_plan, data=None, mode="deterministic", bank=None)
    if locomo.exists():
        step("locomo", cli_relevance.eval_locomo, data=locomo, cache=out / "cache",
             conversations=1 if quick else None, questions=None, sweep=False)
    else:
        statuses.append(rep.Status("locomo", "missing data", missing_data("locomo", locomo)))
    if (memorybank / "memory_bank_cn.json").exists():
        step("memorybank", cli_relevance.eval_memorybank, data=memorybank, labels=None, cache=out / "cache",
             sweep=False)
    else:
        statuses.append(rep.Status("memorybank", "missing data",
                                   missing_data("memorybank", memorybank / "memory_bank_cn.json")))
    step("pii", cli_privacy.eval_pii, seed=20261130, pii=200 if quick else 2000, benign=300 if quick else 3000)
    step("e2e", eval_e2e, data=None, split="both", agent="both", systems="none,kv,transcript,usermem")
    summary = rep.collect(details, statuses)
    summary["run"] = run
    (out / "eval.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1), encoding="utf-8")
    (out / "eval.md").write_text(rep.render(summary, run), encoding="utf-8")
    png = rep.plot(summary, out / "eval.png")
    t = table("evaluations", "evaluation", "state", "detail")
    for s in statuses:
        t.add_row(s.evaluation, s.state, s.detail)
    console.print(t)
    written = [out / "eval.md", out / "eval.json", *([png] if png else [])]
    console.print(say("wrote ", "已写入 ") + ", ".join(esc(p) for p in written))


@eval_app.command("readme")
def eval_readme(
    report: Annotated[Path, typer.Argument(help="eval.json written by `usermem eval all`")],
    readme: Annotated[Path, typer.Option("--readme", help="README to update in place")] = Path("README.md"),
    check: Annotated[bool, typer.Option("--check", help="Only check that the README table is current")] = False,
) -> None:
    """Regenerate the README's evaluation summary table from an `eval all` report.

    Example: usermem eval readme reports/eval.json
    """
    from usermem.evals import report as rep

    if not report.exists():
        raise typer.BadParameter(f"{report} does not exist (run `usermem eval all` first)", param_hint="REPORT")
    summary = json.loads(report.read_text(encoding="utf-8"))
    text = readme.read_text(encoding="utf-8")
    new = rep.update_readme(text, summary, report.as_posix())
    if check:
        if new != text:
            cli_output.fail(say(f"{readme}: the evaluation table is not the one {report} generates",
                                f"{readme}：评测表与 {report} 生成的不一致"), code=1)
        console.print(say("README table is current", "README 表格是最新的"))
        return
    readme.write_text(new, encoding="utf-8")
    console.print(say(f"updated {esc(readme)}", f"已更新 {esc(readme)}"))
