"""Service commands: serve, mcp, keys create/list/revoke, bench."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from usermem.config import Settings, load_settings
from usermem.engine.memory import Memory
from usermem.errors import ConfigError, ValidationError
from usermem.interfaces import cli_output
from usermem.interfaces.cli import app, console, err_console
from usermem.interfaces.cli_output import cell, esc, say, table
from usermem.interfaces.cli_params import dumps

keys_app = typer.Typer(help="API keys: one or more per tenant, stored hashed. "
                            "Example: usermem keys create acme --name backend", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

LOCAL_TENANT = "local"
StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="Store URL: sqlite:///relative/file.db (relative to the current directory), "
                    "sqlite:////absolute/file.db, or postgresql://postgres@127.0.0.1/usermem")]


def service_settings(store: str | None) -> Settings:
    settings = load_settings()
    if store:
        return settings.with_overrides(store_url=store)
    if settings.store_url == "sqlite://":
        return settings.with_overrides(store_url="sqlite:///data/usermem.db")
    return settings


def _key_file(store_url: str, explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    if store_url.startswith("sqlite:///") and store_url not in ("sqlite:///:memory:",):
        return Path(store_url[len("sqlite:///"):] + ".local-key")
    if store_url in ("sqlite://", "sqlite:///:memory:"):
        return None
    return Path("data/usermem.local-key")


def local_key(memory: Memory, key_file: Path | None) -> str:
    """The example key of the local tenant: reused from `key_file` while it still verifies, else created."""
    from usermem.interfaces.api.keys import KeyRing

    ring = KeyRing(memory.store)
    if key_file is not None and key_file.exists():
        existing = key_file.read_text(encoding="utf-8").strip()
        if ring.verify(existing) is not None:
            return existing
    plain, _ = ring.create(LOCAL_TENANT, admin=True, name="local example key")
    if key_file is not None:
        key_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(plain + "\n")
    return plain


@app.command()
def serve(
    store: StoreOpt = None,
    host: Annotated[str | None, typer.Option(help="Interface to bind (default: settings.host, 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings.port, 8000)")] = None,
    rate_limit: Annotated[int | None, typer.Option(help="Requests per minute per key; 0 disables")] = None,
    key_file: Annotated[str | None, typer.Option(help="Where the local example key is kept (mode 600)")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    graceful_seconds: Annotated[int, typer.Option(help="On SIGTERM, wait this long for in-flight requests")] = 15,
    with_mcp: Annotated[bool, typer.Option("--mcp/--no-mcp", help="Also serve the MCP tools at /mcp (API key)")] = True,
    workers: Annotated[int | None, typer.Option(
        help="Worker processes sharing the port (default: one per core; 1 with a private in-memory store)",
        min=1)] = None,
) -> None:
    """Serve the HTTP API (docs at /docs, OpenAPI at /openapi.json). Prints an example key for tenant 'local'.

    Example: usermem serve --store sqlite:///data/usermem.db --port 8000 --workers 2
    """
    from usermem.config import missing_extra, redact_url

    try:
        import uvicorn

        from usermem.interfaces.api import create_app
    except ImportError as exc:
        raise missing_extra("server", exc) from exc

    settings = service_settings(store)
    overrides: dict[str, Any] = {}
    if host:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    if rate_limit is not None:
        overrides["rate_limit_per_minute"] = rate_limit
    if overrides:
        settings = settings.with_overrides(**overrides)
    private = settings.store_url in ("sqlite://", "sqlite:///:memory:", ":memory:")
    if workers is None:
        workers = 1 if private else (os.cpu_count() or 1)
    elif workers > 1 and private:
        raise ConfigError("several workers cannot share a private in-memory store; use --store "
                          "sqlite:///path.db or postgresql://... (or --workers 1)", setting="workers")
    memory = Memory(settings=settings)
    kept = _key_file(settings.store_url, key_file)
    before = kept.read_text(encoding="utf-8").strip() if kept is not None and kept.exists() else None
    example = local_key(memory, kept)
    # The full key is printed once, when it is created; afterwards it is masked (logs keep stdout).
    shown = example if example != before else f"{example[:6]}…{example[-2:]} (full key in {kept})"
    base = esc(f"http://{settings.host}:{settings.port}")
    console.print(f"[bold]usermem[/bold] serving {esc(redact_url(settings.store_url))} on {base}", soft_wrap=True)
    console.print(f"  docs     {base}/docs   (OpenAPI: {base}/openapi.json)", soft_wrap=True)
    console.print(f"  health   {base}/health  ready: {base}/ready  metrics: {base}/metrics", soft_wrap=True)
    console.print(f"  console  {base}/console  (admin key)   my memory: {base}/me  (user token)", soft_wrap=True)
    if with_mcp:
        console.print(f"  mcp      {base}/mcp  (streamable HTTP; Authorization: Bearer <key>)", soft_wrap=True)
    if settings.webhook_poll_seconds > 0:
        console.print(f"  webhooks due deliveries sent every {settings.webhook_poll_seconds:g} s (docs/webhooks.md)",
                      soft_wrap=True)
    console.print(f"  example key for tenant {LOCAL_TENANT!r} (admin): [bold]{shown}[/bold]", soft_wrap=True)
    console.print(f"  try: curl -H 'Authorization: Bearer {example if shown == example else '<key>'}' "
                  f"{base}/v1/whoami", soft_wrap=True)
    if workers == 1:
        application = create_app(memory, close_memory=True, close_timeout=float(graceful_seconds),
                                 mcp_path="/mcp" if with_mcp else None, host=settings.host, deliver_webhooks=True)
        uvicorn.run(application, host=settings.host, port=settings.port, log_level=log_level,
                    timeout_graceful_shutdown=graceful_seconds, access_log=log_level == "debug")
        return
    _serve_workers(memory, settings, workers, with_mcp, graceful_seconds, log_level)


def _serve_workers(memory: Memory, settings: Settings, workers: int, with_mcp: bool, graceful_seconds: int,
                   log_level: str) -> None:
    """Run `workers` processes behind the port (interfaces/api/workers.py); this process only supervises."""
    import tempfile

    import uvicorn

    from usermem.interfaces.api.workers import SPEC_ENV, WorkerSpec

    memory.close()  # every worker opens its own (the schema is migrated and the key made by now)
    fd, limiter_path = tempfile.mkstemp(prefix="usermem-ratelimit-")
    os.close(fd)
    fd, lock_path = tempfile.mkstemp(prefix="usermem-webhooks-")
    os.close(fd)
    overrides = {"store_url": settings.store_url, "host": settings.host, "port": settings.port,
                 "rate_limit_per_minute": settings.rate_limit_per_minute}
    os.environ[SPEC_ENV] = WorkerSpec(overrides, limiter_path, with_mcp, float(graceful_seconds),
                                      webhook_lock_path=lock_path).to_env()
    console.print(f"  workers  {workers} processes (rate limits shared, MCP without sessions, /metrics per worker)",
                  soft_wrap=True)
    try:
        uvicorn.run("usermem.interfaces.api.workers:worker_app", factory=True, workers=workers,
                    host=settings.host, port=settings.port, log_level=log_level,
                    timeout_graceful_shutdown=graceful_seconds, access_log=log_level == "debug")
    finally:
        os.environ.pop(SPEC_ENV, None)
        for path in (limiter_path, lock_path):
            with contextlib.suppress(OSError):
                os.unlink(path)


@app.command()
def mcp(
    tenant: Annotated[str | None, typer.Option(help="Tenant the tools act for (stdio); HTTP uses the key's")] = None,
    user: Annotated[str | None, typer.Option(help="Bind every tool call to this user")] = None,
    transport: Annotated[str, typer.Option(help="stdio or http (streamable HTTP at /mcp, API key required)")] = "stdio",
    store: StoreOpt = None,
    host: Annotated[str, typer.Option(help="HTTP interface")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8001,
) -> None:
    """Serve the memory as MCP tools: remember, recall, assemble, forget, confirm, history.

    Example: usermem mcp --tenant local --user alice --store sqlite:///data/usermem.db
    """
    from usermem.config import missing_extra

    try:
        import uvicorn

        from usermem.interfaces import mcp as mcp_mod
    except ImportError as exc:
        raise missing_extra("server", exc) from exc

    if transport not in ("stdio", "http"):
        raise ConfigError(f"unknown transport {transport!r}; use stdio or http", setting="transport")
    if transport == "stdio" and not tenant:
        raise ValidationError("stdio needs --tenant (and usually --user)", field="tenant")
    memory = Memory(settings=service_settings(store))
    if transport == "stdio":
        mcp_mod.build_server(memory, tenant=tenant, user_id=user).run("stdio")
    elif transport == "http":
        err_console.print(f"usermem MCP (streamable HTTP) on http://{esc(host)}:{port}/mcp — "
                          "send Authorization: Bearer <key>")
        uvicorn.run(mcp_mod.http_app(memory, tenant=tenant, user_id=user), host=host, port=port, log_level="warning")


def _key_store(store: str | None, *, create: bool = False) -> Any:
    """Keys live in the documents table of the store of record; no need to start the whole engine.
    Only `keys create` may create a new SQLite file; listing or revoking on a mistyped path is an error."""
    from usermem.store.base import open_store

    url = service_settings(store).store_url
    if not create:
        cli_output.require_existing_store(url)
    return open_store(url)


@keys_app.command("create")
def keys_create(
    tenant: str, store: StoreOpt = None,
    admin: Annotated[bool, typer.Option("--admin", help="May read the audit log and manage contracts")] = False,
    name: Annotated[str, typer.Option(help="A label to recognise the key by")] = "",
    user: Annotated[str | None, typer.Option(help="Bind the key to one user (e.g. for an MCP host)")] = None,
    user_token: Annotated[bool, typer.Option("--user-token", help="A token for the user themself (needs --user): "
                                                                  "their /me page and consent answers")] = False,
    ttl: Annotated[float | None, typer.Option("--ttl", help="A user token expires after this many seconds")] = None,
) -> None:
    """Create an API key for a tenant. The key is printed once; only its hash is stored.

    Example: usermem keys create acme --name backend --store sqlite:///data/usermem.db
    """
    from usermem.interfaces.api.keys import KeyRing

    if user_token and (user is None or admin):
        cli_output.fail(say("--user-token needs --user and cannot be --admin",
                            "--user-token 需要 --user，且不能与 --admin 同用"))
    if ttl is not None and not user_token:
        cli_output.fail(say("--ttl applies to --user-token", "--ttl 仅用于 --user-token"))
    m = _key_store(store, create=True)
    try:
        ring = KeyRing(m)
        if user_token:
            assert user is not None
            plain, rec = ring.create_user_token(tenant, user, name=name, ttl_seconds=ttl)
        else:
            plain, rec = ring.create(tenant, admin=admin, name=name, user_id=user)
    finally:
        m.close()
    console.print(say(f"created key [bold]{esc(rec.id)}[/bold] for tenant {esc(tenant)}{' (admin)' if admin else ''}",
                      f"已为租户 {esc(tenant)} 创建密钥 [bold]{esc(rec.id)}[/bold]{'（管理员）' if admin else ''}"))
    console.print(plain, soft_wrap=True, markup=False, highlight=False)


@keys_app.command("list")
def keys_list(
    store: StoreOpt = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON (for scripts)")] = False,
) -> None:
    """List API keys (ids, tenants, rights; never the secrets).

    Example: usermem keys list --tenant acme
    """
    from usermem.interfaces.api.keys import KeyRing

    m = _key_store(store)
    try:
        keys = KeyRing(m).list(tenant)
    finally:
        m.close()
    if as_json:  # ApiKey never holds the secret
        print(dumps(keys))
        return
    out = table("API keys", "id", "tenant", "admin", "user", "name", "created", "state")
    for k in keys:
        state = "active" if k.active else (
            f"revoked {time.strftime('%Y-%m-%d %H:%M', time.gmtime(k.revoked_at))}" if k.revoked_at is not None
            else f"expired {time.strftime('%Y-%m-%d %H:%M', time.gmtime(k.expires_at or 0))}")
        if k.user_token:
            state += " (user token)"
        out.add_row(cell(k.id), cell(k.tenant), "yes" if k.admin else "", cell(k.user_id or ""), cell(k.name),
                    time.strftime("%Y-%m-%d %H:%M", time.gmtime(k.created_at)), state)
    console.print(out)


@keys_app.command("revoke")
def keys_revoke(key_id: str, store: StoreOpt = None) -> None:
    """Revoke an API key by id (takes effect within seconds in running servers).

    Example: usermem keys revoke 3f2a9c01b7de
    """
    from usermem.interfaces.api.keys import KeyRing

    m = _key_store(store)
    try:
        rec = KeyRing(m).revoke(key_id)
    finally:
        m.close()
    console.print(say(f"revoked key {esc(rec.id)} of tenant {esc(rec.tenant)}",
                      f"已吊销租户 {esc(rec.tenant)} 的密钥 {esc(rec.id)}"))


@app.command()
def bench(
    names: Annotated[list[str] | None, typer.Argument(help="Benchmarks to run (default: all)")] = None,
    out: Annotated[Path, typer.Option(help="Directory for bench.json / bench.md")] = Path("reports"),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes (seconds, for smoke tests)")] = False,
    list_only: Annotated[bool, typer.Option("--list", help="List the benchmarks and exit")] = False,
) -> None:
    """Run the benchmarks and write reports/bench.json and reports/bench.md.

    Example: usermem bench http --quick
    """
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from usermem import bench as bench_mod

    bench_mod.load_all()
    if list_only:
        for name in sorted(bench_mod.REGISTRY):
            console.print(name)
        return
    unknown = [n for n in names or [] if n not in bench_mod.REGISTRY]
    if unknown:
        raise ValidationError(f"unknown benchmark(s) {', '.join(unknown)}; list them with: usermem bench --list",
                              field="names")
    selected = list(names) if names else sorted(bench_mod.REGISTRY)
    cli_output.writable_dir(out)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        progress.add_task(f"running {len(selected)} benchmark(s): {', '.join(selected)}", total=None)
        report = bench_mod.run(selected, out, quick=quick, progress=progress)
    _print_summary(report)
    # A partial run writes its own bench-partial-<run id>.* (never patches bench.md); the report names them.
    files = report["files"]
    written = ", ".join(esc(files[k]) for k in ("md", "json", "png") if k in files)
    console.print(say(f"wrote {written}", f"已写入 {written}"))
    failed: list[str] = report["errors"]  # "name: message", also for a part of one (storage.postgres)
    if failed:
        cli_output.error_line(say(f"{len(failed)} benchmark(s) failed: {'; '.join(failed)}",
                                  f"{len(failed)} 个基准测试失败：{'; '.join(failed)}"))
        raise typer.Exit(1)


def _print_summary(report: dict[str, Any]) -> None:
    summary = Table(title="usermem benchmarks")
    summary.add_column("benchmark")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    for name, res in report["results"].items():
        if "error" in res:
            summary.add_row(name, "[red]error[/red]", cell(str(res["error"])[:80]))
            continue
        rows = [(k, v) for k, v in _flat(res) if _interesting(k)]
        for i, (k, v) in enumerate(rows):
            summary.add_row(name if i == 0 else "", k, f"{v:,.3f}" if isinstance(v, float) else str(v))
        summary.add_section()
    console.print(summary)


def _interesting(key: str) -> bool:
    last = key.rsplit(".", 1)[-1]
    return not key.startswith("_") and (last in ("p50_ms", "p95_ms", "p99_ms", "rps", "ok", "target_met")
                                        or "ratio" in last or "per_s" in last or last.endswith("_ms"))


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.extend(_flat(v, f"{prefix}{k}."))
        else:
            out.append((f"{prefix}{k}", v))
    return out
