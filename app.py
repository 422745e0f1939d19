"""qstash-lists: QStash's URL groups and queues, served from a JSON file (the HTTP part and the
process).

It answers the reads of ``/v2/topics``, ``/v2/queues`` (each list and one item by name) and
``/v2/keys`` behind bearer-token auth; with ``--writable``, QStash's writes of both, saved to the
file.  Serve with ``python app.py`` (``--help`` lists the settings); embed with ``make_app``, the
factory for waitress-serve, gunicorn and uWSGI, or ``create_app(open_data(...))``.  Standard library
only; waitress only to serve.  A request's path through both modules, hop by hop:
docs/development.md, "One request, end to end".
"""

from __future__ import annotations

import signal
import sys

_signals: "list[int]" = []  # the stops the command was sent, in order (see main and --run)
# The command owns its process (python app.py, python -m, the qstash-lists script): Ctrl-C (and
# SIGHUP) while it imports is noted, and main() then exits 130 with no traceback (a handler that
# raised could be swallowed: in a weakref callback of the import system, say); a SIGHUP noted
# stops --run alone (a closed terminal), never the server.
if __name__ == "__main__" or sys.argv[0].endswith("qstash-lists"):
    for _noted in [signal.SIGINT] + [signal.SIGHUP] * hasattr(signal, "SIGHUP"):
        signal.signal(_noted, lambda signum, frame: _signals.append(signum))

import argparse
import collections
import contextlib
import errno
import fnmatch
import hashlib
import io
import ipaddress
import json
import logging
import logging.handlers
import math
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import typing
import weakref
from http import HTTPStatus
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)
from urllib.parse import quote, unquote_to_bytes

if TYPE_CHECKING:
    import store as store  # (as store: testing.py uses app.store)
elif __package__:  # inside a package: vendored, or installed as qstash_lists
    from . import store
# a script or a top-level module: the store.py beside this file, even if another "store" comes first
else:
    import importlib.util

    _beside = os.path.join(os.path.dirname(os.path.realpath(__file__)), "store.py")
    _spec = importlib.util.find_spec("store")
    if _spec is not None and _spec.origin and os.path.realpath(_spec.origin) == _beside:
        import store
    else:
        _spec = importlib.util.spec_from_file_location("qstash_lists_store", _beside)
        store = importlib.util.module_from_spec(_spec)
        sys.modules[_spec.name] = store  # dataclasses look their module up there
        _spec.loader.exec_module(store)

__version__ = "0.3.0"
__all__ = [
    "DEV_TOKEN",
    "SETTINGS",
    "HTTPError",
    "QueueLog",
    "Service",
    "TestDouble",
    "create_app",
    "main",
    "make_app",
    "open_data",
    "read_settings",
    "run",
]

StartResponse = Callable[..., Callable[[bytes], object]]
WSGIEnvironment = Dict[str, Any]
WSGIApplication = Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]

#: The token that the official ``qstash dev`` server documents; used only on loopback.
DEV_TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0="
#: ... and its signing keys (published in @upstash/qstash as DEV_CREDENTIALS), served to it.
DEV_SIGNING_KEYS = ("sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r", "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs")
_DEV_DIGEST = hashlib.sha256(DEV_TOKEN.encode()).digest()
#: No token needed; it says which version of the data file is served (see health).
HEALTH_PATH = "/healthz"
#: With --reset (and --writable): puts the token's account back as the server started (TestDouble).
RESET_PATH = "/qstash-lists/reset"
#: With --reset: the faults a suite asks for its token's account, and what it asked (TestDouble).
FAULTS_PATH = "/qstash-lists/faults"
REQUESTS_PATH = "/qstash-lists/requests"
#: One account's lists: no shared cache keeps them; revalidated (RFC 9111, 5.2.2).
PRIVATE = "private, no-cache"
NO_STORE = "no-store"  # signing keys (secrets), errors, writes, health: no cache stores them at all
MAX_BODY = 64 * 1024  # the largest body a write takes (QStash's carry a few hundred bytes)
MAX_NAME = 200  # the longest name of a queue or URL group a write makes
#: make_app's exit on a setting only the environment can fix (gunicorn's "failed to boot"), and
#: in a uWSGI worker that loads the app itself uWSGI's "failed loading app", which with
#: --need-app stops the instance instead of starting the worker again.
BOOT_FAILED, UWSGI_APP_FAILED = 3, 22
#: The 503 while no good version of the data file has been loaded (see make_app).
UNAVAILABLE = (
    "service unavailable: the server's data file cannot be served yet; the server log names the "
    "problem and its fix, and the file is served as soon as it is good"
)
#: The 403 to a request from a web page.
FROM_A_PAGE = (
    "forbidden: this server takes no request from a web page (it has no CORS): any site could "
    "otherwise read and change your lists; call it from your code, an SDK or curl"
)
#: The 403 to the dev token by a name that is not this machine's (DNS rebinding).
DEV_TOKEN_HOST = (
    "forbidden: the dev token is public, so it is taken only from a client that names this server "
    "by an IP address or localhost; to allow a name: --allowed-hosts NAME "
    "(QSTASH_LISTS_ALLOWED_HOSTS)"
)
#: waitress's settings, measured (docs/deploying.md); the benchmark's baseline and
#: waitress-serve's recipe use them.
WAITRESS_SETTINGS: Dict[str, Any] = {
    "ident": "qstash-lists",  # the Server header: no version numbers
    # Bodies by reference (wsgi.file_wrapper): a slow reader holds no worker (the default would).
    "outbuf_high_watermark": 1 << 40,
    "asyncore_use_poll": True,  # select() fails on descriptors above 1023; poll() does not
    "channel_timeout": 15,  # close a connection that has sent and been sent nothing for 15 s...
    "cleanup_interval": 5,  # ...looking every 5 s (waitress's default, 30 s, doubles the wait)
    "connection_limit": 1000,
    "max_request_header_size": 16 * 1024,  # answered with 431 above this
    "max_request_body_size": MAX_BODY,
}
#: At most this many fields of a query in the access log (names only: a value may be a token).
LOGGED_QUERY_FIELDS = 8
SHOWN_NAME = 100  # a name longer than this is cut short where a message repeats it
MAX_QUERY_TOKENS = 16  # more differently written qstash_token values than this are refused unread
#: Lines held for a log stream that does not keep up; past that, dropped and counted.
ACCESS_LOG_BACKLOG = 10000
ACCESS_LOG_PAUSE = 0.1  # how long the access log lets lines gather before it writes them
ACCESS_LOG_CLOSE_TIMEOUT = 1.0  # how long the access log may take to write its last lines at a stop
#: How long serving() lets the answers in flight finish when its block ends, and its threads.
SERVING_STOP_TIMEOUT = 5.0
SERVING_THREADS = 4
REQUEST_LOG = 1000  # the requests an account's log keeps; then the oldest goes
REQUEST_LOG_BYTES = 1 << 20  # ... and the bytes of their paths, queries and bodies
MAX_FAULTS = 100  # the faults an account may have waiting (each request looks through them)
MAX_DELAY = 30  # the longest delay a fault may ask for, in seconds (it holds a worker thread)
MAX_THREADS = 1024  # the most --threads allows (each has a stack; thousands only queue on 2 cores)

logger = logging.getLogger("qstash_lists")
access_logger = logging.getLogger("qstash_lists.access")


# ---- Errors: one type, rendered in one place -----------------------------------------------------
class Answer(NamedTuple):
    """An answer: its status line and headers as start_response takes them, its body, and why (for
    the access log only)."""

    status_line: str  # such as "200 OK"
    headers: List[Tuple[str, str]]
    body: bytes
    why: Optional[str] = None


class HTTPError(Exception):
    """An error answer: its status (a class attribute, as werkzeug's), a JSON ``{"error": message}``
    body, extra headers, and ``why`` for the log only."""

    status = HTTPStatus.INTERNAL_SERVER_ERROR
    message = "internal server error; the server log has the details"
    headers: Sequence[Tuple[str, str]] = ()
    why: Optional[str] = None

    def __init__(
        self,
        message: Optional[str] = None,
        headers: Sequence[Tuple[str, str]] = (),
        why: Optional[str] = None,
    ) -> None:
        self.message = message or self.message
        self.headers = list(self.headers) + list(headers)
        self.why = why or self.why
        super().__init__(self.message)

    def render(self) -> Answer:
        """Return the answer of this error."""
        return _json_answer(self.status, {"error": self.message}, self.headers, self.why)


class BadRequest(HTTPError):
    """A name outside QStash's rule, or a write's body that is not what QStash takes."""

    status = HTTPStatus.BAD_REQUEST


class Unauthorized(HTTPError):
    """No credential, or a bad one: one answer for all, the reason logged only (RFC 6750, 3.1)."""

    status = HTTPStatus.UNAUTHORIZED
    message = (
        "unauthorized: send your QStash token as 'Authorization: Bearer <token>' or as the "
        "qstash_token query parameter"
    )

    def __init__(self, why: str, sent: bool = True) -> None:
        challenge = 'Bearer realm="qstash"'
        if sent:  # a credential came, and it is not one (RFC 6750, 3.1)
            challenge += ', error="invalid_token"'
        super().__init__(None, [("WWW-Authenticate", challenge)], why)


class Forbidden(HTTPError):
    """A request from a web page, or the dev token from a name that is not this machine's."""

    status = HTTPStatus.FORBIDDEN


class NotFound(HTTPError):
    """A path this server does not have, or an item the token's account does not have."""

    status = HTTPStatus.NOT_FOUND
    message = (
        "not found: this server answers /v2/topics, /v2/topics/<name>, "
        "/v2/topics/<name>/endpoints, /v2/queues, /v2/queues/<name>, /v2/queues/<name>/pause and "
        "/resume, and /v2/keys"
    )


class MethodNotAllowed(HTTPError):
    """A method the route does not answer (RFC 9110, 15.5.6): Allow names what it answers here,
    the message what it takes (``methods``, from ROUTES) and how to turn writes on."""

    status = HTTPStatus.METHOD_NOT_ALLOWED

    def __init__(self, methods: Sequence[str], writable: bool, method: str) -> None:
        head = ["HEAD"] if "GET" in methods else []  # HEAD where it has GET (RFC 9110, 9.3.2)
        writes = [] if writable else [m for m in methods if m not in READS]
        if method in writes:
            message = (
                "method not allowed: this server is read-only; start it with --writable (or "
                "QSTASH_LISTS_WRITABLE=1) to take QStash's writes of URL groups and queues"
            )
        else:
            message = "method not allowed: this path answers %s" % ", ".join(list(methods) + head)
            if writes:
                message += (
                    " (%s: writes, taken once the server is started with --writable, or "
                    "QSTASH_LISTS_WRITABLE=1)" % ", ".join(writes)
                )
        answered = [m for m in methods if m not in writes] + head
        super().__init__(message, [("Allow", ", ".join(answered))])


class Conflict(HTTPError):
    """A write on a data file that was edited by hand and does not load."""

    status = HTTPStatus.CONFLICT
    why = "file does not load"
    message = (
        "conflict: the data file on the server was edited and does not load; nothing was written; "
        "the server log names the problem"
    )


