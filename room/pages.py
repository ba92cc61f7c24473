"""HTML: the app shell, the login and invite pages, and the static files of ``web/``.

Every HTML response carries a strict Content-Security-Policy (no inline script, no remote
anything). Login links are confirmed with a POST so that a link preview fetching the URL does
not burn the one-time secret.
"""

from __future__ import annotations

import html
import urllib.parse
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from room.actions import auth as auth_actions
from room.auth import SESSION_COOKIE, check_csrf, identity_from_headers
from room.errors import RoomError
from room.infra.bodies import read_body
from room.infra.frames import CLOSE_SIGNED_OUT
from room.rules.entities import User
from room.rules.languages import Language, pick_language
from room.services import Services
from room.store import auth as auth_store

WEB_DIR = Path(__file__).resolve().parent.parent / "web"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: with it Chromium sends "Origin: null" on our own form POSTs (login), which
    # the login CSRF check must refuse. same-origin still sends nothing to other sites.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


MAX_FORM_BYTES = 8192


async def form_fields(request: Request) -> dict[str, str]:
    """A small urlencoded form (our pages post nothing else; no multipart parser needed)."""
    raw = await read_body(request, MAX_FORM_BYTES)
    parsed = urllib.parse.parse_qs(raw.decode("utf-8", "replace"), max_num_fields=10)
    return {key: values[0] for key, values in parsed.items()}


# The sign-in pages in both languages (the room itself has web/strings-*.js). The language is
# the visitor's choice (?lang=zh|en, offered on each page) or their browser's (Accept-Language).
TEXTS: dict[Language, dict[str, str]] = {
    "zh": {
        "html_lang": "zh-CN",
        "other": "English",
        "login_title": "登录",
        "login_h1": "登录 Project Room",
        "login_p": "这是一次性登录链接。点击下方按钮登录本机的 Project Room。",
        "login_button": "登录",
        "join_title": "加入项目",
        "join_h1": "加入项目",
        "join_as": "你已以 {name} 登录，将用这个身份加入。",
        "join_button": "加入",
        "join_other": "想用另一个身份加入？先退出登录，再打开这个链接。",
        "handle": "用户名（英文，@ 提及时使用）",
        "display_name": "显示名称",
        "refused_title": "无法登录",
        "bad_origin": "请求来源不被允许。",
        "new_link": "请向项目负责人索取新的链接，或在服务器上运行 <code>room login-link</code>。",
    },
    "en": {
        "html_lang": "en",
        "other": "中文",
        "login_title": "Sign in",
        "login_h1": "Sign in to Project Room",
        "login_p": "This is a one-time sign-in link. Press the button to sign in to this Project Room.",
        "login_button": "Sign in",
        "join_title": "Join a project",
        "join_h1": "Join a project",
        "join_as": "You are signed in as {name} and will join as yourself.",
        "join_button": "Join",
        "join_other": "To join as someone else, sign out first, then open this link again.",
        "handle": "Handle (Latin letters, used in @mentions)",
        "display_name": "Display name",
        "refused_title": "Cannot sign in",
        "bad_origin": "The request came from a site that is not allowed.",
        "new_link": "Ask the project's owner for a new link, or run <code>room login-link</code> on the server.",
    },
}


def language(request: Request) -> Language:
    """The visitor's choice (``?lang=``) or, failing that, their browser's ``Accept-Language``."""
    return pick_language(request.headers.get("accept-language"), request.query_params.get("lang"))


def page(
    title: str, body: str, status: int = 200, lang: Language = "zh", switch: bool = True
) -> HTMLResponse:
    """A small server-rendered page; `switch` offers the other language (a GET page only: the
    link reloads it with ``?lang=``)."""
    texts = TEXTS[lang]
    other: Language = "en" if lang == "zh" else "zh"
    offer = (
        f'<p class="lang-switch"><a href="?lang={other}" hreflang="{TEXTS[other]["html_lang"]}">'
        f"{texts['other']}</a></p>"
        if switch
        else ""
    )
    doc = f"""<!doctype html>
<html lang="{texts["html_lang"]}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · Project Room</title>
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
<link rel="stylesheet" href="/static/style.css"></head>
<body class="simple-page"><main class="card">{body}{offer}</main></body></html>"""
    return HTMLResponse(doc, status_code=status, headers=SECURITY_HEADERS)


async def index(request: Request) -> Response:
    return FileResponse(WEB_DIR / "index.html", headers=SECURITY_HEADERS)


async def overview(request: Request) -> Response:
    """The overview page (index table, Gantt chart, risk scan); it asks /api/portfolio."""
    return FileResponse(WEB_DIR / "overview.html", headers=SECURITY_HEADERS)


async def favicon(request: Request) -> Response:
    # Browsers ask for /favicon.ico on every page; answer with the app's icon, not a 404.
    return FileResponse(
        WEB_DIR / "favicon.svg",
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )


async def login_form(request: Request) -> Response:
    secret = html.escape(request.path_params["secret"], quote=True)
    lang = language(request)
    say = TEXTS[lang]
    return page(
        say["login_title"],
        f"""<h1>{say["login_h1"]}</h1>
<p>{say["login_p"]}</p>
<form method="post" action="/login?lang={lang}"><input type="hidden" name="secret" value="{secret}">
<button type="submit" autofocus>{say["login_button"]}</button></form>""",
        lang=lang,
    )


