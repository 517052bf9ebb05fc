"""Relevance commands: `usermem reindex`, `usermem eval locomo`, `usermem eval memorybank`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from usermem.evals import fresh_out, missing_data
from usermem.interfaces import cli_output
from usermem.interfaces.cli import app, console, eval_app
from usermem.interfaces.cli_core import StoreOpt, open_memory
from usermem.interfaces.cli_output import esc, say

OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Directory for the JSON, markdown and PNG reports (default: a fresh runs/<name>-<run id>/)")]
CacheOpt = Annotated[Path | None, typer.Option(
    "--cache", help="Embedding cache directory (one file per model id); default <out>/cache")]


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


@app.command()
def reindex(
    store: StoreOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Re-embed every memory, not only missing/stale ones")] = False,
    batch: Annotated[int, typer.Option(help="Texts per embedding call")] = 64,
) -> None:
    """Embed memories the vector index lacks: new ones, or ones embedded by another model.

    Example: usermem reindex --store sqlite:///data/usermem.db
    """
    from usermem.relevance.reindex import plan_reindex, run_reindex

    m = open_memory(store)
    try:
        with console.status("checking the vector index…"):
            plan = plan_reindex(m, force=force)
        model = plan.model
        if not plan.todo:
            console.print(say(f"vector index is current: {plan.current} memories of {plan.users} users, "
                              f"model {esc(model)}",
                              f"向量索引已是最新：{plan.users} 个用户的 {plan.current} 条记忆，模型 {esc(model)}"))
            return
        with _progress() as progress:
            task = progress.add_task(esc(say(f"embedding with {model}", f"正在用 {model} 编码")), total=len(plan.todo))
            n = run_reindex(m, plan, batch=batch, progress=lambda k: progress.advance(task, k))
        console.print(say(f"re-embedded [bold]{n}[/bold] memories of {plan.users} users "
                          f"({plan.current} were current) with {esc(model)}",
                          f"已用 {esc(model)} 重新编码 {plan.users} 个用户的 [bold]{n}[/bold] 条记忆"
                          f"（{plan.current} 条本已是最新）"))
    finally:
        m.close()


def _show(result: object) -> None:
    from usermem.evals.retrieval import SPLITS, SYSTEMS, EvalResult, ordered_categories

    assert isinstance(result, EvalResult)
    sections = [(f"{name} split", result.splits[name]) for name in SPLITS if name in result.splits]
    for title, tab in sections or [("all questions", result.table)]:
        table = Table(title=f"{result.name} ({title}): evidence recall@k and MRR@10")
        for col in ("category", "n", "system", "R@1", "R@5", "R@10", "MRR"):
            table.add_column(col)
        for cat in ordered_categories(tab):
            for system in SYSTEMS:
                c = tab[cat].get(system)
                if c:
                    best = max(tab[cat][s]["recall@10"] for s in tab[cat])
                    r10 = f"{c['recall@10']:.3f}"
                    table.add_row(cat, str(c["n"]), system, f"{c['recall@1']:.3f}", f"{c['recall@5']:.3f}",
                                  f"[bold]{r10}[/bold]" if c["recall@10"] == best else r10, f"{c['mrr@10']:.3f}")
        console.print(table)
    m = result.meta
    console.print(f"{m['turns']} turns ({m['rejected_turns']} rejected), {m['questions']} questions, "
                  f"{m['seconds']} s; hybrid recall p50 {m['hybrid_recall_ms']['p50']} ms, "
                  f"p95 {m['hybrid_recall_ms']['p95']} ms")


def _run(name: str, convs: list, out: Path, cache: Path | None, sweep: bool) -> None:  # type: ignore[type-arg]
    from usermem.evals.retrieval import run_retrieval, write_reports

    total = sum(len(c.questions) for c in convs)
    with _progress() as progress:
        task = progress.add_task(f"{name}: ingest + ask", total=total)
        result = run_retrieval(name, convs, cache_dir=cache or out / "cache", sweep=sweep,
                               progress=lambda done, _t: progress.update(task, completed=done))
    _show(result)
    paths = write_reports(result, out)
    console.print(say("reports: ", "报告：") + ", ".join(esc(p) for p in paths.values()))


@eval_app.command("locomo")
def eval_locomo(
    data: Annotated[Path, typer.Option("--data", help="Path to locomo10.json (LoCoMo, CC BY-NC 4.0; default: "
                                                      "data/locomo/locomo10.json in this project)")] = Path(
        "data/locomo/locomo10.json"),
    out: OutOpt = None,
    cache: CacheOpt = None,
    conversations: Annotated[int | None, typer.Option(help="Only the first N conversations")] = None,
    questions: Annotated[int | None, typer.Option(help="Only the first N questions per conversation")] = None,
    sweep: Annotated[bool, typer.Option("--sweep", help="Also replay fusion variants on the same signals")] = False,
) -> None:
    """LoCoMo retrieval: hybrid vs dense vs BM25, evidence recall@1/5/10 and MRR per category.

    Example: usermem eval locomo --data ../shared/data/locomo/locomo10.json
    """
    from usermem.evals.retrieval import load_locomo

    if not data.exists():
        raise typer.BadParameter(missing_data("locomo", data), param_hint="--data")
    out = cli_output.writable_dir(out or fresh_out("eval-locomo"))
    convs, skipped = load_locomo(data, conversations=conversations, questions=questions)
    if any(skipped.values()):
        console.print(f"skipped: {skipped['no_evidence']} questions without usable evidence, "
                      f"{skipped['dangling_evidence_ids']} evidence ids that name no turn")
    _run("locomo", convs, out, cache, sweep)


@eval_app.command("memorybank")
def eval_memorybank(
    data: Annotated[Path, typer.Option("--data", help="Directory with memory_bank_cn.json (MemoryBank, MIT; "
                                                      "default: data/memorybank in this project)")] = Path(
        "data/memorybank"),
    labels: Annotated[Path | None, typer.Option(help="Labels JSONL; default: the ones shipped with usermem")] = None,
    out: OutOpt = None,
    cache: CacheOpt = None,
    sweep: Annotated[bool, typer.Option("--sweep", help="Also replay fusion variants on the same signals")] = False,
) -> None:
    """MemoryBank (Chinese) retrieval on the shipped labels: recall@k per question type.

    Example: usermem eval memorybank --data ../shared/data/memorybank
    """
    from usermem.evals.retrieval import load_memorybank

    if not (data / "memory_bank_cn.json").exists():
        raise typer.BadParameter(missing_data("memorybank", data / "memory_bank_cn.json"), param_hint="--data")
    out = cli_output.writable_dir(out or fresh_out("eval-memorybank"))
    label_path = labels or Path(str(resources.files("usermem") / "data" / "memorybank_labels.jsonl"))
    _run("memorybank", load_memorybank(data, label_path), out, cache, sweep)


@eval_app.command("semantic")
def eval_semantic(
    memories: Annotated[int, typer.Option(help="Memories of the one user (24 targets + generated filler)")] = 1000,
    out: OutOpt = None,
    cache: CacheOpt = None,
) -> None:
    """Semantic top-1: one user with 1,000 zh/en memories, 24 questions (half across languages) plus 36 added
    dev questions — how often is the right memory first? Dev and test questions reported separately.

    Example: usermem eval semantic
    """
    from usermem.evals.retrieval import SPLITS, render_semantic, run_semantic_top1

    out = cli_output.writable_dir(out or fresh_out("eval-semantic"))
    with console.status("semantic top-1: writing and asking…"):
        result = run_semantic_top1(memories, cache_dir=cache or out / "cache", added=True)
    for split in SPLITS:
        console.print(f"{split}: hybrid {result.hits('hybrid', split, added=False)}/{result.count(split, added=False)}"
                      f" first, dense {result.hits('dense', split, added=False)}/{result.count(split, added=False)}")
    console.print(f"dev, added: hybrid {result.hits('hybrid', 'dev', added=True)}/{result.count('dev', added=True)}"
                  f" first, dense {result.hits('dense', 'dev', added=True)}/{result.count('dev', added=True)}")
    path = out / "eval-semantic.md"
    path.write_text(render_semantic(result), encoding="utf-8")
    console.print(say("report: ", "报告：") + esc(path))