class PayloadTooLarge(HTTPError):
    """A write's body over MAX_BODY."""

    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE


class InsufficientStorage(HTTPError):
    """A write that would take the file over --max-size, or its account over its share."""

    status = HTTPStatus.INSUFFICIENT_STORAGE
    why = "too large"
    message = (
        "insufficient storage: the data file would be over the server's --max-size, or this "
        "account over its share of it; nothing was written"
    )


class ServiceUnavailable(HTTPError):
    """No good version of the data file yet, or a write that cannot be made now: try again."""

    status = HTTPStatus.SERVICE_UNAVAILABLE
    why = "not written"
    message = (
        "service unavailable: the data file cannot be written now; nothing was written; the server "
        "log says why"
    )
    headers = (("Retry-After", "1"),)


def _no_such(noun: str, name: str) -> NotFound:
    shown = name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "..."
    quoted = json.dumps(shown, ensure_ascii=False)  # as typed (the answer's JSON escapes it once)
    return NotFound("not found: no %s named %s" % (noun, quoted), why="no such %s" % noun)


def _json_answer(
    status: HTTPStatus,
    document: Any,
    headers: Sequence[Tuple[str, str]] = (),
    why: Optional[str] = None,
) -> Answer:
    """An answer of its own (an error, the health check, a test double's): compact JSON, never
    cached."""
    data = store.encode(document)
    own = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(data))),
        ("Cache-Control", NO_STORE),
        ("X-Content-Type-Options", "nosniff"),
    ]
    return Answer("%d %s" % (status, status.phrase), own + list(headers), data, why)


def _done(why: str) -> Answer:
    """A write's answer, saying ``why`` in the access log: 200 without content, as QStash's OpenAPI
    declares every write's (the SDKs parse none; a client that parses it fails here as there)."""
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "0")]
    return Answer("200 OK", headers + [("Cache-Control", NO_STORE)], b"", why)


# ---- Response bodies: encoded once per version of an account -------------------------------------
class Body(NamedTuple):
    """One response body and the headers of its 200 and 304 answers (see kept)."""

    data: bytes
    etag: str  # a digest of the bytes
    not_modified: List[Tuple[str, str]]  # a 304's headers, which a 200 repeats (RFC 9110, 15.4.5)
    headers: List[Tuple[str, str]]  # a 200's


def kept(asked: Asked, key: Any, data: Callable[[], bytes], cache: str = PRIVATE) -> Answer:
    """The 200 with the body ``key`` of the asked account (its bytes: ``data()``), or 304 if
    If-None-Match names its ETag (weak comparison, RFC 9110, 13.1.2); ``cache``: PRIVATE for one
    account's lists, NO_STORE for signing keys.  The body and its headers are made once and kept in
    the account: sound because every write makes a new Account, whose cache starts empty (an
    ``init=False`` field, which dataclasses.replace does not copy; a put-back restores one whose
    content is equal), so a body never outlives what it encodes.  Two threads may both make it;
    one is kept.  Fresh header lists each time: some servers (wsgiref) add their own to ours."""
    body = asked.account.cache.get(key)
    if body is None:
        raw = data()
        etag = '"%s"' % hashlib.blake2b(raw, digest_size=16).hexdigest()
        same = [("ETag", etag), ("Cache-Control", cache), ("X-Content-Type-Options", "nosniff")]
        length = [("Content-Type", "application/json"), ("Content-Length", str(len(raw)))]
        body = asked.account.cache.setdefault(key, Body(raw, etag, same, length + same))
    tags = [tag.strip() for tag in asked.environ.get("HTTP_IF_NONE_MATCH", "").split(",")]
    if "*" in tags or body.etag in tags or "W/" + body.etag in tags:
        return Answer("304 Not Modified", list(body.not_modified), b"")
    return Answer("200 OK", list(body.headers), body.data)


# ---- Requests: the token's query fields, a name, a write's body ----------------------------------
def _query_tokens(query: str) -> set[bytes]:
    """Return the distinct decoded values of the query's qstash_token fields (b"" for an empty one),
    cutting the query at each ``&qstash_token``: a thousand other fields cost little.  Past
    MAX_QUERY_TOKENS: refused."""
    spellings = {
        rest.partition("&")[0]
        for rest in ("&" + query).split("&qstash_token")[1:]
        if not rest or rest[0] in "=&"
    }  # the whole name, not qstash_tokens=
    if len(spellings) > MAX_QUERY_TOKENS:
        raise Unauthorized("malformed")
    # Decoded as HTML forms write them: "+" is a space, then percent-escapes.
    return {unquote_to_bytes(_latin1(value[1:]).replace(b"+", b" ")) for value in spellings}


def _latin1(text: str) -> bytes:
    """The bytes behind a PEP 3333 native string (others' characters kept, escaped)."""
    return text.encode("latin-1", "backslashreplace")


def _host_is_local(host: Optional[str], allowed: Iterable[str]) -> bool:
    """Tell whether a Host header names this machine as no DNS name can be made to (DNS rebinding):
    an IP address, localhost or a name under it (RFC 6761), or a name the operator allows; no
    Host (HTTP/1.0) is no browser's."""
    name = (host or "localhost").lower()
    name = name[1 : name.find("]")] if name.startswith("[") else name.partition(":")[0]
    try:
        return (
            name == "localhost"
            or name.endswith(".localhost")
            or name in allowed
            or bool(ipaddress.ip_address(name))
        )
    except ValueError:
        return False


def _utf8(segment: str) -> str:
    """A name from the path as it was typed: PEP 3333 gives its bytes as latin-1 characters, which
    are UTF-8's (RFC 3986, 2.5); BadRequest if they are not UTF-8."""
    try:
        raw = segment.encode("latin-1")
    except UnicodeEncodeError:  # a server that decoded it already (PEP 3333 says not to)
        return segment
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("bad request: a name in the path is not UTF-8") from None


def _queue_name(name: str) -> str:
    """A queue's name from the path; outside QStash's rule, a 400 as QStash's."""
    if not store.is_name(name):
        raise BadRequest("bad request: a queue's name has %s" % store.NAME_RULE)
    return name


def _content_length(environ: WSGIEnvironment) -> Optional[int]:
    """The body's Content-Length (none: 0); None if it is not a whole number of at most 9 digits
    (one of thousands is never parsed)."""
    length = environ.get("CONTENT_LENGTH") or "0"
    return int(length) if length.isascii() and length.isdigit() and len(length) <= 9 else None


def _json_body(environ: WSGIEnvironment) -> Dict[str, Any]:
    """A write's JSON object, whatever its Content-Type (neither SDK sends one); or BadRequest."""
    length = _content_length(environ)
    if length is None:
        raise BadRequest("bad request: a Content-Length of a whole number of bytes is needed")
    if length > MAX_BODY:
        raise PayloadTooLarge("payload too large: a write's body is at most %d bytes" % MAX_BODY)
    raw = environ["wsgi.input"].read(length) if length else b""
    try:
        # UTF-8 itself: json.loads would take UTF-16, UTF-32 and a byte-order mark, as no SDK sends.
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=store.unique_keys)
    except store.DataError as exc:  # a key given twice: which one was meant is anyone's guess
        raise BadRequest("bad request: %s" % exc) from None
    except (ValueError, RecursionError):
        raise BadRequest("bad request: the body is not UTF-8 JSON") from None
    if type(document) is not dict:
        raise BadRequest("bad request: the body is not a JSON object")
    return document


def _field(document: Dict[str, Any], key: str, good: Callable[[Any], bool], expected: str) -> Any:
    """``document[key]`` if it is ``good``, else BadRequest naming the field and what it takes."""
    value = document.get(key)
    if good(value):
        return value
    shown = json.dumps(value, ensure_ascii=False)  # as written; NaN as NaN
    # As written (NaN as NaN), escaped where it is not printable (a lone surrogate).
    got = (
        (shown if shown.isprintable() else json.dumps(value))[:60] if key in document else "nothing"
    )
    raise BadRequest("bad request: %s: expected %s, got %s" % (key, expected, got))


#: The fields an endpoint of a write may give, and the rule of each.
_ENDPOINT_RULES = {"url": store.is_http_url, "name": store.is_text}


def _endpoints(document: Dict[str, Any], adding: bool) -> List[Any]:
    """A write's ``endpoints``: each with an http(s) url to add; a url or a name to remove."""
    found = _field(
        document,
        "endpoints",
        lambda v: type(v) is list and v != [],
        "a non-empty array of endpoints",
    )
    endpoints: List[Any] = []
    for i, value in enumerate(found):
        given = {}
        if type(value) is dict:
            given = {key: value[key] for key in ("name", "url") if value.get(key) not in (None, "")}
        if (
            (adding and "url" not in given)
            or not given
            or not all(_ENDPOINT_RULES[key](v) for key, v in given.items())
        ):
            raise BadRequest(
                "bad request: endpoints[%d]: expected an object with an absolute http or https "
                "url%s, and a printable name if any" % (i, "" if adding else ", or a name")
            )
        endpoints.append(store.Endpoint(given.get("name"), given["url"]) if adding else given)
    return endpoints


# ---- Handlers: one a route and method, each named as the SDKs name the call ----------------------
class Asked(NamedTuple):
    """A request that passed the gates, as a handler takes it."""

    environ: WSGIEnvironment
    source: store.DataFile
    account: store.Account  # the token's, in the newest version
    name: Optional[str]  # the item's name in the path (routes with {name})


def url_group_list(asked: Asked) -> Answer:
    """GET /v2/topics: the account's URL groups."""
    return kept(asked, "url_groups", lambda: store.array(asked.account.url_groups))


def url_group_get(asked: Asked) -> Answer:
    """GET /v2/topics/{name}: one URL group (a name outside the rule: there is none, a 404)."""
    group = asked.account.url_groups.get(asked.name or "")
    if group is None:
        raise _no_such("URL group", asked.name or "")
    return kept(asked, ("url_groups", asked.name), lambda: group.raw)


def queue_list(asked: Asked) -> Answer:
    """GET /v2/queues: the account's queues."""
    return kept(asked, "queues", lambda: store.array(asked.account.queues))


def queue_get(asked: Asked) -> Answer:
    """GET /v2/queues/{name}: one queue."""
    queue = asked.account.queues.get(_queue_name(asked.name or ""))
    if queue is None:
        raise _no_such("queue", asked.name or "")
    return kept(asked, ("queues", asked.name), lambda: queue.raw)


def signing_key_get(asked: Asked) -> Answer:
    """GET /v2/keys: the account's signing keys; the dev token's account, the published dev keys
    unless it has its own."""
    keys = asked.account.signing_keys
    if keys is None and asked.account.token_sha256 == _DEV_DIGEST:
        keys = DEV_SIGNING_KEYS
    if keys is None:
        raise NotFound(
            "not found: the data file gives this account no signing keys (its signingKeys)",
            why="no signing keys",
        )
    document = {"current": keys[0], "next": keys[1]}
    return kept(asked, "signing_keys", lambda: store.encode(document), NO_STORE)


