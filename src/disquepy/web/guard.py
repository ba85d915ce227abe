"""What every request to ``disque-web`` must pass before any route runs: one ASGI layer
(:class:`Guard`, the outermost, in front of the fast ``POST /jobs`` layer and FastAPI),
so the policy is in one place whichever way a request is answered.

In order, for every HTTP request:

1. **Host**: the ``Host`` header must name one of the allowed hosts (``--allowed-host``;
   by default the loopback names and the address listened on), or the answer is a 400:
   a page on another site whose name was made to resolve to this address (DNS
   rebinding) reaches nothing.
2. **State changes** (any method but GET, HEAD, OPTIONS) must come from this origin
   (a ``Sec-Fetch-Site`` other than ``same-origin``/``none``, or an ``Origin`` other
   than the ``Host``, is a 403) and carry a JSON ``Content-Type`` (415) unless they
   have no body and no ``Content-Type`` at all (a bodiless ``POST .../cancel``, as in
   Disqueue's README): a form or a ``no-cors`` fetch of another page cannot send JSON,
   and a JSON request from another origin needs a CORS pre-flight this server never
   grants.
3. **Who**: with a login configured (``--auth nodes``, ``--token-file``), every route
   but ``/health``, ``/healthz``, the login page and the static files needs a session
   cookie (from ``POST /login``), HTTP Basic credentials of a node user, or a bearer
   token; ``/metrics`` needs the ``--metrics-token-file``'s token when one is given.
   Without one: 401 (an HTML page request is sent to ``/login``). The request then
   acts as that user (:mod:`disquepy.web.acting`): the nodes' ACL decides the rest.
4. **Body**, read only now (nobody unknown gets one buffered): at most ``max_body``
   bytes (413; a larger ``Content-Length`` is refused before any byte is read; 16 KB
   for ``/login``) within ``body_timeout`` seconds (408), an endless chunked body
   included; the connection is then closed. Routes get the body whole (replayed).

Every answer also carries ``X-Frame-Options: DENY`` (no clickjacking of the dashboard's
buttons), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: same-origin``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.responses import FileResponse, JSONResponse, RedirectResponse

from .acting import ACTING, Clients, UserClients
from .sessions import COOKIE, Sessions

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("disquepy.web")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# routes anyone may reach: the health check, the login page and what it loads, and
# the API docs' assets (the docs page itself is behind the login)
PUBLIC = frozenset({"/health", "/healthz", "/login", "/favicon.ico"})
PUBLIC_PREFIXES = ("/static/", "/_docs-assets/")
LOGIN_PAGE = Path(__file__).parent / "static" / "login.html"
MAX_BODY = 8 * 1024 * 1024  # a job's payload is at most 4 MiB once encoded (submit.py)
LOGIN_BODY = 16 * 1024  # a login's JSON
BODY_TIMEOUT = 10.0  # seconds from the headers to the body's last byte
LOGIN_FAILURES = 10  # failed logins per client address per minute before a 429
EXTRA_HEADERS = [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
                 (b"referrer-policy", b"same-origin")]


def is_json(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type, parameters (charset) allowed."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


def json_required(content_type: str | None) -> str:
    """The 415's text (the guard's, and the ``POST /jobs`` route's own)."""
    return ("a request that changes something takes a JSON body: send it with the header "
            "'Content-Type: application/json'"
            + ("" if content_type is None else f" (got {content_type!r})"))


