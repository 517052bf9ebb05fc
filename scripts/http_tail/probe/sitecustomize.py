# Experiment-only probe for scripts/http_tail/exp.py (on PYTHONPATH of the served workers only; does nothing unless
# PGTAIL_PROBE names a directory): per-worker timings written there at lifespan shutdown.
import os
if os.environ.get("PGTAIL_PROBE"):
    import atexit, json, time, threading, gc
    _stats = {"app": [], "queue": [], "exec": [], "gc": [], "loopgap": [], "offcpu": []}
    import anyio.to_thread as _tt
    _orig_run_sync = _tt.run_sync
    async def run_sync(fn, *args, **kw):
        t0 = time.perf_counter()
        box = {}
        def wrapped(*a):
            box["s"] = time.perf_counter()
            c0 = time.thread_time()
            try:
                return fn(*a)
            finally:
                box["e"] = time.perf_counter()
                box["cpu"] = time.thread_time() - c0
        if _INLINE:
            r = wrapped(*args)
        else:
            r = await _orig_run_sync(wrapped, *args, **kw)
        t1 = time.perf_counter()
        _stats["queue"].append(box["s"] - t0)
        _stats["exec"].append(box["e"] - box["s"])
        _stats["offcpu"].append(box["e"] - box["s"] - box["cpu"])
        _stats["loopgap"].append(t1 - box["e"])  # thread done -> coroutine resumed
        return r
    _tt.run_sync = run_sync
    _INLINE = bool(os.environ.get("PGTAIL_INLINE"))
    _g = {}
    def _gccb(phase, info):
        if phase == "start":
            _g["t"] = time.perf_counter()
        elif "t" in _g and _stats["app"]:
            _stats["gc"].append((info["generation"], time.perf_counter() - _g["t"]))
    gc.callbacks.append(_gccb)
    import uvicorn.config as _uc
    _orig_load = _uc.Config.load
    def load(self):
        _orig_load(self)
        inner = self.loaded_app
        async def app(scope, receive, send):
            if scope["type"] == "lifespan":
                async def rcv():
                    m = await receive()
                    if m["type"] == "lifespan.startup":
                        if os.environ.get("PGTAIL_TOKENS"):
                            _tt.current_default_thread_limiter().total_tokens = int(os.environ["PGTAIL_TOKENS"])
                        if os.environ.get("PGTAIL_FREEZE"):
                            gc.collect(); gc.freeze()
                    if m["type"] == "lifespan.shutdown":
                        _dump()
                    return m
                return await inner(scope, rcv, send)
            if scope["type"] != "http":
                return await inner(scope, receive, send)
            t0 = time.perf_counter()
            await inner(scope, receive, send)
            _stats["app"].append(time.perf_counter() - t0)
        self.loaded_app = app
    _uc.Config.load = load
    def _dump():
        if _stats["app"]:
            with open(os.environ["PGTAIL_PROBE"] + f"/stats-{os.getpid()}.json", "w") as f:
                json.dump(_stats, f)
    atexit.register(_dump)

    if os.environ.get("PGTAIL_SWITCH"):
        import sys
        sys.setswitchinterval(float(os.environ["PGTAIL_SWITCH"]))
    if os.environ.get("PGTAIL_GC0"):
        gc.set_threshold(int(os.environ["PGTAIL_GC0"]), 10, 10)
