"""What the console and the "my memory" page share: templates, page sessions, CSRF, language, operations.

- **Operations**: pages call `op(request, name, ...)`, which runs `Memory.<name>` only when `name` is an
  operation of the catalogue (`usermem.interfaces.catalog.OPERATIONS`) — the pages have no business
  logic of their own, only the operations every other interface offers.
- **Sessions**: signing in with a key creates a page session stored as a document of the reserved
  `_system` tenant (namespace `page_sessions`, keyed by the sha256 of the cookie's random token, with an
  expiry), so it works with several workers and survives restarts. The key itself is never stored; the
  key record is checked on every request, so revoking the key ends the session.
- **CSRF**: each session has a random token; every POST must carry it (form field `csrf` or header
  `X-CSRF-Token`, which htmx sends from `hx-headers`), compared in constant time. Cookies are HttpOnly,
  SameSite=Strict, Secure over https. The sign-in forms use a double-submit token (cookie + field).
- **Escaping**: Jinja2 autoescapes every template; stored values are shown as text, never markup.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from usermem.engine.memory import Memory
from usermem.errors import UsermemError
from usermem.interfaces.api.deps import run_engine
from usermem.interfaces.api.keys import SYSTEM_TENANT, ApiKey, KeyRing
from usermem.interfaces.api.problems import status_for
from usermem.interfaces.catalog import OPERATIONS
from usermem.interfaces.console import i18n

Role = Literal["admin", "user"]
SESSION_NS = "page_sessions"
SESSION_SECONDS = 8 * 3600.0
COOKIES: Mapping[Role, tuple[str, str]] = {"admin": ("um_console", "/console"), "user": ("um_me", "/me")}
LOGIN_CSRF_COOKIE = "um_login_csrf"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")

_TEMPLATES = files("usermem.interfaces.console") / "templates"
STATIC_DIR = str(files("usermem.interfaces.console") / "static")


def _fmt_time(t: float | None, lang: str = "en") -> str:
    if t is None:
        return i18n.text("never", lang)
    return datetime.fromtimestamp(float(t), tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _fmt_value(v: Any) -> str:
    """A stored value as plain text (JSON for structures); the template escapes it."""
    if isinstance(v, str):
        return v
    import json

    return json.dumps(v, ensure_ascii=False)


def _fmt_episode(v: Any) -> str:
    """An archived episode in a line: its summary or key points, else the message count (the whole value
    is on the key's page)."""
    if isinstance(v, dict):
        summary = v.get("summary")
        if isinstance(summary, str) and summary:
            return summary
        points = [p if isinstance(p, str) else _fmt_value(p) for p in v.get("points") or []]
        if points:
            return " · ".join(points)
        if isinstance(v.get("messages"), int):
            return f"{v['messages']} msg · {v.get('client_id') or ''}".strip(" ·")
    return _fmt_value(v)


ENV = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=select_autoescape(default=True,
                  default_for_string=True), undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
ENV.filters["when"] = _fmt_time
ENV.filters["show"] = _fmt_value
ENV.filters["episode"] = _fmt_episode


@dataclass(frozen=True)
class PageSession:
    token_hash: str
    role: Role
    key: ApiKey
    csrf: str
    expires_at: float

    @property
    def tenant(self) -> str:
        return self.key.tenant

    @property
    def actor(self) -> str:
        """As the HTTP API names a key's actions (`key:<id>:<actor>`), with the page as the actor."""
        return f"key:{self.key.id}:{'console' if self.role == 'admin' else 'me'}"


def is_user_token(key: ApiKey) -> bool:
    """A key the user holds themself: a user token (`KeyRing.create_user_token`). An agent's key bound to
    the user is not one, nor is an admin key."""
    return key.user_token and key.user_id is not None and not key.admin


def memory_of(request: Request) -> Memory:
    return request.app.state.memory  # type: ignore[no-any-return]


async def op(request: Request, name: str, *args: Any, **kwargs: Any) -> Any:
    """Run the catalogue operation `name` on the app's Memory (engine thread rules as the API's routes)."""
    if name not in OPERATIONS:
        raise KeyError(f"{name} is not an operation of the catalogue")
    fn: Callable[..., Any] = getattr(memory_of(request), name)
    return await run_engine(request, lambda: fn(*args, **kwargs))


def language(request: Request) -> str:
    return i18n.pick_language(request.headers.get("accept-language"),
                              request.query_params.get("lang") or request.cookies.get(i18n.LANG_COOKIE))


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def start_session(request: Request, role: Role, key: ApiKey) -> tuple[str, PageSession]:
    """A new page session for a verified key; returns (cookie token, session)."""
    token = secrets.token_urlsafe(32)
    now = time.time()
    session = PageSession(_hash(token), role, key, secrets.token_urlsafe(24), now + SESSION_SECONDS)
    doc = {"role": role, "key_id": key.id, "csrf": session.csrf, "created_at": now,
           "expires_at": session.expires_at}
    store = memory_of(request).store
    await run_engine(request, lambda: store.put_doc(SYSTEM_TENANT, SESSION_NS, session.token_hash, doc, now=now,
                                                    expires_at=session.expires_at))
    return token, session


async def current_session(request: Request, role: Role) -> PageSession | None:
    """The signed-in session of `role` for this request, or None (absent, expired, key revoked...)."""
    token = request.cookies.get(COOKIES[role][0])
    if not token or len(token) > 200:
        return None
    h = _hash(token)
    store = memory_of(request).store
    doc = await run_engine(request, lambda: store.get_doc(SYSTEM_TENANT, SESSION_NS, h, now=time.time()))
    if doc is None or doc.get("role") != role:
        return None
    keys: KeyRing = request.app.state.keys
    key = await run_engine(request, lambda: keys.get(str(doc["key_id"])))
    if key is None or not key.active or (role == "admin" and not key.admin) or (role == "user"
                                                                                and not is_user_token(key)):
        return None
    return PageSession(h, role, key, str(doc["csrf"]), float(doc["expires_at"]))


async def end_session(request: Request, session: PageSession) -> None:
    store = memory_of(request).store
    await run_engine(request, lambda: store.delete_doc(SYSTEM_TENANT, SESSION_NS, session.token_hash))


def set_session_cookie(request: Request, response: Response, role: Role, token: str | None) -> None:
    name, path = COOKIES[role]
    if token is None:
        response.delete_cookie(name, path=path)
    else:
        response.set_cookie(name, token, max_age=int(SESSION_SECONDS), path=path, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")


async def form_data(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def csrf_ok(request: Request, session: PageSession, form: Mapping[str, str]) -> bool:
    presented = request.headers.get("x-csrf-token") or form.get("csrf") or ""
    return hmac.compare_digest(presented.encode(), session.csrf.encode())


def login_csrf_ok(request: Request, form: Mapping[str, str]) -> bool:
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE) or ""
    presented = form.get("csrf") or ""
    return bool(cookie) and hmac.compare_digest(cookie.encode(), presented.encode())


def render(request: Request, template: str, *, status: int = 200, session: PageSession | None = None,
           **ctx: Any) -> HTMLResponse:
    lang = language(request)

    def t(key: str, **fmt: object) -> str:
        return i18n.text(key, lang, **fmt)

    def lang_url(code: str) -> str:
        params = dict(request.query_params)
        params["lang"] = code
        params.pop("done", None)
        return f"{request.url.path}?{urlencode(params)}"

    login_csrf = None
    if session is None:
        login_csrf = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(24)
    done = request.query_params.get("done")
    html = ENV.get_template(template).render(
        t=t, lang=lang, lang_url=lang_url, session=session, csrf=session.csrf if session else login_csrf,
        source_label=lambda s: i18n.source_label(s, lang), path=request.url.path,
        flash=t(done) if done is not None and done in i18n.DONE_MESSAGES else None, **ctx)
    response = HTMLResponse(html, status_code=status)
    secure_headers(response)
    if login_csrf is not None and request.cookies.get(LOGIN_CSRF_COOKIE) != login_csrf:
        response.set_cookie(LOGIN_CSRF_COOKIE, login_csrf, max_age=3600, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
    chosen = request.query_params.get("lang")
    if chosen in i18n.LANGUAGES and request.cookies.get(i18n.LANG_COOKIE) != chosen:
        response.set_cookie(i18n.LANG_COOKIE, str(chosen), max_age=365 * 86400, samesite="lax",
                            secure=request.url.scheme == "https")
    return response


def secure_headers(response: Response) -> None:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"


def redirect(url: str, **params: str) -> RedirectResponse:
    """303 after a POST (the browser then GETs the page); `done` names an i18n message to show."""
    target = url + (("&" if "?" in url else "?") + urlencode(params) if params else "")
    response = RedirectResponse(target, status_code=303)
    secure_headers(response)
    return response


def error_page(request: Request, exc: UsermemError, session: PageSession | None, back: str) -> HTMLResponse:
    return render(request, "error.html", status=status_for(exc), session=session, message=str(exc),
                  code=exc.code, back=back)


def refused(request: Request, status: int, message_key: str, session: PageSession | None,
            back: str) -> HTMLResponse:
    lang = language(request)
    return render(request, "error.html", status=status, session=session, message=i18n.text(message_key, lang),
                  code=message_key, back=back)


async def sign_in(request: Request, role: Literal["admin", "user"], accepts: Callable[[Any], bool], *, home: str, after: str,
                  field: str, help_key: str, error_key: str, title_key: str) -> Response:
    """The sign-in POST shared by /console (admin keys) and /me (user tokens): CSRF, the key, the session."""
    form = await form_data(request)
    lang = language(request)
    if not login_csrf_ok(request, form):
        return refused(request, 403, "csrf_failed", None, home)
    key = request.app.state.keys.verify(form.get("key", "")[:300])
    if key is None or not accepts(key):
        return render(request, "login.html", status=401, action=f"{home}/login", field=field, help=help_key,
                      error=i18n.text(error_key, lang), title=i18n.text(title_key, lang))
    token, _ = await start_session(request, role, key)
    response = redirect(after)
    set_session_cookie(request, response, role, token)
    return response