def host_name(host: str) -> str:
    """The name in a ``Host`` header (or an ``Origin``'s authority), without the port."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def read_tokens(path: str) -> dict[str, str]:
    """A token file: one ``<name> <sha256-hex of the token>`` a line (``#`` comments).
    Returns digest -> name. Raises ValueError naming the bad line."""
    tokens: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if (len(words) != 2 or len(words[1]) != 64
                or any(c not in "0123456789abcdef" for c in words[1].lower())):
            raise ValueError(f"{path}:{n}: expected '<name> <sha256 hex of the token>' "
                             "(printf %s \"$token\" | sha256sum)")
        tokens[words[1].lower()] = words[0]
    if not tokens:
        raise ValueError(f"{path}: no token in the file")
    return tokens


@dataclass
class Policy:
    """What :class:`Guard` enforces (``disque-web``'s options)."""

    nodes_auth: bool = False  # --auth nodes: log in as a node user
    tokens: dict[str, str] = field(default_factory=dict)  # --token-file: digest -> name
    metrics_tokens: dict[str, str] = field(default_factory=dict)  # --metrics-token-file
    allowed_hosts: frozenset[str] = LOOPBACK_NAMES  # "*": any
    max_body: int = MAX_BODY
    body_timeout: float = BODY_TIMEOUT
    session_ttl: float = 12 * 3600.0
    session_dir: str | None = None

    @property
    def login(self) -> bool:
        return self.nodes_auth or bool(self.tokens)

    def to_json(self) -> str:
        """For the processes of ``disque-web --workers N`` (:meth:`from_json`)."""
        d = asdict(self)
        d["allowed_hosts"] = sorted(self.allowed_hosts)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> Policy:
        d = json.loads(text)
        d["allowed_hosts"] = frozenset(d["allowed_hosts"])
        return cls(**d)


class Refused(Exception):
    def __init__(self, status: int, detail: str, **headers: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


class Guard:
    """ASGI middleware: the checks above, then ``app`` acting as the request's user."""

    def __init__(self, app: ASGIApp, policy: Policy, users: UserClients) -> None:
        self.app = app
        self.policy = policy
        self.users = users
        self.sessions = Sessions(policy.session_ttl, policy.session_dir)
        self.failures: dict[str, list[float]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websocket route here
            await send({"type": "websocket.close", "code": 1008})
            return
        send = _with_headers(send)
        headers = _headers(scope)
        try:  # from the headers first: nobody unknown gets a body buffered
            self._check_host(headers)
            if scope["method"] not in SAFE_METHODS:
                self._check_origin(scope, headers)
            path = scope["path"]
            if path in ("/login", "/logout", "/session"):
                receive = await self._read_body(headers, receive, LOGIN_BODY)
                await self._login_routes(scope, headers, receive, send)
                return
            acting = await self._who(scope, headers)
            receive = await self._read_body(headers, receive, self.policy.max_body)
        except Refused as e:
            await JSONResponse({"detail": e.detail}, e.status,
                               {**e.headers, "Connection": "close"}
                               if e.status in (408, 413) else e.headers)(scope, receive, send)
            return
        except _Redirect as r:
            await RedirectResponse(r.location, 303)(scope, receive, send)
            return
        token = ACTING.set(acting)
        try:
            await self.app(scope, receive, send)
        finally:
            ACTING.reset(token)

    # ------------------------------------------------------------ the checks

    def _check_host(self, headers: dict[str, str]) -> None:
        allowed = self.policy.allowed_hosts
        if "*" in allowed:
            return
        host = host_name(headers.get("host", ""))
        if host not in allowed:
            raise Refused(400, f"Host {headers.get('host', '')[:100]!r} is not one this server "
                          "answers to (disque-web --allowed-host)")

    async def _read_body(self, headers: dict[str, str], receive: Receive, cap: int) -> Receive:
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > cap):
            raise Refused(413, f"request body too large: at most {cap} bytes")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.policy.body_timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise Refused(408, f"request body not received within "
                              f"{self.policy.body_timeout:g} s")
            try:
                m = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                raise Refused(408, f"request body not received within "
                              f"{self.policy.body_timeout:g} s") from None
            if m["type"] != "http.request":  # the client left: the app sees it leave
                return _replay([m], receive)
            chunk = m.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise Refused(413, f"request body too large: at most {cap} bytes")
            chunks.append(chunk)
            if not m.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return _replay([{"type": "http.request", "body": body, "more_body": False}], receive)

    def _check_origin(self, scope: Scope, headers: dict[str, str]) -> None:
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refused(403, f"cross-origin request refused (Sec-Fetch-Site: {site[:40]})")
        origin = headers.get("origin")
        if origin is not None:
            authority = origin.split("://", 1)[-1].rstrip("/")
            if origin == "null" or authority.lower() != headers.get("host", "").lower():
                raise Refused(403, f"cross-origin request refused (Origin: {origin[:100]})")
        ctype = headers.get("content-type")
        if not is_json(ctype) and not _bodiless(headers):
            raise Refused(415, json_required(ctype))

    async def _who(self, scope: Scope, headers: dict[str, str]) -> Clients | None:
        """The clients the request acts with (None: the web's own), or Refused."""
        path = scope["path"]
        if path == "/metrics" and self.policy.metrics_tokens:
            token = _bearer(headers)
            if token is None or token_digest(token) not in self.policy.metrics_tokens:
                raise Refused(401, "/metrics needs its bearer token (--metrics-token-file)",
                              **{"WWW-Authenticate": "Bearer"})
            return None
        if not self.policy.login or path == "/metrics" or _public(path):
            return None
        who = await self._identify(headers)
        if who is not None:
            return who[1]
        if scope["method"] == "GET" and "text/html" in headers.get("accept", ""):
            raise _Redirect("/login?next=" + quote(path, safe="/"))
        raise Refused(401, "log in first: POST /login (a session cookie), or send "
                      "'Authorization: Basic' (a node user) or 'Authorization: Bearer' "
                      "(a token)")

    async def _identify(self, headers: dict[str, str]) -> tuple[str, Clients | None] | None:
        """(user, its clients) from the session cookie or the Authorization header."""
        sid = _cookie(headers.get("cookie", ""), COOKIE)
        if sid:
            s = self.sessions.get(sid)
            if s is not None:
                if s.kind == "token":
                    return s.user, None
                c = self.users.known(s.user, s.password) or await self.users.verify(
                    s.user, s.password)
                if c is not None:
                    return s.user, c
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and self.policy.tokens:
            name = self.policy.tokens.get(token_digest(value.strip()))
            if name is not None:
                return name, None
        elif scheme == "basic" and self.policy.nodes_auth:
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).decode(
                    "utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            c = self.users.known(user, password) or await self._verify(user, password)
            if c is not None:
                return user, c
        return None

    async def _verify(self, user: str, password: str) -> Clients | None:
        try:
            return await self.users.verify(user, password)
        except Exception as e:
            raise Refused(503, f"no Disque node could check the login: {e}",
                          **{"Retry-After": "1"}) from None

    # ------------------------------------------------------------ /login, /logout, /session

    async def _login_routes(self, scope: Scope, headers: dict[str, str], receive: Receive,
                            send: Send) -> None:
        path, method = scope["path"], scope["method"]
        sid = _cookie(headers.get("cookie", ""), COOKIE)
        if path == "/session" and method == "GET":
            # who is logged in (None: nobody, or no login here) and how one logs in
            who = await self._identify(headers) if self.policy.login else None
            await JSONResponse({"user": who[0] if who else None,
                                "login": self._modes()})(scope, receive, send)
            return
        if path == "/login" and method in ("GET", "HEAD"):
            await FileResponse(LOGIN_PAGE, headers={"Cache-Control": "no-store"})(
                scope, receive, send)
            return
        if path == "/logout" and method == "POST":
            if sid:
                self.sessions.delete(sid)
            r = JSONResponse({"user": None})
            r.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
            await r(scope, receive, send)
            return
        if path != "/login" or method != "POST":
            raise Refused(405, "Method Not Allowed")
        if not self.policy.login:
            raise Refused(404, "no login here: this disque-web has no --auth nodes or "
                               "--token-file")
        addr = (scope.get("client") or ("?", 0))[0]
        self._throttle(addr)
        m = await receive()
        body = m.get("body", b"")
        try:
            form = json.loads(body or b"{}")
            if not isinstance(form, dict):
                raise ValueError
        except ValueError:
            raise Refused(422, "POST /login takes {\"username\": ..., \"password\": ...} "
                               "or {\"token\": ...}") from None
        user = None
        kind = ""
        password = ""
        if isinstance(form.get("token"), str) and self.policy.tokens:
            user = self.policy.tokens.get(token_digest(form["token"]))
            kind = "token"
        elif (isinstance(form.get("username"), str) and isinstance(form.get("password"), str)
              and self.policy.nodes_auth):
            password = form["password"]
            c = await self._verify(form["username"], password)
            if c is not None:
                user, kind = form["username"], "nodes"
        if user is None:
            self.failures.setdefault(addr, []).append(time.monotonic())
            log.warning("failed login to disque-web from %s", addr)
            raise Refused(401, "wrong user name, password or token")
        new = self.sessions.create(user, kind, password)
        log.info("login to disque-web as '%s' from %s", user, addr)
        r = JSONResponse({"user": user})
        r.set_cookie(COOKIE, new, max_age=int(self.policy.session_ttl), path="/",
                     httponly=True, samesite="strict", secure=scope.get("scheme") == "https")
        await r(scope, receive, send)

    def _modes(self) -> list[str]:
        return (["nodes"] if self.policy.nodes_auth else []) + (
            ["token"] if self.policy.tokens else [])

    def _throttle(self, addr: str) -> None:
        """More than LOGIN_FAILURES failed logins from an address in a minute: 429."""
        now = time.monotonic()
        if len(self.failures) > 10_000:
            self.failures.clear()
        recent = [t for t in self.failures.get(addr, []) if now - t < 60]
        if recent:
            self.failures[addr] = recent
        else:
            self.failures.pop(addr, None)
        if len(recent) >= LOGIN_FAILURES:
            raise Refused(429, "too many failed logins from this address: wait a minute",
                          **{"Retry-After": str(int(60 - (now - recent[0])) + 1)})


class _Redirect(Exception):
    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def _bodiless(headers: dict[str, str]) -> bool:
    """A request with no body and no ``Content-Type`` at all (Disqueue's own
    ``curl -X POST .../cancel``): it carries nothing a form could have smuggled, and a
    browser sends one only from a script, with ``Origin`` and ``Sec-Fetch-Site``
    (checked before)."""
    return ("content-type" not in headers and "transfer-encoding" not in headers
            and headers.get("content-length", "0").strip() == "0")


def _public(path: str) -> bool:
    return path in PUBLIC or path.startswith(PUBLIC_PREFIXES)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of each: a second ``Host``
    or ``Origin`` cannot override the one checked)."""
    out: dict[str, str] = {}
    for k, v in scope["headers"]:
        out.setdefault(k.decode("latin-1"), v.decode("latin-1"))
    return out


def _bearer(headers: dict[str, str]) -> str | None:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def again() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()
    return again


def _with_headers(send: Send) -> Send:
    async def sending(m: Message) -> None:
        if m["type"] == "http.response.start":
            m["headers"] = [*m.get("headers", []), *EXTRA_HEADERS]
        await send(m)
    return sending