def queue_upsert(asked: Asked) -> Answer:
    """POST /v2/queues: create a queue, or update what the body gives of it."""
    document = _json_body(asked.environ)
    name = _field(
        document,
        "queueName",
        lambda v: store.is_name(v) and len(v) <= MAX_NAME,
        "a name of %s, at most %d characters" % (store.NAME_RULE, MAX_NAME),
    )
    parallelism = _field(
        document,
        "parallelism",
        lambda v: v is None or (store.is_whole(v) and v >= 1),
        "a whole number from 1 to 2**53 - 1 (1 if left out)",
    )
    paused = _field(document, "paused", lambda v: v is None or type(v) is bool, "true or false")
    return save(
        asked,
        "queue",
        lambda account, now: store.upsert_queue(account, now, name, parallelism, paused),
    )


def queue_pause(asked: Asked) -> Answer:
    """POST /v2/queues/{name}/pause."""
    name = _queue_name(asked.name or "")
    return save(asked, "queue", lambda account, now: store.pause_queue(account, now, name, True))


def queue_resume(asked: Asked) -> Answer:
    """POST /v2/queues/{name}/resume."""
    name = _queue_name(asked.name or "")
    return save(asked, "queue", lambda account, now: store.pause_queue(account, now, name, False))


def queue_delete(asked: Asked) -> Answer:
    """DELETE /v2/queues/{name}."""
    name = _queue_name(asked.name or "")
    return save(asked, "queue", lambda account, now: store.delete_queue(account, now, name))


def url_group_delete(asked: Asked) -> Answer:
    """DELETE /v2/topics/{name} (a name outside the rule: there is none)."""
    name = asked.name or ""
    return save(asked, "URL group", lambda account, now: store.delete_url_group(account, now, name))


def url_group_upsert_endpoints(asked: Asked) -> Answer:
    """POST /v2/topics/{name}/endpoints: add endpoints, creating the URL group."""
    name = asked.name or ""
    if not store.is_name(name):  # it would make one
        raise BadRequest("bad request: a URL group's name has %s" % store.NAME_RULE)
    if len(name) > MAX_NAME:
        raise BadRequest("bad request: a URL group's name is at most %d characters" % MAX_NAME)
    endpoints = _endpoints(_json_body(asked.environ), True)
    return save(
        asked,
        "URL group",
        lambda account, now: store.add_endpoints(account, now, name, endpoints),
    )


def url_group_remove_endpoints(asked: Asked) -> Answer:
    """DELETE /v2/topics/{name}/endpoints: remove endpoints; an emptied URL group goes."""
    name = asked.name or ""
    gone = _endpoints(_json_body(asked.environ), False)
    return save(
        asked, "URL group", lambda account, now: store.remove_endpoints(account, now, name, gone)
    )


def save(asked: Asked, noun: str, edit: store.Edit) -> Answer:
    """Make ``edit`` to the token's account and write the file: 200 once it is on disk; each of
    store's refusals as its status (``noun``: what the path's name is, for a 404).  The edit runs
    later, in DataFile.update, under the flock, on the account as the file holds it then."""
    try:
        return _done(asked.source.update(asked.account.token_sha256, edit))
    except store.NoSuchAccount:  # the file changed since the credential was checked
        raise Unauthorized("account gone") from None
    except store.NoSuchItem:
        raise _no_such(noun, asked.name or "") from None
    except store.DataError as exc:
        raise _refused(exc) from None


def _refused(exc: store.DataError) -> HTTPError:
    """The answer to a write the store refused, each kind named; the reason is logged (the answer
    does not name the file)."""
    logger.error("%s", exc.problems[0] if exc.problems else exc)  # it says nothing was written
    if isinstance(exc, store.Unloadable):
        return Conflict()
    if isinstance(exc, store.TooLarge):
        return InsufficientStorage()
    return ServiceUnavailable()  # Busy (the lock not had in time), unwritable, or ever changing


def health(status: store.Status) -> Answer:
    """Answer the health check: 200 while a version is served (else 503), its SHA-256, staleness."""
    document = {
        "status": "ok" if status.version is not None else "unavailable",
        "version": status.version,
        "loadedAt": None if status.loaded_at is None else _utc(status.loaded_at),
        "stale": status.failed_at is not None,
        "failedAt": None if status.failed_at is None else _utc(status.failed_at),
    }
    if status.version is None:
        return _json_answer(HTTPStatus.SERVICE_UNAVAILABLE, document, [("Retry-After", "1")])
    return _json_answer(HTTPStatus.OK, document)


# ---- The route table -----------------------------------------------------------------------------
#: Which handler answers which method of which route, as Go 1.22's ServeMux keys them: "{name}" is
#: one path segment, an item's name; HEAD is GET without the body (RFC 9110, 9.3.2).  READS are
#: answered always; every other method writes, and is answered with --writable only (else 405).
ROUTES: Dict[Tuple[str, str], Callable[..., Answer]] = {
    ("GET", "/v2/topics"): url_group_list,
    ("GET", "/v2/topics/{name}"): url_group_get,
    ("DELETE", "/v2/topics/{name}"): url_group_delete,
    ("POST", "/v2/topics/{name}/endpoints"): url_group_upsert_endpoints,
    ("DELETE", "/v2/topics/{name}/endpoints"): url_group_remove_endpoints,
    ("GET", "/v2/queues"): queue_list,
    ("POST", "/v2/queues"): queue_upsert,
    ("GET", "/v2/queues/{name}"): queue_get,
    ("DELETE", "/v2/queues/{name}"): queue_delete,
    ("POST", "/v2/queues/{name}/pause"): queue_pause,
    ("POST", "/v2/queues/{name}/resume"): queue_resume,
    ("GET", "/v2/keys"): signing_key_get,
    ("GET", HEALTH_PATH): health,  # no token
}
READS = ("GET", "HEAD")
#: Each route's methods, in the table's order (a 405 names them).
METHODS: Dict[str, Tuple[str, ...]] = {}
for _method, _route in ROUTES:
    METHODS[_route] = METHODS.get(_route, ()) + (_method,)


def match(
    method: str, path_info: str, writable: bool
) -> Tuple[Callable[..., Answer], Optional[str]]:
    """The handler of ``method`` on ``path_info`` (a trailing slash dropped), and the item's name
    in it; NotFound, or MethodNotAllowed."""
    route = path_info[:-1] if path_info.endswith("/") else path_info
    name = None
    if route not in METHODS:
        parts = route.split("/")  # "", "v2", "queues", "<name>"[, "pause"]: the name is parts[3]
        if len(parts) > 3 and parts[3]:
            name, parts[3] = parts[3], "{name}"
            route = "/".join(parts)
        if route in (RESET_PATH, FAULTS_PATH, REQUESTS_PATH):  # a TestDouble's, not here
            started = "once the server is started with --reset (QSTASH_LISTS_RESET=1)"
            raise NotFound("not found: %s answers %s" % (route, started))
        if route not in METHODS:
            raise NotFound()
    handler = ROUTES.get(("GET" if method == "HEAD" else method, route))
    if handler is None or not (writable or method in READS):
        raise MethodNotAllowed(METHODS[route], writable, method)
    return handler, None if name is None else _utf8(name)


# ---- The service: the WSGI callable --------------------------------------------------------------
def _from_a_web_page(environ: WSGIEnvironment) -> bool:
    """Tell whether a web page sent the request: it has an Origin, or says it comes from a site."""
    site = environ.get("HTTP_SEC_FETCH_SITE")
    return environ.get("HTTP_ORIGIN") is not None or site in ("cross-site", "same-site")