async def _signed_in(core: Services, request: Request) -> User | None:
    try:
        who = await identity_from_headers(core, request.headers, request.cookies)
    except RoomError:
        return None
    return who.user if who is not None else None


async def join_form(request: Request) -> Response:
    secret = html.escape(request.path_params["secret"], quote=True)
    lang = language(request)
    say = TEXTS[lang]
    user = await _signed_in(request.app.state.core, request)
    if user is not None:
        brackets = "（@{}）" if lang == "zh" else " (@{})"
        name = html.escape(user.display_name + brackets.format(user.handle))
        return page(
            say["join_title"],
            f"""<h1>{say["join_h1"]}</h1>
<p>{say["join_as"].format(name=name)}</p>
<form method="post" action="/login?lang={lang}"><input type="hidden" name="secret" value="{secret}">
<button type="submit" autofocus>{say["join_button"]}</button></form>
<p>{say["join_other"]}</p>""",
            lang=lang,
        )
    return page(
        say["join_title"],
        f"""<h1>{say["join_h1"]}</h1>
<form method="post" action="/login?lang={lang}"><input type="hidden" name="secret" value="{secret}">
<label>{say["handle"]}<input name="handle" required pattern="[A-Za-z][A-Za-z0-9_\\-]{{0,31}}"
 autocomplete="username"></label>
<label>{say["display_name"]}<input name="display_name" required maxlength="64"></label>
<button type="submit">{say["join_button"]}</button></form>""",
        lang=lang,
    )


async def login(request: Request) -> Response:
    core: Services = request.app.state.core
    lang = language(request)
    say = TEXTS[lang]
    refused = f"<h1>{say['refused_title']}</h1>"
    origin = request.headers.get("origin")
    if origin is not None and origin.rstrip("/") not in core.settings.allowed_origins:
        # Login CSRF: another site must not sign a visitor in to an account of its choosing.
        return page(say["refused_title"], f"{refused}<p>{say['bad_origin']}</p>", 403, lang, False)
    form = await form_fields(request)
    secret = form.get("secret", "")
    handle = form.get("handle")
    display_name = form.get("display_name")
    signed_in = await _signed_in(core, request)
    # An invite's project read first and declared: joining it raises its roster version (its
    # row) after the link's (docs/storage.md, "Lock order: the project first"). A link's
    # project never changes.
    invited = await core.db.read(lambda conn: auth_actions.link_project(conn, secret))
    try:
        session = await core.db.write(
            lambda conn, tx: auth_actions.redeem_link(
                conn,
                tx,
                secret,
                core.settings.session_days,
                handle=handle or None,
                display_name=display_name or None,
                signed_in=signed_in,
            ),
            locks=() if invited is None else (invited,),
        )
    except RoomError as exc:
        return page(
            say["refused_title"],
            f"{refused}<p>{html.escape(half(exc.message, lang))}</p><p>{say['new_link']}</p>",
            exc.http_status,
            lang,
            switch=False,
        )
    target = f"/#/p/{session.project_id}" if session.project_id else "/"
    response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
    if session.secret is None:  # joined with the session this browser already has
        return response
    response.set_cookie(
        SESSION_COOKIE,
        session.secret,
        max_age=core.settings.session_days * 86_400,
        httponly=True,
        samesite="strict",
        secure=core.settings.origin.startswith("https://"),
        path="/",
    )
    return response


def half(message: str, lang: Language) -> str:
    """The language's half of a server message written "中文 (English)" (else all of it)."""
    chinese, sep, rest = message.partition(" (")
    if not sep or not rest.endswith(")"):
        return message
    return chinese if lang == "zh" else rest[:-1]


async def logout(request: Request) -> Response:
    core: Services = request.app.state.core
    secret = request.cookies.get(SESSION_COOKIE)
    who = await identity_from_headers(core, request.headers, request.cookies) if secret else None
    if who is not None and secret:
        form = await form_fields(request)
        check_csrf(who, {"x-csrf-token": str(form.get("csrf_token", ""))})
        await core.db.write(lambda conn, tx: auth_store.revoke_session(conn, secret, tx.now))
        # The page's live connections end with the session, not at their next reconnect.
        core.hub.presence.cut_session(auth_store.digest(secret), "signed out", CLOSE_SIGNED_OUT)
    response = RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


class SecureStatic(StaticFiles):
    async def get_response(self, path: str, scope: dict) -> Response:  # type: ignore[override,type-arg]
        response = await super().get_response(path, scope)
        for key, value in SECURITY_HEADERS.items():
            if key != "Cache-Control":
                response.headers.setdefault(key, value)
        response.headers["Cache-Control"] = "no-cache"
        return response


endpoints = [
    Route("/", index),
    Route("/overview", overview),
    Route("/favicon.ico", favicon),
    Route("/login/{secret}", login_form),
    Route("/join/{secret}", join_form),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
    Mount("/static", app=SecureStatic(directory=WEB_DIR), name="static"),
]
