"""Access control and browser hardening for the dashboard, as one ASGI middleware.

- Token: when the config has one, every request needs it: `Authorization: Bearer <token>`, the HttpOnly
  cookie set after the first visit, or `?token=<token>` on a page, which sets that cookie and redirects to
  the same URL without the token (so it does not stay in the address bar, history or shared links).
- Host check: on a loopback bind the Host header must name a loopback address, so a web page elsewhere
  cannot read the dashboard through DNS rebinding.
- Headers: a Content-Security-Policy allowing only this origin's scripts (no inline script), no framing by
  other sites, no MIME sniffing, no referrer.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from a3r.dashboard.config import DashboardConfig, is_loopback

__all__ = ["COOKIE", "install_security"]

COOKIE = "a3r_dashboard_token"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "SAMEORIGIN",
}


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _denied(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": message, "status": status}}, status_code=status)


def install_security(app: FastAPI, cfg: DashboardConfig) -> None:
    """Add the token check, the Host check and the security headers to every response of `app`."""

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if cfg.loopback and not is_loopback(request.url.hostname or ""):
            response = _denied(
                400,
                f"Host {request.url.hostname!r} is not a loopback name; open http://127.0.0.1:{cfg.port}/",
            )
        elif cfg.token and not (
            _same(request.cookies.get(COOKIE), cfg.token)
            or _same(request.headers.get("authorization", "").removeprefix("Bearer ").strip(), cfg.token)
        ):
            if _same(request.query_params.get("token"), cfg.token) and request.method == "GET":
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
                response = RedirectResponse(target, status_code=303)
                response.set_cookie(COOKIE, cfg.token, httponly=True, samesite="strict", path="/")
            else:
                response = _denied(
                    401,
                    "this dashboard needs its token: open it once as /?token=<token>, or send "
                    "'Authorization: Bearer <token>'",
                )
        else:
            response = await call_next(request)
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        return response