class Service:
    """The WSGI callable that serves (and, if writable, writes) ``source``: each request is
    refused if a web page sent it, matched in ROUTES, its token's account found, then answered by
    the route's handler.  ``access_log``: each request to the ``qstash_lists.access`` logger;
    ``allowed_hosts``: see SETTINGS."""

    def __init__(
        self, source: store.DataFile, access_log: bool = True, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.source = source
        self.access_log = access_log
        self.allowed_hosts = frozenset(host.lower() for host in allowed_hosts)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        exc_info = None
        try:
            if _from_a_web_page(environ):  # whatever it asks: this server has no CORS
                raise Forbidden(FROM_A_PAGE, why="from a web page")
            method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
            handler, name = match(method, path, self.source.writable)  # --writable
            if handler is health:  # the one route without a token
                answer = health(self.source.status())
            else:
                answer = handler(Asked(environ, self.source, self.account(environ), name))
        except HTTPError as error:
            answer = error.render()
        except Exception:
            logger.exception("error while answering %s", _request_line(environ))
            answer, exc_info = HTTPError().render(), sys.exc_info()
        return self.send(environ, start_response, answer, started, exc_info)

    def account(self, environ: WSGIEnvironment) -> store.Account:
        """The account of the request's one token (its Authorization header and qstash_token
        fields agree) in the newest version, or the HTTPError that says why not."""
        query, header = environ.get("QUERY_STRING"), environ.get("HTTP_AUTHORIZATION")
        tokens = _query_tokens(query) if query and "qstash_token" in query else set()
        if header is not None:
            scheme, _, token = header.strip(" \t").partition(" ")
            if scheme.lower() != "bearer":  # the scheme is case-insensitive (RFC 9110, 11.1)
                raise Unauthorized("not a Bearer header")
            tokens.add(_latin1(token.lstrip(" ")))
        if not tokens:
            raise Unauthorized("no credential", sent=False)
        if len(tokens) > 1:
            raise Unauthorized("tokens disagree" if b"" not in tokens else "malformed")
        token = tokens.pop()
        if not token or b" " in token or b"\t" in token:  # no account's token has one
            raise Unauthorized("malformed")
        loaded = self.source.current()
        if loaded is None:
            raise ServiceUnavailable(UNAVAILABLE, why="no good data file yet")
        account = loaded.find(token)
        if account is None:
            raise Unauthorized("unknown token")
        if account.token_sha256 == _DEV_DIGEST:
            if not _host_is_local(environ.get("HTTP_HOST"), self.allowed_hosts):
                raise Forbidden(DEV_TOKEN_HOST, why="dev token, Host not local")
        return account

    def send(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        answer: Answer,
        started: float,
        exc_info: Any = None,
    ) -> Iterable[bytes]:
        """Start ``answer`` (HEAD: the same headers, errors included, never a body, RFC 9110,
        9.3.2), log it, and return its body as PEP 3333 takes it: under waitress in its
        wsgi.file_wrapper (no copy), else a list of the bytes (see _body_iterable)."""
        start_response(answer.status_line, answer.headers, exc_info)
        data = b"" if environ.get("REQUEST_METHOD") == "HEAD" else answer.body
        self.log(environ, answer, len(data), started)
        return _body_iterable(environ, data)

    def log(self, environ: WSGIEnvironment, answer: Answer, size: int, started: float) -> None:
        """Log a request answered with ``answer`` (``size`` bytes of its body sent), if this
        service's access log is on: under python app.py, to QueueLog (_log_to_stderr: the line is
        made and written on its listener's thread); embedded, to the logger's own handlers."""
        if self.access_log and access_logger.isEnabledFor(logging.INFO):
            ms = (time.perf_counter() - started) * 1000
            access_logger.info("%s", AccessLine(environ, answer, size, ms))


def create_app(
    source: store.DataFile, access_log: bool = True, allowed_hosts: Iterable[str] = ()
) -> Service:
    """Return the WSGI callable that serves (and, if writable, writes) ``source`` (see Service)."""
    return Service(source, access_log, allowed_hosts)


# ---- The test double: a suite's reset, faults and request log, around the service ---------------
class Fault(NamedTuple):
    """What the next ``times`` requests of an account of ``method`` (None: any) and ``path`` meet:
    a ``delay``, then no answer (``drop``: under waitress; another server cannot close a
    connection unanswered, so it answers 500, and the request log says so) or ``status`` (429:
    with QStash's rate-limit headers of ``limit``, ``remaining`` and ``reset``, the daily limit's
    if ``daily``)."""

    status: Optional[int] = None
    times: int = 1
    daily: bool = False
    method: Optional[str] = None
    path: str = "*"  # * matches any characters (fnmatch)
    delay: float = 0
    drop: bool = False
    limit: Optional[int] = None  # 100 (burst), 500 (daily)
    remaining: int = 0
    reset: Optional[int] = None  # a Unix time: in a second (burst), at midnight UTC (daily)


#: The 503 to a request whose account was reset while it waited out a delay (a past test's).
RESET_WHILE_DELAYED = (
    "service unavailable: the account was reset while this request waited out its delay (a "
    "fault); nothing was done"
)
#: What the access log says of a request a fault dropped: no status was sent.
DROPPED = Answer("-", [], b"", "dropped: a fault")
_ERRORS = frozenset(status.value for status in HTTPStatus if status >= 400)
#: Each key of a fault: what its value must be, and what a 400 says it expects.
FAULT_KEYS: Dict[str, Tuple[Callable[[Any], bool], str]] = {
    "status": (
        lambda v: type(v) is int and v in _ERRORS,
        "an HTTP error status, such as 429 or 503",
    ),
    "times": (lambda v: store.is_whole(v) and v >= 1, "a whole number from 1"),
    "daily": (store.is_flag, "true or false"),
    "method": (lambda v: v in ("GET", "HEAD", "POST", "DELETE"), "GET, HEAD, POST or DELETE"),
    "path": (lambda v: store.is_text(v) and v[0] == "/", "a path, such as /v2/queues*"),
    "delay": (lambda v: type(v) in (int, float) and 0 <= v <= MAX_DELAY, "0 to 30 seconds"),
    "drop": (store.is_flag, "true or false"),
    "limit": (store.is_whole, "a whole number"),
    "remaining": (store.is_whole, "a whole number"),
    "reset": (store.is_whole, "a Unix time in seconds"),
}


def _fault(document: Dict[str, Any]) -> Fault:
    """The fault a POST to FAULTS_PATH asks for; BadRequest for a bad one."""
    for key in document:
        if key not in FAULT_KEYS:
            known = ", ".join(FAULT_KEYS)
            raise BadRequest("bad request: %s: not a fault's (%s)" % (json.dumps(key)[:60], known))
        _field(document, key, *FAULT_KEYS[key])
    fault = Fault(**document)
    if fault.daily:  # QStash's daily limit is a 429
        if fault.status not in (None, 429):
            why = "bad request: daily and status %d: a daily limit is a 429 (leave status out)"
            raise BadRequest(why % fault.status)
        fault = fault._replace(status=429)
    if fault.status is None and not (fault.drop or fault.delay):
        raise BadRequest("bad request: a fault needs a status, a delay or drop")
    return fault


def _fault_error(fault: Fault) -> HTTPError:
    """The error answer of a fault's ``status`` (429: with QStash's rate-limit headers)."""
    headers = []
    if fault.status == HTTPStatus.TOO_MANY_REQUESTS:
        now = int(time.time())
        prefix, limit, reset = "Burst-RateLimit-", 100, now + 1
        if fault.daily:
            prefix, limit, reset = "RateLimit-", 500, (now // 86400 + 1) * 86400
        headers = [
            (prefix + "Limit", str(limit if fault.limit is None else fault.limit)),
            (prefix + "Remaining", str(fault.remaining)),
            (prefix + "Reset", str(reset if fault.reset is None else fault.reset)),
        ]
    status = HTTPStatus(fault.status or HTTPStatus.INTERNAL_SERVER_ERROR)
    error = HTTPError(
        "%s: a fault this suite asked for (%s)" % (status.value, FAULTS_PATH), headers
    )
    error.status, error.why = status, "a fault"
    return error


class LogEntry(NamedTuple):
    """A request in an account's request log, and its size as the log counts it."""

    document: Dict[str, Any]
    size: int


class TestDouble:
    """A suite's test double, a WSGI middleware around a Service: ``POST RESET_PATH`` puts the
    token's account back as the server started; FAULTS_PATH takes the faults its next requests
    meet; REQUESTS_PATH answers what it asked.  Every other request goes to the service (a fault
    first), and is logged with the status its client saw.

    One account cannot starve another: it keeps at most MAX_FAULTS faults, and its log at most
    REQUEST_LOG entries and REQUEST_LOG_BYTES; at most ``delays`` requests (of all accounts) wait
    out a delay at once, so the other workers stay free: a delay past them is not waited (its
    request is answered at once, its fault's status or the service's).  HEALTH_PATH never meets
    the double.  ``_lock`` guards ``_faults``, ``_log`` and the late setting of ``initial`` (else
    set whole: here, or by the plugin's per-test reset), and is held for no I/O."""

    __test__ = False  # not a pytest class, whatever its name

    def __init__(self, service: Service, delays: int = SERVING_THREADS // 2) -> None:
        self.service = service
        # What a reset puts back: the version in service as the double is made (a preloading
        # server makes it before it forks: one start for every worker), else the first after.
        self.initial: Optional[store.Store] = service.source.current()
        self._lock = threading.Lock()
        self._faults: Dict[bytes, List[Fault]] = {}
        self._log: Dict[bytes, Tuple[collections.deque[LogEntry], List[int]]] = {}
        # The resets so far of all accounts at once, and of each (a delayed request's mark).
        self._resets: Dict[Optional[bytes], int] = collections.Counter()
        self._delays = threading.BoundedSemaphore(delays)  # 0: none (a server of one thread)

    def clear(self, digest: Optional[bytes] = None, log: bool = True) -> None:
        """Forget the faults of the account ``digest`` (None: of all), and if ``log`` (a reset)
        its log, and the requests that wait out a delay meanwhile (see _pass)."""
        with self._lock:
            self._resets[digest] += log
            for table in (self._faults, self._log) if log else (self._faults,):
                if digest is None:
                    table.clear()
                else:
                    table.pop(digest, None)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        route = path[:-1] if path.endswith("/") else path
        started = time.perf_counter()
        try:
            if route in DOUBLE_ROUTES:
                answer = self._answer(environ, route)
                return self.service.send(environ, start_response, answer, started)
            if route == HEALTH_PATH or _from_a_web_page(environ):
                return self.service(environ, start_response)
            digest = self.service.account(environ).token_sha256
        except HTTPError as error:
            if route in DOUBLE_ROUTES:
                return self.service.send(environ, start_response, error.render(), started)
            return self.service(environ, start_response)  # it answers as without the double
        return self._pass(environ, start_response, digest, started)

    def _answer(self, environ: WSGIEnvironment, path: str) -> Answer:
        """Answer the double's own route ``path`` (a key of DOUBLE_ROUTES)."""
        if _from_a_web_page(environ):
            raise Forbidden(FROM_A_PAGE, why="from a web page")
        method, methods = environ.get("REQUEST_METHOD", ""), DOUBLE_ROUTES[path]
        writable = self.service.source.writable or path != RESET_PATH  # the reset writes
        if method not in methods or not writable:
            raise MethodNotAllowed(methods, writable, method)
        account = self.service.account(environ)
        digest = account.token_sha256
        if path == RESET_PATH:  # the account as the server started: a test's fresh state
            source = self.service.source
            initial = self.initial or source.current()
            with self._lock:
                self.initial = initial = self.initial or initial
            answer = save(
                Asked(environ, source, account, None),
                "account",
                lambda account, now: store.put_back(account, now, initial),
            )
            self.clear(digest)  # once the account is put back
            return answer
        if path == REQUESTS_PATH:
            with self._lock:
                entries = [entry.document for entry in self._log.get(digest, ((), []))[0]]
            return _json_answer(HTTPStatus.OK, entries)
        if method == "DELETE":
            self.clear(digest, log=False)
            return _done("faults cleared")
        fault = _fault(_json_body(environ))
        with self._lock:
            faults = self._faults.setdefault(digest, [])
            if len(faults) >= MAX_FAULTS:
                raise BadRequest(
                    "bad request: an account has at most %d faults; DELETE %s clears them"
                    % (MAX_FAULTS, FAULTS_PATH)
                )
            faults.append(fault)
        return _done("fault added")

    def _pass(
        self, environ: WSGIEnvironment, start_response: StartResponse, digest: bytes, started: float
    ) -> Iterable[bytes]:
        """Have a request of the account ``digest`` meet its fault, if one matches, or the service;
        log what its client saw."""
        logged = _logged_body(environ)
        fault = self._take(digest, environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""))
        if fault is not None and fault.delay and self._delays.acquire(blocking=False):
            before = self._reset_mark(digest)
            try:
                time.sleep(fault.delay)
            finally:
                self._delays.release()
            if self._reset_mark(digest) != before:  # a past test's: it does nothing, logs nothing
                late = ServiceUnavailable(RESET_WHILE_DELAYED, why="reset while delayed").render()
                return self.service.send(environ, start_response, late, started)
        if fault is not None and fault.drop and _by_waitress(environ):
            self._note(digest, environ, logged, None)
            self.service.log(environ, DROPPED, 0, started)
            raise _drop_connection()
        if fault is not None and (fault.drop or fault.status is not None):
            error = _fault_error(fault)  # a drop another server cannot make: a 500 (see Fault)
            self._note(digest, environ, logged, error.status.value)
            return self.service.send(environ, start_response, error.render(), started)
        seen: List[int] = []

        def start(status_line: str, headers: Any, exc_info: Any = None) -> Any:
            seen.append(int(status_line[:3]))
            return start_response(status_line, headers, exc_info)

        body = self.service(environ, start)
        self._note(digest, environ, logged, seen[-1] if seen else None)
        return body

    def _reset_mark(self, digest: bytes) -> Tuple[int, int]:
        """How many resets the account ``digest`` has met: of all accounts, and of its own."""
        with self._lock:
            return self._resets[None], self._resets[digest]

    def _take(self, digest: bytes, method: str, path: str) -> Optional[Fault]:
        """The account's first fault that the request matches, used once."""
        with self._lock:
            faults = self._faults.get(digest, [])
            for i, fault in enumerate(faults):
                if fault.method in (None, method) and fnmatch.fnmatchcase(path, fault.path):
                    del faults[i]
                    if fault.times > 1:
                        faults.insert(i, fault._replace(times=fault.times - 1))
                    return fault
        return None

    def _note(
        self, digest: bytes, environ: WSGIEnvironment, body: LoggedBody, status: Optional[int]
    ) -> None:
        """Log a request of an account (``status`` None: dropped): no header, no query value."""
        query = environ.get("QUERY_STRING", "")
        path = _latin1(environ.get("PATH_INFO", "")).decode("utf-8", "replace")
        document = {
            "method": environ.get("REQUEST_METHOD"),
            "path": path,
            "query": sorted({field.partition("=")[0] for field in query.split("&") if field}),
            "body": body.document,
            "status": status,
        }
        entry = LogEntry(document, len(path) + len(query) + body.size)
        with self._lock:
            entries, total = self._log.setdefault(digest, (collections.deque(), [0]))
            entries.append(entry)
            total[0] += entry.size  # a one-item list: the deque's running size, in its tuple
            while len(entries) > REQUEST_LOG or total[0] > REQUEST_LOG_BYTES:
                total[0] -= entries.popleft().size


class LoggedBody(NamedTuple):
    """A write's body as the request log keeps it: its JSON object (None: none, or not one), and
    the bytes it came in."""

    document: Optional[Dict[str, Any]]
    size: int


def _logged_body(environ: WSGIEnvironment) -> LoggedBody:
    """A write's body for the request log, read here and given back to the service as it came;
    a read's body is never read, nor one the service refuses unread (over MAX_BODY)."""
    length = _content_length(environ)
    if environ.get("REQUEST_METHOD") in READS or length is None or not 0 < length <= MAX_BODY:
        return LoggedBody(None, 0)
    raw = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(raw)
    try:
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=store.unique_keys)
        store.encode(document)  # NaN, a lone surrogate: no answer can carry them (ValueError)
    except (ValueError, RecursionError, store.DataError):
        document = None
    return LoggedBody(document if type(document) is dict else None, len(raw))


#: The double's own routes, and the methods each answers.
DOUBLE_ROUTES: Dict[str, Tuple[str, ...]] = {
    RESET_PATH: ("POST",),
    FAULTS_PATH: ("POST", "DELETE"),
    REQUESTS_PATH: ("GET", "HEAD"),
}


# ---- The access log ------------------------------------------------------------------------------
class AccessLine(NamedTuple):
    """An answered request, as the access log writes it: formatted only when a handler writes it
    (QueueLog: on its own thread)."""

    environ: WSGIEnvironment
    answer: Answer
    size: int  # the body's bytes sent
    ms: float  # the time it took

    def __str__(self) -> str:
        """Its log entry but the time: who, the request line, status, size, time taken, and why."""
        why = "" if self.answer.why is None else " (%s)" % self.answer.why
        who, status = self.environ.get("REMOTE_ADDR") or "-", self.answer.status_line[:3]
        line = _request_line(self.environ)
        return '%s "%s" %s %d %.2fms%s' % (who, line, status, self.size, self.ms, why)


_PARAMETER_NAME = re.compile(r"[A-Za-z0-9_.%-]{1,24}")  # longer may be a token pasted as a name


def _request_line(environ: WSGIEnvironment) -> str:
    """'METHOD /path?query' for the log: printable, short, no query value (any may be a token)."""
    path = _printable((environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))[:1000])
    line = "%s %s" % (_printable(environ.get("REQUEST_METHOD", "")), path)
    query = environ.get("QUERY_STRING", "")
    if query:
        fields = query.split("&", LOGGED_QUERY_FIELDS)
        shown = [
            name + "=[redacted]" if equals and _PARAMETER_NAME.fullmatch(name) else "[redacted]"
            for name, equals, _ in (field.partition("=") for field in fields[:LOGGED_QUERY_FIELDS])
        ]
        if len(fields) > LOGGED_QUERY_FIELDS:
            shown.append("[%d more]" % (fields[-1].count("&") + 1))
        line += "?" + "&".join(shown)
    return line


def _printable(text: str) -> str:
    """Percent-encode all but printable ASCII: a log line stays one line ('%' escaped too).  A text
    of the characters quote() leaves as they are is itself (most paths; measured: the access log's
    cost, docs/performance.md)."""
    if _UNQUOTED.fullmatch(text):
        return text
    return quote(_latin1(text), safe=_SAFE)


_SAFE = "/!$&'()*+,;=:@-._~[]"
_UNQUOTED = re.compile(r"[A-Za-z0-9/!$&'()*+,;=:@._~\[\]-]*")  # what quote() keeps, with _SAFE


class _DescriptorWriter(logging.Handler):
    """QueueLog's listener's handler: the lines taken from ``queue`` written to its stream's
    descriptor once it is empty (a burst: one write), holding no lock while it writes (logging's
    exit takes every handler's lock, and the stream's buffer has one: a stream nobody reads blocks
    a write forever).  ``reached``: set when close()'s marker comes."""

    def __init__(self, stream: Any, queue: "queue.Queue[Any]") -> None:
        super().__init__()
        self.stream, self.queue = stream, queue
        self.lines: List[str] = []  # formatted, not yet written
        self.reached = threading.Event()
        # Each line stamped in UTC to the millisecond.
        self.formatter = logging.Formatter(
            "%(asctime)s.%(msecs)03dZ %(message)s", "%Y-%m-%dT%H:%M:%S"
        )
        self.formatter.converter = time.gmtime

    def handle(self, record: logging.LogRecord) -> bool:
        if record.msg is not self.reached:
            self.emit(record)  # only the listener's thread calls it: no lock
        if record.msg is self.reached or self.queue.empty():
            self.flush()
        if record.msg is self.reached:
            self.reached.set()
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + "\n")

    def flush(self) -> None:
        text, self.lines = "".join(self.lines), []
        try:
            os.write(self.stream.fileno(), text.encode("utf-8", "backslashreplace"))
        except (AttributeError, io.UnsupportedOperation):  # no descriptor (a StringIO)
            self.stream.write(text)
        except OSError:
            pass  # a stream that is gone: nothing to tell it


class _Listener(logging.handlers.QueueListener):
    """A QueueListener that lets the lines gather for ACCESS_LOG_PAUSE when it finds none: woken
    once for many requests, not once a request (which costs every request a thread switch)."""

    def dequeue(self, block: bool) -> Any:
        lines = typing.cast("queue.Queue[Any]", self.queue)
        if lines.empty():
            time.sleep(ACCESS_LOG_PAUSE)
        return lines.get(block)


class QueueLog(logging.handlers.QueueHandler):
    """The command line's log handler: a record goes on a bounded queue, unformatted, and a
    QueueListener's thread formats and writes it to ``stream``.  A stream that does not keep up
    holds back no request and no stop: past ACCESS_LOG_BACKLOG, records are dropped and counted,
    and the next record taken is preceded by a line that says how many."""

    def __init__(self, stream: Any) -> None:
        lines: "queue.Queue[Any]" = queue.Queue(ACCESS_LOG_BACKLOG)
        super().__init__(lines)
        self.dropped = 0  # not exact under races: a count for the operator, never a wait
        self._closed = False
        self._writer = _DescriptorWriter(stream, lines)
        self.listener = _Listener(lines, self._writer)
        self.listener.start()

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record  # formatted by the listener's thread, not the request's

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                said = "%d log lines dropped: the stream did not keep up" % self.dropped
                self.queue.put_nowait(logging.makeLogRecord({"msg": said, "levelno": 30}))
                self.dropped = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        """Write the records taken so far, waiting at most ACCESS_LOG_CLOSE_TIMEOUT for the
        stream; then stop the listener if it is free (else its daemon thread ends with us)."""
        if self._closed:  # logging closes it again at exit
            return
        self._closed = True
        with contextlib.suppress(queue.Full):
            marker = logging.makeLogRecord({"msg": self._writer.reached})
            typing.cast("queue.Queue[Any]", self.queue).put(
                marker, timeout=ACCESS_LOG_CLOSE_TIMEOUT
            )
        if self._writer.reached.wait(ACCESS_LOG_CLOSE_TIMEOUT):
            with contextlib.suppress(queue.Full):  # full again: its daemon thread ends with us
                self.listener.stop()
        super().close()


# ---- Settings and make_app -----------------------------------------------------------------------
class Setting(NamedTuple):
    """A setting's option and variable (either may be None), default, parser and help."""

    option: Optional[str]
    env: Optional[str]
    default: Optional[str]
    parse: Callable[[str], Any]
    help: str


def _token(text: str) -> str:
    if text.startswith("Bearer "):
        raise ValueError("drop the word 'Bearer': the variable holds the token alone")
    problem = store.check_token(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def _digits(text: str, most: int) -> bool:
    """Whether ``text`` is a whole number of at most ``most`` ASCII digits."""
    return text.isascii() and text.isdigit() and len(text) <= most


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        expected = "expected a whole number from %d to %d" % (low, high)
        if not _digits(text, len(str(high))) or not low <= int(text) <= high:
            raise ValueError(expected)
        return int(text)

    return parse


#: The units a size may end with, and their shifts (``--max-size 64M``).
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30}
_LARGEST_SIZE = 1 << 32


def _size(text: str) -> int:
    expected = (
        "expected a size in bytes from 1 to 4G, such as 64M (K, M or G may follow the number)"
    )
    digits, unit = text, ""
    if text[-1:].isalpha():
        digits, unit = text[:-1], text[-1].upper()
    if unit not in _UNITS or not _digits(digits, 10):
        raise ValueError(expected)
    size = int(digits) << _UNITS[unit]
    if not 1 <= size <= _LARGEST_SIZE:
        raise ValueError(expected)
    return size


def _seconds(text: str) -> float:
    expected = "expected a number of seconds from 0.01 to 3600"
    if not _digits(text.replace(".", "", 1), 19) or not 0.01 <= float(text) <= 3600:
        raise ValueError(expected)
    return float(text)


def _hosts(text: str) -> Tuple[str, ...]:
    expected = "expected host names separated by commas, such as qstash.internal,dev.example"
    names = tuple(name.strip().lower() for name in text.split(","))
    for name in names:  # a name alone: a Host header is compared without its port
        if not name or not (name.isascii() and name.isprintable()) or {" ", ":", "/"} & set(name):
            raise ValueError(expected)
    return names


def _switch(text: str) -> bool:
    if text.lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ValueError("expected 1 or 0 (true or false)")
    return text.lower() in ("1", "true", "yes", "on")


#: Every setting, read in one place (read_settings): the command line wins over the
#: environment, then the default.  Those without an option here are switches of the command line
#: (--writable, --reset: _add_switches) or the environment's alone (QSTASH_TOKEN).
SETTINGS: Dict[str, Setting] = {
    "data": Setting("--data", "QSTASH_LISTS_DATA", "data.json", str, "the data file"),
    "token": Setting(
        None,
        "QSTASH_TOKEN",
        None,
        _token,
        "a one-account file's token (unset: the dev token, loopback)",
    ),
    "writable": Setting(
        None, "QSTASH_LISTS_WRITABLE", "0", _switch, "1: take QStash's writes, saved to the file"
    ),
    "reset": Setting(
        None,
        "QSTASH_LISTS_RESET",
        "0",
        _switch,
        "1: with writes, POST %s puts the token's account back as the server started" % RESET_PATH,
    ),
    "max_size": Setting(
        "--max-size", "QSTASH_LISTS_MAX_SIZE", "64M", _size, "the largest data file (64M, 2G, ...)"
    ),
    "interval": Setting(
        "--interval",
        "QSTASH_LISTS_INTERVAL",
        "1",
        _seconds,
        "seconds between looks at the data file",
    ),
    "stop_timeout": Setting(
        "--stop-timeout",
        "QSTASH_LISTS_STOP_TIMEOUT",
        "10",
        _seconds,
        "seconds the answers in flight (--run: the command) may take to finish after SIGTERM",
    ),
    "allowed_hosts": Setting(
        "--allowed-hosts",
        "QSTASH_LISTS_ALLOWED_HOSTS",
        None,
        _hosts,
        "names, besides IP addresses and localhost, by which the dev token may reach it "
        "(comma-separated)",
    ),
    "host": Setting("--host", None, "127.0.0.1", str, "address to listen on"),
    "port": Setting("--port", None, "8080", _whole(0, 65535), "port; 0 picks a free one"),
    "threads": Setting("--threads", None, "8", _whole(1, MAX_THREADS), "waitress worker threads"),
}


class ConfigError(Exception):
    """A setting that cannot be used: one line that names it and says what it expects."""


def read_settings(
    environ: Mapping[str, str], args: Optional[argparse.Namespace] = None
) -> Dict[str, Any]:
    """Every setting (``args``: the command line's); ConfigError names a bad one, not its value."""
    settings = {}
    for key, setting in SETTINGS.items():
        text, source = getattr(args, key, None), setting.option
        if text is None and setting.env is not None and setting.env in environ:
            text, source = environ[setting.env], setting.env
        text = setting.default if text is None else text
        try:
            if text == "":
                raise ValueError("empty; give a value, or unset it for the default")
            settings[key] = None if text is None else setting.parse(text)
        except ValueError as exc:
            raise ConfigError("%s: %s" % (source, exc)) from None
    if settings["reset"] and not settings["writable"] and getattr(args, "run", None) is None:
        raise ConfigError(
            "--reset (QSTASH_LISTS_RESET) needs writes: add --writable (or QSTASH_LISTS_WRITABLE=1)"
        )
    return settings


#: Load a data file and keep it fresh: ``open_data(path, token, interval, fallback=, max_size=,
#: required=, writable=)`` (see store.DataFile and store.parse).
open_data = store.DataFile


def make_app(environ: Optional[Mapping[str, str]] = None) -> WSGIApplication:
    """The factory for servers: the app from the environment (SETTINGS' variables), never with the
    dev token.  A bad setting, or a one-account file without QSTASH_TOKEN: a line on stderr and
    SystemExit(BOOT_FAILED) (in a uWSGI worker that loads the app itself, UWSGI_APP_FAILED); a bad
    data file: 503s."""
    uwsgi = sys.modules.get("uwsgi")
    previous: Any = getattr(uwsgi, "post_fork_hook", None)
    # uWSGI forks its workers from C, where no os.register_at_fork hook runs: its own hook.
    if uwsgi is not None:

        def hook() -> None:
            store.after_fork()
            previous()  # the hook that was there before

        if previous is not store.after_fork:  # once
            uwsgi.post_fork_hook = store.after_fork if previous is None else hook  # type: ignore[attr-defined]
    # uWSGI sets its handlers from C, out of Python's sight: SIGHUP there is uWSGI's to handle.
    elif (
        hasattr(signal, "SIGHUP")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    ):
        signal.signal(signal.SIGHUP, _wake_all)
    try:
        settings = read_settings(os.environ if environ is None else environ)
        lazy = _loads_in_each_worker() if settings["reset"] else None
        if lazy is not None:  # a recycled worker would reset to the file as it found it
            raise ConfigError(
                "QSTASH_LISTS_RESET: %s loads the app in each worker, each with a start of its "
                "own: %s" % lazy
            )
        data = _data_file(settings, None, required=True)
    except (ConfigError, store.TokenMissing) as exc:
        sys.stderr.write("%s\n" % exc)  # one write: each failing worker's line is whole
        lazy_uwsgi = uwsgi is not None and uwsgi.worker_id()
        raise SystemExit(UWSGI_APP_FAILED if lazy_uwsgi else BOOT_FAILED) from None
    except store.DataError:
        data = _data_file(settings, None, required=False)  # logged; 503s until it is good
    except KeyboardInterrupt:  # Ctrl-C during the first load: a stop, not a traceback
        raise SystemExit(130) from None
    service = create_app(data, allowed_hosts=settings["allowed_hosts"] or ())
    return TestDouble(service) if settings["reset"] else service


def _loads_in_each_worker() -> Optional[Tuple[str, str]]:
    """The server, and its fix, where each worker loads the app after the fork (so that no start is
    common to them); None where the app is loaded once, before any fork."""
    uwsgi = sys.modules.get("uwsgi")
    if uwsgi is not None and {"lazy", "lazy-apps"} & set(uwsgi.opt):
        return "uWSGI's --lazy-apps", "drop it"
    gunicorn = sys.modules.get("gunicorn.workers.base")
    # A gunicorn worker sets its handlers before it loads the app; a preloading master has none yet.
    handler = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if gunicorn is not None and isinstance(handler, gunicorn.Worker):
        return "gunicorn without --preload", "add --preload"
    return None


def _data_file(
    settings: Mapping[str, Any], fallback: Optional[str], required: bool
) -> store.DataFile:
    """The data file of ``settings``."""
    return open_data(
        settings["data"],
        settings["token"],
        settings["interval"],
        fallback=fallback,
        max_size=settings["max_size"],
        required=required,
        writable=settings["writable"],
    )


# ---- The waitress adapter: all that knows waitress -----------------------------------------------
#: The servers whose wsgi.file_wrapper keeps a body by reference until it is read (waitress: no
#: copy), by the wrapper's module; others read a BytesIO back in 4-8 KB writes, so they get the
#: bytes whole (benchmark: table).  The same module says a drop fault can close the connection.
BY_REFERENCE = ("waitress.",)


def _by_waitress(environ: WSGIEnvironment) -> bool:
    """Tell whether waitress serves this request (its wsgi.file_wrapper's module)."""
    file_wrapper = environ.get("wsgi.file_wrapper")
    return str(getattr(file_wrapper, "__module__", "")).startswith(BY_REFERENCE)


def _body_iterable(environ: WSGIEnvironment, data: bytes) -> Iterable[bytes]:
    """The body as PEP 3333 takes it: by reference where the server keeps it so (no copy waits)."""
    if data and _by_waitress(environ):
        return environ["wsgi.file_wrapper"](io.BytesIO(data))  # type: ignore[no-any-return]
    return [data] if data else []


def _urls(server: Any) -> List[str]:
    """The URL of each address a waitress server listens on: "localhost" may be two (IPv4 and
    IPv6), on ports of their own where any was asked for."""
    listening = getattr(server, "effective_listen", None) or [
        (server.effective_host, server.effective_port)
    ]
    return ["http://%s:%s" % ("[%s]" % h if ":" in h else h, p) for h, p in listening]


def _drop_connection() -> Exception:
    """What to raise for waitress to close the connection unanswered (waitress.channel's
    documented way for an app to say its client is gone)."""
    from waitress.channel import ClientDisconnected

    return typing.cast(Exception, ClientDisconnected())


class Stopper:
    """What stops run(): a pipe whose read end, in the server's socket map (see watch), ends the
    serving loop once a byte comes; stop() writes that byte, from any thread or a signal handler
    (a write to a pipe takes no lock; an Event's set() takes one)."""

    def __init__(self) -> None:
        self._read_end, self._write_end = os.pipe()
        os.set_blocking(self._write_end, False)
        self.dispatcher: Any = None
        # The write end lives as long as this object: a signal after close() finds no reader
        # (an error, ignored), never a descriptor the process has reused meanwhile.
        weakref.finalize(self, os.close, self._write_end)

    def watch(self, socket_map: Dict[int, Any]) -> None:
        """Put the read end in ``socket_map``: a byte written before the loop stops it at once."""
        from waitress import wasyncore

        class Dispatcher(wasyncore.file_dispatcher):  # type: ignore[misc]
            def handle_read(self) -> None:
                raise wasyncore.ExitNow  # the loop lets it through (wasyncore.read)

            def writable(self) -> bool:
                return False

        self.dispatcher = Dispatcher(self._read_end, socket_map)  # it reads a copy of the fd

    def stop(self) -> None:
        """Have run() stop serving."""
        with contextlib.suppress(OSError):  # full: a byte is there already; closed: it is over
            os.write(self._write_end, b"\0")

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
        os.close(self._read_end)


def _close_idle(socket_map: Dict[int, Any]) -> bool:
    """Have each connection that is between requests close (nothing in flight to finish); tell
    whether any connection is left.  The one place that reads attributes of waitress's channels
    that are not its documented interface (``request``, ``requests``, ``total_outbufs_len``,
    ``will_close``): tests/test_server.py runs it on the waitress installed, and .ci/run on the
    oldest release setup.cfg allows and the newest."""
    from waitress.channel import HTTPChannel

    channels = [d for d in socket_map.values() if isinstance(d, HTTPChannel)]
    for channel in channels:
        if not (channel.request or channel.requests or channel.total_outbufs_len):
            channel.will_close = True
    return bool(channels)


def run(server: Any, socket_map: Dict[int, Any], stop_timeout: float, stopper: Stopper) -> None:
    """Serve with waitress's own loop until ``stopper`` says stop, then refuse new connections,
    close idle ones, let the answers in flight finish for at most ``stop_timeout`` seconds, and
    close every socket."""
    from waitress import wasyncore
    from waitress.server import BaseWSGIServer

    with contextlib.suppress(wasyncore.ExitNow):
        wasyncore.loop(timeout=server.adj.asyncore_loop_timeout, map=socket_map, use_poll=True)
    stopper.close()
    deadline = time.monotonic() + stop_timeout
    for listener in [d for d in socket_map.values() if isinstance(d, BaseWSGIServer)]:
        # Not BaseWSGIServer.close: the threads still need the trigger.
        wasyncore.dispatcher.close(listener)
    while time.monotonic() < deadline and _close_idle(socket_map):
        wasyncore.loop(timeout=0.1, map=socket_map, use_poll=True, count=1)
    # The rest are cut short.
    server.task_dispatcher.shutdown(timeout=max(0.0, deadline - time.monotonic()))
    for dispatcher in list(socket_map.values()):  # the trigger, and what the deadline cut short
        dispatcher.close()


# ---- The command line and serving ----------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None, environ: Optional[Mapping[str, str]] = None) -> int:
    """Run the command line: serve, ``--check`` a file, ``--run`` a command, or ``--example``."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.example:
        # In the writer's layout: the first write changes only what it changes (a diff).
        example = store.parse(store.EXAMPLE.encode(), "the example", DEV_TOKEN).lines
        return _to_stdout(lambda: sys.stdout.buffer.write(example))
    try:
        settings = read_settings(os.environ if environ is None else environ, args)
    except ConfigError as exc:
        return _fail([str(exc)])
    if args.run is not None:
        return _run_command(settings, args, parser.prog)
    # Before the first load: none kills half-way.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    if signal.SIGINT in _signals:  # Ctrl-C while it started
        return 128 + signal.SIGINT
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _wake_all)
    if args.check:
        return _check(settings, parser.prog)
    return _start(settings, args.quiet, parser.prog)


def _check(settings: Mapping[str, Any], prog: str) -> int:
    """--check: one read and one parse (no reloader); exit 0, or 2 with the faults."""
    path = settings["data"]
    try:
        loaded = store.load(path, settings["token"], DEV_TOKEN, settings["max_size"])
    except store.DataError as exc:
        return _not_loaded(exc, path, prog)
    done = _to_stdout(lambda: print("%s: OK: %s" % (path, loaded.summary())))
    for line in loaded.warnings(path):
        print(line, file=sys.stderr)
    return done


def _to_stdout(write: Callable[[], object]) -> int:
    """Run ``write`` (to stdout) and flush it: 0, also where the reader is gone (``| head`` has
    what it wanted); 2 with one line where stdout takes nothing (a full disk)."""
    try:
        write()
        sys.stdout.flush()
        return 0
    except OSError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left at exit
        if isinstance(exc, BrokenPipeError):
            return 0
        return _fail(["cannot write to stdout: %s" % (exc.strerror or exc)])


def _fallback(host: str) -> Optional[str]:
    """The token of a one-account file without QSTASH_TOKEN: the dev token, on loopback only."""
    return DEV_TOKEN if is_loopback(host) else None


def _start(settings: Mapping[str, Any], quiet: bool, prog: str) -> int:
    """Load the data file and serve it; exit 2 with the faults of one that does not load."""
    fallback = _fallback(settings["host"])
    log = _log_to_stderr(quiet)
    try:
        data = _data_file(settings, fallback, required=True)
    except store.DataError as exc:
        return _not_loaded(exc, settings["data"], prog)
    try:
        return _serve(settings, data, not quiet)
    finally:
        data.close()
        log.close()  # the lines of the requests answered, unless the stream does not take them


def _log_to_stderr(quiet: bool) -> QueueLog:
    """Send every line the process logs through a QueueLog on stderr (none waits for it), in UTC;
    ``quiet``: warnings and errors only (no line a request, reload or reset)."""
    log = QueueLog(sys.stderr)
    # The command owns its process: its records carry no caller, thread or process (the logging
    # HOWTO's "Optimization"): a request's line pays for none of them.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # force: a second main() in one process (a test's) replaces the first's closed handler.
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, handlers=[log], force=True
    )
    # waitress's "Task queue depth" warning, for each request that waits for a thread: a burst
    # would flood the log, so it is dropped; but its loop thread, which logs it, first hands the
    # interpreter to the workers, as writing the line would (docs/performance.md).
    logging.getLogger("waitress.queue").addFilter(_yield_to_workers)
    return log


def _yield_to_workers(record: logging.LogRecord) -> bool:
    time.sleep(0)  # the GIL to the workers that wait for it
    return False


def _not_loaded(exc: store.DataError, path: str, prog: str) -> int:
    """Say why the data file ``path`` does not load, and how to start; exit status 2."""
    if isinstance(exc, store.TokenMissing):
        return _fail(exc.problems + ["The built-in dev token serves only a loopback address."])
    try:
        os.lstat(path)
    except FileNotFoundError:
        example = "to start from the example: %s --example > %s" % (prog, path)
        return _fail(["%s: no such file; %s" % (os.path.abspath(path), example)])
    except OSError:
        pass  # a folder it may not enter, say: the problem names it
    return _fail(exc.problems)


def _serve(settings: Mapping[str, Any], data: store.DataFile, access_log: bool) -> int:
    """Serve ``data`` under waitress until SIGTERM or Ctrl-C."""
    try:
        from waitress import create_server
    except ImportError:
        return _fail(["waitress is not installed: python -m pip install waitress"])
    host, port = settings["host"], settings["port"]
    # The stop's own handlers before anything of waitress's is made: a signal that raised
    # SystemExit (see _stop) inside one of its constructors left a half-made object, whose
    # finaliser printed a traceback at exit.
    stopper = Stopper()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: stopper.stop())  # it takes no lock
    socket_map: Dict[int, Any] = {}  # ours, one socket or several: run() sees every connection
    stopper.watch(socket_map)
    service = create_app(data, access_log, settings["allowed_hosts"] or ())
    wsgi = TestDouble(service, settings["threads"] // 2) if settings["reset"] else service
    try:
        server = create_server(
            wsgi,
            map=socket_map,
            host=host,
            port=port,
            threads=settings["threads"],
            **WAITRESS_SETTINGS,
        )
    except (OSError, ValueError) as exc:
        stopper.close()
        return _not_listening(host, port, exc)
    urls = _urls(server)
    loaded = typing.cast(store.Store, data.current())  # open_data raised otherwise
    _to_stdout_aside("\n".join(_banner(settings, loaded, urls, data.writable)) + "\n")
    run(server, socket_map, settings["stop_timeout"], stopper)
    return 0


def _to_stdout_aside(text: str) -> None:
    """Write ``text`` to stdout's descriptor from a thread of its own (no lock taken): a stdout
    that takes nothing (a full pipe, a full disk: said once) holds back neither serving nor the
    stop."""
    data = text.encode("utf-8", "surrogateescape")  # a path as the system gave it

    def write() -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(sys.stdout.fileno(), view) :]
        except (OSError, ValueError) as exc:  # (ValueError: no descriptor)
            logger.warning("stdout takes nothing (%s): the banner is not shown", exc)

    threading.Thread(target=write, name="qstash-lists banner", daemon=True).start()


def _not_listening(host: str, port: int, exc: Exception) -> int:
    """Say why the server cannot listen (the port taken or not allowed, or no such address here:
    waitress's ValueError for a name it cannot resolve), and the fix; exit status 2."""
    fix = "stop what uses it, or choose another port (--port 0 picks a free one)"
    if isinstance(exc, ValueError) or getattr(exc, "errno", None) == errno.EADDRNOTAVAIL:
        fix = "give --host an address of this machine, such as 127.0.0.1"
    return _fail(["cannot listen on %s port %d: %s; %s" % (host, port, exc, fix)])


def _banner(
    settings: Mapping[str, Any], loaded: store.Store, urls: List[str], writable: bool
) -> List[str]:
    """What to paste where the SDKs run (lines a shell takes as they are, zsh too: no quote,
    parenthesis or semicolon in a comment), and whether the JS SDK's dev mode finds this server."""
    serving = "%s (%s) on %s" % (settings["data"], loaded.summary(), " ".join(urls))
    if writable:
        serving += " (writable)"
    lines = ["qstash-lists %s serving %s" % (__version__, serving), "export QSTASH_URL=" + urls[0]]
    if not loaded.single_account:
        lines.append("# QSTASH_TOKEN: accounts from the data file, export the token of yours")
    elif loaded.fallback_used:
        lines.append("export QSTASH_TOKEN=" + DEV_TOKEN)
        lines.append("# the built-in dev token, as QSTASH_TOKEN is not set: loopback only")
        # Published constants, as `qstash dev` prints them.
        if loaded.accounts[0].signing_keys is None:
            lines.append(
                "export QSTASH_CURRENT_SIGNING_KEY=%s\nexport QSTASH_NEXT_SIGNING_KEY=%s"
                % DEV_SIGNING_KEYS
            )
    else:
        lines.append("# QSTASH_TOKEN: the one set in the environment of this server, not shown")
    lines.append("# the JS SDK dev mode, QSTASH_DEV=1: " + _dev_mode(loaded, urls))
    return lines


def _dev_mode(loaded: store.Store, urls: List[str]) -> str:
    """Whether the JS SDK's QSTASH_DEV=1, which asks 127.0.0.1:8080 (or QSTASH_DEV_PORT) for the
    dev token's signing keys, finds this server (listening at ``urls``), or why not."""
    here = ("http://127.0.0.1:", "http://0.0.0.0:")  # 0.0.0.0: every IPv4 address, 127.0.0.1 too
    ports = [url.rpartition(":")[2] for url in urls if url.startswith(here)]
    if not ports:
        return "this server does not listen on 127.0.0.1"
    account = loaded.find(DEV_TOKEN.encode())
    if account is None:
        return "no account here has the dev token"
    if account.signing_keys not in (None, DEV_SIGNING_KEYS):
        return "the account of the dev token has signingKeys, not the dev keys the SDK checks for"
    if ports[0] != "8080":
        return "set QSTASH_DEV_PORT=%s where the SDK runs" % ports[0]
    return "finds this server"


@contextlib.contextmanager
def serving(
    wsgi: WSGIApplication,
    host: str = "127.0.0.1",
    port: int = 0,
    threads: int = SERVING_THREADS,
) -> Iterator[str]:
    """Serve ``wsgi`` (a Service, or a TestDouble around one) under waitress in a daemon thread of
    this process (on a free port unless told) until the block ends, then stop it as run() does;
    yield its URL.  It sets no signal handler and never exits the process (nor keeps it alive)."""
    from waitress import create_server

    socket_map: Dict[int, Any] = {}
    server = create_server(
        wsgi,
        map=socket_map,
        host=host,
        port=port,
        threads=threads,
        **WAITRESS_SETTINGS,
    )
    stopper = Stopper()
    stopper.watch(socket_map)
    args = (server, socket_map, SERVING_STOP_TIMEOUT, stopper)
    thread = threading.Thread(target=run, args=args, name="qstash-lists server", daemon=True)
    thread.start()
    try:
        yield _urls(server)[0]
    finally:
        stopper.stop()
        thread.join()


def _stop(signum: int, frame: Any) -> None:
    # Before serving, nothing is in flight: stop now, on every way out (while serving, see run).
    raise SystemExit(0)


def _wake_all(signum: int, frame: Any) -> None:
    store.wake_all()  # SIGHUP: every reloader looks now (it takes no lock)


def is_loopback(host: str) -> bool:
    """Tell whether ``host`` names only this machine's loopback interface."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _utc(created: float) -> str:
    return "%s.%03dZ" % (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)),
        int(created % 1 * 1000),
    )


def _prog() -> str:
    """The command as it was run (console script, -m or script), for --help and hints."""
    if __name__ != "__main__":
        return "qstash-lists"
    if __spec__ is not None:
        return "python -m " + __spec__.name
    return "python " + os.path.basename(sys.argv[0])


def _epilog() -> str:
    """--help's last part: each environment variable, and the signals."""
    lines = ["environment (the command line wins; nothing else is read):"]
    for setting in SETTINGS.values():
        if setting.env is None:
            continue
        if setting.option:
            where = "for " + setting.option
        else:
            where = "default: " + str(setting.default)
        lines.append("  %s: %s (%s)" % (setting.env, setting.help, where))
    lines.append(
        "signals: SIGHUP makes the server look at the data file at once; SIGTERM or Ctrl-C stops "
        "it (--run: SIGHUP too; the command's group, SIGKILL after --stop-timeout)."
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve QStash's URL groups and queues (GET /v2/topics, /v2/queues and one of "
        "each by name; with --writable, their writes too) from a JSON data file.",
        epilog=_epilog(),
    )
    for key, setting in SETTINGS.items():
        if not setting.option:
            continue
        default = setting.default
        if setting.env:
            default = "$%s, else %s" % (setting.env, setting.default)
        parser.add_argument(
            setting.option,
            dest=key,
            metavar=key.upper(),
            help="%s (default: %s)" % (setting.help, default),
        )
    _add_switches(parser)
    return parser


def _add_switches(parser: argparse.ArgumentParser) -> None:
    """The options that are switches and modes, not settings."""
    parser.add_argument(
        "--writable",
        action="store_const",
        const="1",
        help="take QStash's writes of URL groups and queues, saved to the data file (default: "
        "read-only, or $QSTASH_LISTS_WRITABLE)",
    )
    parser.add_argument(
        "--reset",
        action="store_const",
        const="1",
        help="with --writable: POST %s puts the token's account back as the server started, "
        "and a suite asks for QStash's bad days (docs/http.md) (default: off, or "
        "$QSTASH_LISTS_RESET)" % RESET_PATH,
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no line a request, reload or reset: only problems (default: log each)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="validate the data file, print a summary and exit"
    )
    mode.add_argument("--example", action="store_true", help="print an example data file and exit")
    mode.add_argument(
        "--run",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="serve a copy of the data file (writable, --reset) on a free port, run COMMAND with "
        "QSTASH_URL and QSTASH_TOKEN set, stop, and exit with its status (last on the line)",
    )
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)


#: The command line's own options, which --run hands to the command when they follow it.
_OPTIONS = frozenset(
    ["--writable", "--reset", "--quiet", "--check", "--example"]
    + [setting.option for setting in SETTINGS.values() if setting.option]
)


def _fail(lines: Sequence[str]) -> int:
    print("\n".join(lines), file=sys.stderr)
    return 2


# ---- --run: the server around a test command ---------------------------------------------------
#: The signals that stop --run (SIGHUP: a closed terminal; not under nohup, which ignores it), and
#: those received: before the command runs, noted (it never runs: exit 128 + n); once it runs,
#: passed on to its process group (``_group``), which is sent SIGKILL if it outlives
#: --stop-timeout.  A handler takes no lock: it appends, or signals.
_STOPS = [signal.SIGTERM, signal.SIGINT] + [signal.SIGHUP] * hasattr(signal, "SIGHUP")
_group: List[int] = []

#: What --run starts the command with (a process of one thread, _STOPS held): it makes its own
#: process group, tells the watcher (the pipe ``argv[1]``) before the command can run, takes the
#: terminal's foreground if --run has it (so /dev/tty works: jest --watch, vitest), lets a stop held
#: meanwhile end it (no traceback), then becomes the command.
_LAUNCH = """
import os, signal, sys
if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setpgid(0, 0)
os.write(int(sys.argv[1]), b"%d\\n" % os.getpid())
os.close(int(sys.argv[1]))
try:
    tty = os.open("/dev/tty", os.O_RDWR)
except OSError:
    tty = None
if tty is not None and os.tcgetpgrp(tty) == os.getpgid(os.getppid()):
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    os.tcsetpgrp(tty, os.getpid())
if tty is not None:
    os.close(tty)
signal.signal(signal.SIGTTOU, signal.SIG_DFL)  # --run's own choice, not the command's
for name in ("SIGPIPE", "SIGXFSZ"):  # ignored by a Python (this one), not by a shell's command
    signal.signal(getattr(signal, name), signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
try:
    os.execvp(sys.argv[3], sys.argv[3:])
except OSError as exc:
    print("%s --run: cannot run %s: %s" % (sys.argv[2], sys.argv[3], exc.strerror), file=sys.stderr)
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""


def _run_command(settings: Mapping[str, Any], args: argparse.Namespace, prog: str) -> int:
    """--run: serve a copy of the data file (writable, with --reset) in this process, on a free
    port unless --port says, run the command with QSTASH_URL and QSTASH_TOKEN set, stop, and exit
    with the command's status."""
    for signum in _STOPS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _pass_on)
    if not args.run:
        return _fail(["--run: give the command after it, such as: %s --run npm test" % prog])
    ours = [word for word in args.run[1:] if word in _OPTIONS]
    if ours:
        print(
            "%s --run: %s goes to the command; put it before --run" % (prog, ours[0]),
            file=sys.stderr,
        )
    path = settings["data"]
    fallback = _fallback(settings["host"])
    try:  # the faults name the user's file, not the copy
        loaded = store.load(path, settings["token"], fallback, settings["max_size"])
        token = clients_token(loaded, settings["token"], path)
    except store.DataError as exc:
        return _not_loaded(exc, path, prog)
    except ValueError as exc:
        return _fail([str(exc)])
    host, port = settings["host"], 0 if args.port is None else settings["port"]
    grace = settings["stop_timeout"]
    with contextlib.ExitStack() as stack:  # each step's undoing, last first
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="qstash-lists-"))
        watcher = _watcher(folder, grace, prog)  # while this process has no thread
        stack.callback(_release, watcher)
        stack.callback(_log_to_stderr(args.quiet).close)
        copy = os.path.join(folder, os.path.basename(path))
        shutil.copyfile(path, copy)
        copied = dict(settings, data=copy, writable=True)
        data = _data_file(copied, fallback, required=True)
        stack.callback(data.close)
        try:
            double = TestDouble(create_app(data, access_log=False), settings["threads"] // 2)
            url = stack.enter_context(serving(double, host, port, settings["threads"]))
        except (OSError, ValueError) as exc:
            return _not_listening(host, port, exc)
        if not args.quiet:
            logger.info("serving a copy of %s on %s for: %s", path, url, " ".join(args.run))
        env = dict(os.environ, QSTASH_URL=url, QSTASH_TOKEN=token)
        env.pop("QSTASH_DEV", None)  # the JS SDK's dev mode would ask another server
        return _child(args.run, env, prog, watcher, grace)


def clients_token(loaded: store.Store, token: Optional[str], source: str) -> str:
    """The token clients of the file ``source`` send (--run's, and the test double's): a
    one-account file's (``token``, else the dev token), or the first account's in clear."""
    if loaded.single_account:
        return token or DEV_TOKEN
    for account in loaded.accounts:
        if account.credential is not None and account.credential[0] == "token":
            return account.credential[1]
    raise ValueError(
        "%s: its clients are given the first account's 'token', and none has one: give one "
        "account its token in clear" % source
    )


def _watcher(folder: str, grace: float, prog: str) -> int:
    """Fork --run's watcher (in a process with no thread: a fork copies none) and return the write
    end of its pipe, which the command's launcher (_LAUNCH) gives its process group, and then this
    process "done".  A pipe that ends without "done" (this process killed, whose own clean-up never
    runs) has it end that group (_end_group) and remove ``folder``, the served copy's."""
    read, write = os.pipe()
    forked = os.fork()
    if forked:
        os.close(read)
        os.waitpid(forked, 0)  # gone at once: the watcher, its child, is init's to reap
        return write
    try:  # out of the terminal's session, holding only its stderr (the one line it may say)
        os.close(write)
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1):
            os.dup2(null, stream)
        with os.fdopen(read) as pipe:
            said = pipe.read().split()
        if said[-1:] != ["done"]:
            with contextlib.suppress(ValueError, IndexError, OSError):
                _end_group(int(said[0]), grace, prog)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        os._exit(0)


def _release(watcher: int) -> None:
    """Tell --run's watcher that it has nothing to do, and let it go."""
    with contextlib.suppress(OSError):
        os.write(watcher, b"done\n")
    os.close(watcher)


def _end_group(group: int, grace: float, prog: str) -> None:
    """Send the process group ``group`` SIGTERM, and SIGKILL if it outlives ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            time.sleep(0.05)
            os.killpg(group, 0)  # ProcessLookupError once the group is empty
        os.killpg(group, signal.SIGKILL)
        _killed(prog, grace)


def _killed(prog: str, grace: float) -> None:
    said = "%s --run: the command's processes outlived SIGTERM by %g s (--stop-timeout): SIGKILL\n"
    with contextlib.suppress(OSError):
        os.write(2, (said % (prog, grace)).encode())  # one write (no lock): a whole line


def _child(command: List[str], env: Dict[str, str], prog: str, watcher: int, grace: float) -> int:
    """Run ``command`` in a process group of its own (known to ``watcher`` before it runs; in the
    terminal's foreground if this process is) to its end and return its exit status (a signal's
    as a shell gives it: 128 + its number; 127: not found; 126: not runnable).  A stop signal goes
    to its whole group; what its group leaves running when it ends is ended too (_end_group)."""
    if _signals:  # a stop before it runs
        return 128 + _signals[0]
    tty = _foreground()
    launch = [sys.executable, "-c", _LAUNCH, str(watcher), prog] + command
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)  # held in the launcher until it is ready
    try:
        child = subprocess.Popen(launch, env=env, pass_fds=[watcher])
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    try:
        _group.append(child.pid)
        for pending in _signals[:1]:  # while it started
            _send(child.pid, pending)
        status = _wait(child, grace, prog)
    finally:
        del _group[:]  # reaped: its number is free
        if tty is not None:  # the terminal back (ignoring SIGTTOU: a background group's call)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, os.getpgrp())
            os.close(tty)
    # Its group outlives it while a member runs (so its number is not reused): end them.
    if status == -signal.SIGKILL:  # as _wait may have sent it to the group
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
    else:
        _end_group(child.pid, grace, prog)
    return status if status >= 0 else 128 - status


def _foreground() -> Optional[int]:
    """The terminal's descriptor if this process's group is its foreground (the command's will
    be), with SIGTTOU ignored to take it back; else None."""
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:  # no terminal
        return None
    if os.tcgetpgrp(tty) != os.getpgrp():
        os.close(tty)
        return None
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # this process owns it (--run)
    return tty


def _wait(child: subprocess.Popen[bytes], grace: float, prog: str) -> int:
    """``child``'s exit status; SIGKILL to its group if it outlives a stop by ``grace`` seconds."""
    deadline = math.inf
    while True:
        try:
            return child.wait(timeout=0.1)  # a stop meanwhile starts the grace period
        except subprocess.TimeoutExpired:
            pass
        if _signals and deadline == math.inf:
            deadline = time.monotonic() + grace
        if time.monotonic() > deadline:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
            _killed(prog, grace)
            deadline = -math.inf  # once


def _pass_on(signum: int, frame: Any) -> None:
    """--run's handler: note the stop; once the command runs, send it to its group."""
    _signals.append(signum)
    for group in _group:
        _send(group, signum)  # no lock taken: a signal handler's work


def _send(group: int, signum: int) -> None:
    """Send the command's group ``signum``; before its launcher made it, the launcher alone (which
    holds it until it is ready: then it ends, and the command never runs)."""
    with contextlib.suppress(OSError):
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            os.kill(group, signum)


if __name__ == "__main__":
    sys.exit(main())
