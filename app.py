"""qstash-lists: QStash's URL groups and queues, read-only, served from a JSON file.

It answers ``GET /v2/topics``, ``GET /v2/queues`` and one item of each by name, behind
bearer-token auth.  Serve with ``python app.py`` (``--help`` lists the settings), check a
file with ``python app.py --check``.  Embed: ``make_app`` is the factory for
``waitress-serve --call``, gunicorn and uWSGI (it reads the environment, see SETTINGS);
``create_app`` serves a :class:`store.DataFile` you opened with :func:`open_data`.
Standard library only; waitress is imported only to serve.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import http.client
import io
import ipaddress
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    TextIO,
    Tuple,
    Union,
)
from urllib.parse import quote, unquote_to_bytes

if TYPE_CHECKING:
    import store
elif __package__:  # inside a package: vendored, or installed as qstash_lists
    from . import store
else:  # a script or a top-level module: the store.py beside this file, even if another "store" comes first
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

__version__ = "0.2.0"
__all__ = ["DEV_TOKEN", "SETTINGS", "AccessLog", "HTTPError", "Snapshot", "create_app", "main", "make_app", "open_data",
           "read_settings"]

Headers = List[Tuple[str, str]]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIEnvironment = Dict[str, Any]
WSGIApplication = Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]

#: The token that the official ``qstash dev`` server documents; used only on loopback.
DEV_TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0="
#: ... and its signing keys (published in @upstash/qstash as DEV_CREDENTIALS), served with it.
DEV_SIGNING_KEYS = ("sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r", "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs")


#: The route table, the one place that names the paths: each path (no trailing slash) -> the
#: store.Account field it answers and what one of its items is called.  An item's path is its
#: collection's path plus one segment, its name; an object (no noun) has no items.
ROUTES = {"/v2/topics": ("url_groups", "URL group"), "/v2/queues": ("queues", "queue"),
          "/v2/keys": ("signing_keys", None)}
#: A collection's path as requested, with or without one trailing slash -> its route's path.
_PATHS = {path + slash: path for path in ROUTES for slash in ("", "/")}
#: The health check's path: no token needed; it says which version of the data file is served (see health).
HEALTH_PATH = "/healthz"
ALLOWED = "GET, HEAD"
#: Bodies shorter than this are not worth compressing.
GZIP_MIN = 1024
#: waitress's settings, chosen on purpose and measured (docs/deploying.md); the benchmark's
#: baseline and the documented waitress-serve command use them too.
WAITRESS_SETTINGS: Dict[str, Any] = {
    "ident": "qstash-lists",  # the Server header: no version numbers
    # Bodies go by reference (wsgi.file_wrapper): what waits for a slow reader costs next to no
    # memory, while waitress's default watermark parks a worker for as long as a client does not read.
    "outbuf_high_watermark": 1 << 40,
    "asyncore_use_poll": True,  # select() fails on descriptors above 1023; poll() does not
    "channel_timeout": 15,  # close a connection that has sent and been sent nothing for 15 s...
    "cleanup_interval": 5,  # ...looking every 5 s (waitress's default, 30 s, doubles the wait)
    "connection_limit": 1000,
    "max_request_header_size": 16 * 1024,  # answered with 431 above this
    "max_request_body_size": 64 * 1024,  # the API takes no request bodies
}
#: The servers whose wsgi.file_wrapper keeps a body by reference until the client has read it
#: (waitress: no copy, no worker parked), by the module of the wrapper.  Other servers read a
#: wrapped BytesIO back in small blocks (uWSGI 4 KB, gunicorn 8 KB, a write each), so they get
#: the bytes whole, in one write (tests/benchmark.py --only table measures both).
BY_REFERENCE = ("waitress.",)
#: At most this many fields of a query are written to the access log.
LOGGED_QUERY_FIELDS = 8
#: Query parameters whose values may be logged: none, since the API takes no parameters and
#: any value may be a token that a user put under the wrong name (token=, access_token=, ...).
LOGGED_QUERY_VALUES: frozenset[str] = frozenset()
#: More differently written qstash_token values than this in one query are refused unread.
MAX_QUERY_TOKENS = 16
#: A name longer than this is cut short where a message repeats it.
SHOWN_NAME = 100
#: Lines the command line's access log holds before a request writes them itself.
ACCESS_LOG_BACKLOG = 10000
#: waitress warns "Task queue depth is N" for each request that waits for a thread, from the thread
#: that serves every connection: a burst is thousands of lines, and a slow stderr stalls everyone.
#: The command line passes on one of them in this many seconds.
QUEUE_WARNING_INTERVAL = 1.0

logger = logging.getLogger("qstash_lists")
access_logger = logging.getLogger("qstash_lists.access")


class Setting(NamedTuple):
    """A setting's option and environment variable (either may be None), default, parser and help."""

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


def _whole(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or int(text) < low or (high is not None and int(text) > high):
            raise ValueError("expected a whole number from %d%s" % (low, " to %d" % high if high else " up"))
        return int(text)

    return parse


def _size(text: str) -> int:
    digits, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    if unit not in ("", "K", "M", "G") or not (digits.isascii() and digits.isdigit()) or int(digits) < 1:
        raise ValueError("expected a size in bytes such as 64M (K, M or G may follow the number)")
    return int(digits) << {"": 0, "K": 10, "M": 20, "G": 30}[unit]


def _http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or not text.isprintable() or " " in text:
        raise ValueError("expected an http or https URL such as https://qstash.upstash.io")
    return text.rstrip("/")


def _seconds(text: str) -> float:
    value = float(text) if text.isascii() and text.replace(".", "", 1).isdigit() else 0.0
    if not 0.01 <= value <= 3600:
        raise ValueError("expected a number of seconds from 0.01 to 3600")
    return value


#: Every setting, read in one place (read_settings) by main, make_app and --help, as waitress's
#: Adjustments are: the command line wins over the environment, which wins over the default.
SETTINGS: Dict[str, Setting] = {
    "data": Setting("--data", "QSTASH_LISTS_DATA", "data.json", str, "the data file"),
    "token": Setting(None, "QSTASH_TOKEN", None, _token,
                     "the token of a one-account data file (without it, on loopback only, the dev token "
                     "that 'qstash dev' documents)"),
    "max_size": Setting("--max-size", "QSTASH_LISTS_MAX_SIZE", "64M", _size,
                        "refuse a data file larger than this many bytes; K, M or G may follow"),
    "interval": Setting("--interval", "QSTASH_LISTS_INTERVAL", "1", _seconds,
                        "seconds between looks at the data file (SIGHUP: look now)"),
    "stop_timeout": Setting("--stop-timeout", "QSTASH_LISTS_STOP_TIMEOUT", "10", _seconds,
                            "seconds the answers in flight may take to finish after SIGTERM or Ctrl-C"),
    "url": Setting(None, "QSTASH_URL", "https://qstash.upstash.io", _http_url, "the QStash API that --record reads"),
    "record_timeout": Setting("--record-timeout", "QSTASH_LISTS_RECORD_TIMEOUT", "30", _seconds,
                              "seconds --record may take to fetch the account, in all"),
    "host": Setting("--host", None, "127.0.0.1", str, "address to listen on"),
    "port": Setting("--port", None, "8080", _whole(0, 65535), "port; 0 picks a free one"),
    "threads": Setting("--threads", None, "8", _whole(1), "waitress worker threads"),
}


class ConfigError(Exception):
    """A setting that cannot be used: one line that names it and says what it expects."""


def read_settings(environ: Mapping[str, str], args: Optional[argparse.Namespace] = None) -> Dict[str, Any]:
    """Return every setting, parsed (``args``: what the command line gave, None where nothing).

    Raise ConfigError naming the first bad one; its value is never repeated: it may be a secret.
    """
    settings = {}
    for key, setting in SETTINGS.items():
        text, source = getattr(args, key, None), setting.option
        if text is None and setting.env is not None and setting.env in environ:
            text, source = environ[setting.env], setting.env
        if text is None:
            text = setting.default
        try:
            settings[key] = None if text is None else setting.parse(text)
        except ValueError as exc:
            raise ConfigError("%s: %s" % (source, exc)) from None
    return settings


def open_data(path: str, token: Optional[str], interval: float = 1.0, *, fallback: Optional[str] = None,
              max_size: int = store.DEFAULT_MAX_SIZE, required: bool = True) -> store.DataFile[Snapshot]:
    """Load the data file at ``path`` and keep it fresh (see :class:`store.DataFile`).

    ``token`` is a one-account file's (``fallback`` if None; see :func:`store.parse`).  Raise
    DataError if the file is bad, unless not ``required``: then the app answers 503 until it is good.
    """
    return store.DataFile(path, lambda raw: Snapshot(store.parse(raw, path, token, fallback)), interval,
                          max_size=max_size, required=required)


def create_app(source: store.DataFile[Snapshot], access_log: Union[bool, AccessLog] = True) -> WSGIApplication:
    """Return the WSGI callable that serves the snapshots of ``source``.

    ``access_log``: True logs each request to the ``qstash_lists.access`` logger at INFO, an
    AccessLog writes it in batches (the command line's), False not at all.
    """

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter() if access_log else 0.0
        exc_info = why = None
        try:
            snapshot = source.current()
            if environ.get("PATH_INFO") == HEALTH_PATH:
                status, headers, data = health(environ, source.status())
            elif snapshot is None:
                raise Unavailable()
            else:
                status, headers, data = respond(environ, snapshot)
        except HTTPError as err:
            (status, headers, data), why = err.render(), err.why
        except Exception:
            logger.exception("error while answering %s", _request_line(environ))
            status, headers, data = HTTPError().render()
            exc_info = sys.exc_info()
        start_response(status, headers, exc_info)
        if environ.get("REQUEST_METHOD") == "HEAD":
            data = b""  # the same headers as GET, errors included, and never a body (RFC 9110, 9.3.2)
        if access_log:
            ms = (time.perf_counter() - started) * 1000
            noted = (status[:3], len(data), ms, "" if why is None else " (%s)" % why)
            if access_log is not True:
                access_log.note(time.time(), environ, *noted)
            elif access_logger.isEnabledFor(logging.INFO):  # else the request line would be made for nothing
                access_logger.info('%s "%s" %s %d %.2fms%s', environ.get("REMOTE_ADDR", "-"), _request_line(environ),
                                   *noted)
        if not data:
            return []
        file_wrapper = environ.get("wsgi.file_wrapper")
        if file_wrapper is None or not str(getattr(file_wrapper, "__module__", "")).startswith(BY_REFERENCE):
            return [data]
        # By reference: what waits for a slow reader is the snapshot's bytes (BytesIO shares them), not a copy.
        wrapped: Iterable[bytes] = file_wrapper(io.BytesIO(data))
        return wrapped

    return app


class AccessLog:
    """The command line's access log: a request only notes what it did, and a thread of its own
    formats the lines and writes them to ``stream`` in batches, a few times a second (the logging
    module's way, a line a request, costs far more: tests/benchmark.py).  :meth:`close` writes the rest."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._entries: Deque[Tuple[Any, ...]] = collections.deque()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="qstash-lists access log", daemon=True)
        self._thread.start()

    def note(self, *entry: Any) -> None:
        """Note one request: its time, environ, status, body size, milliseconds and why (a deque is thread-safe)."""
        self._entries.append(entry)
        if len(self._entries) > ACCESS_LOG_BACKLOG:  # the stream is stuck: slow requests down, not fill memory
            self._write()

    def close(self) -> None:
        """Write every line noted so far, and stop the thread."""
        self._closed.set()
        self._thread.join()
        self._write()

    def _run(self) -> None:
        while not self._closed.wait(0.2):
            self._write()

    def _write(self) -> None:
        lines: List[str] = []
        seconds: Dict[int, str] = {}  # a batch's lines share their seconds, and mostly their requests
        requests: Dict[Tuple[Any, ...], str] = {}
        while self._entries:
            created, environ, status, size, ms, why = self._entries.popleft()
            second = seconds.get(int(created)) or seconds.setdefault(int(created), _utc(int(created))[:-5])
            asked = tuple(environ.get(key) for key in _LOGGED_ENVIRON)
            request = requests.get(asked) or requests.setdefault(asked, _request_line(environ))
            lines.append('%s.%03dZ %s "%s" %s %d %.2fms%s\n' % (second, int(created % 1 * 1000), asked[0] or "-",
                                                                request, status, size, ms, why))
        if lines:
            self._stream.write("".join(lines))
            self._stream.flush()


def make_app(environ: Optional[Mapping[str, str]] = None) -> WSGIApplication:
    """Build the app from the environment (the variables of SETTINGS): the factory for servers.

    It cannot know its address, so it never falls back to the dev token.  What only the
    environment can fix (a bad setting, a one-account file without QSTASH_TOKEN) stops the
    server: one line on stderr and SystemExit(3), which gunicorn takes for a worker that
    failed to boot, not one to boot again.  A bad or missing data file does not: the app
    answers 503 until it is good.  Where nobody handles SIGHUP, it makes the reloader look now.
    """
    # uWSGI sets its handlers from C, out of Python's sight: SIGHUP there is uWSGI's to handle.
    if (hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL and "uwsgi" not in sys.modules):
        signal.signal(signal.SIGHUP, _wake_all)
    try:
        settings = read_settings(os.environ if environ is None else environ)
        data = _open(settings, None, required=True)
    except (ConfigError, store.TokenMissing) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(3) from None
    except store.DataError:
        data = _open(settings, None, required=False)  # logged; answered with 503 until it is good
    except KeyboardInterrupt:  # Ctrl-C during the first load: a stop, not a traceback
        raise SystemExit(130) from None
    return create_app(data)


def main(argv: Optional[Sequence[str]] = None, environ: Optional[Mapping[str, str]] = None) -> int:
    """Run the command line: serve under waitress, ``--check`` a data file, or print ``--example``."""
    env = os.environ if environ is None else environ
    parser = _parser()
    args = parser.parse_args(argv)
    if args.example:
        print(json.dumps(store.EXAMPLE, indent=2))
        return 0
    try:
        settings = read_settings(env, args)
    except ConfigError as exc:
        return _fail([str(exc)])
    path = settings["data"]
    if args.record:
        return _record(settings, args.signing_keys)
    # The dev token stands in for QSTASH_TOKEN only where no one else can reach the server.
    fallback = DEV_TOKEN if args.check or is_loopback(settings["host"]) else None
    try:
        if args.check:  # one read and one parse: no bodies to encode, no reloader
            loaded = store.load(path, settings["token"], fallback, settings["max_size"])
            print("%s: OK: %s" % (path, loaded.summary()))
            for line in loaded.warnings(path):
                print(line, file=sys.stderr)
            return 0
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_UTCFormatter("%(asctime)s %(message)s"))
        logging.basicConfig(level=logging.INFO, handlers=[handler])
        logging.getLogger("waitress.queue").addFilter(_OncePer(QUEUE_WARNING_INTERVAL))
        _handle_signals()  # before the first load: a signal during it must neither kill nor trace back
        data = _open(settings, fallback, required=True)
    except store.TokenMissing as exc:
        return _fail(exc.faults + ["The built-in dev token serves only a loopback address."])
    except store.DataError as exc:
        if os.path.lexists(path):
            return _fail(exc.faults)
        return _fail(["%s: no such file; to start from the example: %s --example > %s"
                      % (os.path.abspath(path), parser.prog, path)])
    try:
        return _serve(settings, args.quiet, data)
    finally:
        data.close()


def _record(settings: Mapping[str, Any], signing_keys: bool) -> int:
    """--record: fetch the account of QSTASH_TOKEN from QSTASH_URL and write it to the data file.

    Fields the file format does not hold are left out (and named, never their values); the file
    is checked as a served one would be and written whole, or left as it was.  The fetching has
    one deadline in all (--record-timeout), whatever the API does: a drip-fed or endless answer,
    a slow name lookup, a loop of redirects.  Never prints the token.
    """
    token, base, path, timeout = settings["token"], settings["url"], settings["data"], settings["record_timeout"]
    if token is None:
        return _fail(["QSTASH_TOKEN is not set: --record reads the account whose token it is"])
    asking = ["/v2/topics"]  # the request in flight, for the message if time runs out
    outcome: List[Any] = []  # the document and the names left out, or the ConfigError

    def download() -> None:
        dropped: Set[str] = set()
        document: Dict[str, Any] = {}
        try:
            for key, route in (("urlGroups", "/v2/topics"), ("queues", "/v2/queues")):
                asking[:] = [route]
                answer = _fetch(base, route, token, settings["max_size"], timeout)
                if type(answer) is not list or not all(type(item) is dict for item in answer):
                    raise ConfigError("%s%s: expected a JSON array of objects; is QSTASH_URL the QStash API?"
                                      % (base, route))
                document[key] = [_known(item, key, dropped) for item in answer]
            if signing_keys:
                asking[:] = ["/v2/keys"]
                answer = _fetch(base, "/v2/keys", token, settings["max_size"], timeout)
                document["signingKeys"] = {k: answer.get(k) for k in ("current", "next")} if type(answer) is dict \
                    else {}
            outcome.append((document, dropped))
        except ConfigError as exc:
            outcome.append(exc)

    # A thread of its own, which the process leaves behind if time runs out: a socket timeout
    # bounds each read, not a whole answer, and nothing bounds a name lookup.
    worker = threading.Thread(target=download, name="qstash-lists --record", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        return _fail(["GET %s%s: no whole answer within %g s (--record-timeout, QSTASH_LISTS_RECORD_TIMEOUT); "
                      "%s is unchanged" % (base, asking[0], timeout, path)])
    if isinstance(outcome[0], ConfigError):
        return _fail([str(outcome[0]) + "; %s is unchanged" % path])
    document, dropped = outcome[0]
    if dropped:
        print("%s: left out what a data file does not hold: %s" % (path, ", ".join(sorted(dropped))), file=sys.stderr)
    try:
        loaded = store.record(path, document, token)
    except store.DataError as exc:
        return _fail(exc.faults + ["%s is unchanged" % path])
    print("%s: recorded %s from %s" % (path, loaded.summary(), base))
    return 0


def _fetch(base: str, route: str, token: str, max_size: int, timeout: float) -> Any:
    """GET ``route`` of the QStash API at ``base``: its JSON, or ConfigError saying what happened and what to do."""
    request = urllib.request.Request(base + route, headers={"Authorization": "Bearer " + token})
    where = "GET %s%s" % (base, route)
    try:
        with urllib.request.build_opener(_NoRedirects).open(request, timeout=timeout) as response:
            raw = response.read(max_size + 1)
    except urllib.error.HTTPError as exc:
        fix = "check QSTASH_TOKEN" if exc.code in (401, 403) else "try again later" if exc.code >= 500 else (
            "is QSTASH_URL the QStash API?")
        if 300 <= exc.code < 400:  # the token goes to QSTASH_URL only, never on to where it points
            fix = "not followed; is QSTASH_URL the QStash API? (%s)" % exc.headers.get("Location", "no Location")
        raise ConfigError("%s: answered %d %s; %s" % (where, exc.code, exc.reason, fix)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError("%s: no answer (%s); check QSTASH_URL and the network" % (where, reason)) from None
    except http.client.HTTPException as exc:  # an answer cut short or malformed
        raise ConfigError("%s: a broken answer (%s); try again later" % (where, type(exc).__name__)) from None
    if len(raw) > max_size:
        raise ConfigError("%s: the answer is over %s (--max-size)" % (where, store.megabytes(max_size)))
    try:
        return json.loads(raw)
    except ValueError:
        raise ConfigError("%s: the answer is not JSON; is QSTASH_URL the QStash API?" % where) from None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None  # urllib would send the Authorization header on to any host: an error instead


def _known(item: Dict[str, Any], kind: str, dropped: Set[str]) -> Dict[str, Any]:
    """The fields of an API object that a data file holds; the names of the others go into ``dropped``."""
    kept = {key: value for key, value in item.items() if key in store.FIELDS[kind]}
    dropped.update("%s.%s" % (kind, key) for key in item if key not in kept)
    if kind == "urlGroups" and type(kept.get("endpoints")) is list:
        kept["endpoints"] = [_known(e, "endpoints", dropped) if type(e) is dict else e for e in kept["endpoints"]]
    if kind == "endpoints" and kept.get("name") in ("", None):
        kept.pop("name", None)  # QStash writes an endpoint without a name as "" or null: here it has none
    return kept


def _open(settings: Mapping[str, Any], fallback: Optional[str], required: bool) -> store.DataFile[Snapshot]:
    return open_data(settings["data"], settings["token"], settings["interval"], fallback=fallback,
                     max_size=settings["max_size"], required=required)


def _handle_signals() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _wake_all)


def _stop(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # before serving, nothing is in flight: stop now (while serving, _run stops gracefully)


def _wake_all(signum: int, frame: Any) -> None:
    store.wake_all()  # SIGHUP: every reloader looks now (a signal handler only sets events)


def _serve(settings: Mapping[str, Any], quiet: bool, data: store.DataFile[Snapshot]) -> int:
    """Serve ``data`` under waitress until SIGTERM or Ctrl-C."""
    try:
        from waitress import create_server
    except ImportError:
        return _fail(["waitress is not installed: python -m pip install waitress"])
    host, port = settings["host"], settings["port"]
    socket_map: Dict[int, Any] = {}  # ours, single socket or several, so that _run can see every connection
    access = None if quiet else AccessLog(sys.stderr)
    try:
        server = create_server(create_app(data, access_log=access or False), map=socket_map, host=host,
                               port=port, threads=settings["threads"], **WAITRESS_SETTINGS)
    except (OSError, ValueError) as exc:
        return _fail(["cannot listen on %s port %d: %s; stop what uses it, or choose another port "
                      "(--port 0 picks a free one)" % (host, port, exc)])
    listening = getattr(server, "effective_listen", None) or [(server.effective_host, server.effective_port)]
    urls = ["http://%s:%s" % (("[%s]" % h) if ":" in h else h, p) for h, p in listening]  # "localhost": 2
    snapshot = data.current()
    assert snapshot is not None  # open_data raised otherwise
    loaded = snapshot.store
    print("qstash-lists %s serving %s (%s) on %s" % (__version__, settings["data"], loaded.summary(), " ".join(urls)))
    print("export QSTASH_URL=%s" % urls[0])
    if not loaded.single_account:
        print("# QSTASH_TOKEN: accounts from the data file; use your account's token")
    elif loaded.fallback_used:
        print("export QSTASH_TOKEN=%s  # the built-in dev token: QSTASH_TOKEN is not set (loopback only)"
              % DEV_TOKEN)
        if loaded.accounts[0].signing_keys is None:  # published constants, as `qstash dev` prints them
            print("export QSTASH_CURRENT_SIGNING_KEY=%s\nexport QSTASH_NEXT_SIGNING_KEY=%s" % DEV_SIGNING_KEYS)
    else:
        print("# QSTASH_TOKEN: the one set in this server's environment (not shown)")
    sys.stdout.flush()
    try:
        _run(server, socket_map, settings["stop_timeout"])
    finally:
        if access is not None:
            access.close()  # every line of a request answered is written before the process ends
    return 0


def _run(server: Any, socket_map: Dict[int, Any], stop_timeout: float) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully: refuse new connections, close idle
    ones, and let the answers in flight finish, for at most ``stop_timeout`` seconds."""
    from waitress import wasyncore
    from waitress.channel import HTTPChannel
    from waitress.server import BaseWSGIServer

    deadline: List[float] = []

    def stop(signum: int, frame: Any) -> None:
        deadline[:] = deadline or [time.monotonic() + stop_timeout]  # a handler only notes it

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not deadline:
        wasyncore.loop(timeout=0.5, map=socket_map, use_poll=True, count=1)
    for listener in [d for d in socket_map.values() if isinstance(d, BaseWSGIServer)]:
        wasyncore.dispatcher.close(listener)  # not BaseWSGIServer.close: the threads still need the trigger
    while time.monotonic() < deadline[0]:
        channels = [d for d in socket_map.values() if isinstance(d, HTTPChannel)]
        if not channels:
            break
        for channel in channels:  # between requests: nothing in flight to finish
            if channel.request is None and not channel.requests and not channel.total_outbufs_len:
                channel.will_close = True
        wasyncore.loop(timeout=0.1, map=socket_map, use_poll=True, count=1)
    server.task_dispatcher.shutdown()


# Request handling ------------------------------------------------------------------------------


class HTTPError(Exception):
    """An error answer: a status, a JSON ``{"error": message}`` body, extra headers, and ``why``
    for the access log only."""

    status = HTTPStatus.INTERNAL_SERVER_ERROR
    message = "internal server error; the server log has the details"

    def __init__(self, headers: Sequence[Tuple[str, str]] = (), why: Optional[str] = None) -> None:
        super().__init__(self.message)
        self.headers = list(headers)
        self.why = why

    def render(self) -> Tuple[str, Headers, bytes]:
        """Return the status line, headers and body of this error."""
        return _json_answer(self.status, {"error": self.message}, self.headers)


class NotFound(HTTPError):
    """A path this server does not have."""

    status = HTTPStatus.NOT_FOUND
    message = ("not found: this read-only server answers GET /v2/topics, /v2/topics/<name>, "
               "/v2/queues, /v2/queues/<name> and /v2/keys")


class NoSuchItem(NotFound):
    """An item path whose name is not in the token's account (nor, as far as it can tell, anywhere)."""

    def __init__(self, noun: str, name: str) -> None:
        shown = name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "..."
        self.message = "not found: no %s named %s" % (noun, json.dumps(shown))
        super().__init__(why="no such %s" % noun)


class NoSigningKeys(NotFound):
    """GET /v2/keys for an account the data file gives no signing keys."""

    message = "not found: the data file gives this account no signing keys (its signingKeys)"

    def __init__(self) -> None:
        super().__init__(why="no signing keys")


class Unavailable(HTTPError):
    """No good version of the data file has been loaded yet (see make_app)."""

    status = HTTPStatus.SERVICE_UNAVAILABLE
    message = ("service unavailable: the server's data file cannot be served yet; the server log names "
               "the fault and its fix, and the file is served as soon as it is good")

    def __init__(self) -> None:
        super().__init__([("Retry-After", "1")], why="no good data file yet")


class MethodNotAllowed(HTTPError):
    """A method other than GET or HEAD on a known path (RFC 9110, 15.5.6: with Allow)."""

    status = HTTPStatus.METHOD_NOT_ALLOWED
    message = "method not allowed: this server is read-only; it answers only GET and HEAD"

    def __init__(self) -> None:
        super().__init__([("Allow", ALLOWED)])


class Unauthorized(HTTPError):
    """No credential, or a malformed or unknown one: one answer for all, the reason in the log only.
    The challenge says ``error="invalid_token"`` when a credential was sent (RFC 6750, 3.1)."""

    status = HTTPStatus.UNAUTHORIZED
    message = ("unauthorized: send your QStash token as 'Authorization: Bearer <token>' "
               "or as the qstash_token query parameter")

    def __init__(self, why: str) -> None:
        challenge = 'Bearer realm="qstash"' + ('' if why == "no credential" else ', error="invalid_token"')
        super().__init__([("WWW-Authenticate", challenge)], why)


class Representation:
    """One encoding of a body, with the headers of its 200 and 304 answers, built once."""

    __slots__ = ("data", "etag", "not_modified", "headers")

    def __init__(self, data: bytes, etag: str, vary: bool, encoding: Optional[str] = None) -> None:
        self.data = data
        self.etag = etag
        # A 304 repeats these of the 200 (RFC 9110, 15.4.5); Vary: the body depends on Accept-Encoding (12.5.5).
        # One account's answer: a shared cache must not keep it, a client must revalidate (RFC 9111, 5.2.2).
        cache = [("ETag", etag), ("Cache-Control", "private, no-cache"), ("X-Content-Type-Options", "nosniff")]
        if vary:
            cache.append(("Vary", "Accept-Encoding"))
        self.not_modified = cache
        self.headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))] + cache
        if encoding is not None:
            self.headers.append(("Content-Encoding", encoding))


class Body:
    """One response body, encoded once per snapshot, gzipped on first demand.  Its ETag is a
    digest of the bytes: any change, even one that keeps the length, is another tag."""

    __slots__ = ("compressible", "identity", "_gzip")

    def __init__(self, data: bytes) -> None:
        self.compressible = len(data) >= GZIP_MIN
        self.identity = Representation(data, '"%s"' % hashlib.blake2b(data, digest_size=16).hexdigest(),
                                       self.compressible)
        self._gzip: Optional[Representation] = None

    def gzipped(self) -> Representation:
        """Return the gzip representation, compressing on first use."""
        if self._gzip is None:  # two threads may both compress it: the same bytes, and one is kept
            data = gzip.compress(self.identity.data, compresslevel=6, mtime=0)
            self._gzip = Representation(data, self.identity.etag[:-1] + '-gzip"', True, "gzip")
        return self._gzip


class Snapshot:
    """One loaded data file and its response bodies: the lists encoded when it is built, an
    item when first asked for (kept for the snapshot's life: nobody pays for bodies nobody reads)."""

    def __init__(self, loaded: store.Store) -> None:
        self.store = loaded
        self.lists = {
            (account.token_sha256, path): self.encode(account, field, noun)
            for account in loaded.accounts for path, (field, noun) in ROUTES.items()
        }
        self.items: Dict[Tuple[bytes, str, str], Body] = {}

    def encode(self, account: store.Account, field: str, noun: Optional[str]) -> Optional[Body]:
        """The body of a collection, or of the signing keys (None if the account has none)."""
        if noun is not None:
            return Body(store.encode(getattr(account, field)))
        keys = account.signing_keys or (DEV_SIGNING_KEYS if self.store.fallback_used else None)
        if keys is None:
            return None
        return Body(json.dumps({"current": keys[0], "next": keys[1]}, separators=(",", ":")).encode())

    def item(self, account: store.Account, path: str, name: str) -> Body:
        """Return the body of the item ``name`` in the collection at ``path``; raise NoSuchItem."""
        key = (account.token_sha256, path, name)
        body = self.items.get(key)
        if body is None:
            field, noun = ROUTES[path]
            found = account.item(field, name)
            if found is None:
                raise NoSuchItem(noun or field, name)
            # Two threads may both encode it; the bytes are the same, and one copy is kept.
            body = self.items.setdefault(key, Body(found.to_json().encode()))
        return body


def respond(environ: WSGIEnvironment, snapshot: Snapshot) -> Tuple[str, Headers, bytes]:
    """Answer one request from ``snapshot``: route, method, auth, then the body."""
    path_info = environ.get("PATH_INFO", "")
    path = _PATHS.get(path_info)
    name = None
    if path is None:
        path, name = _item_path(environ, path_info)
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        raise MethodNotAllowed()
    account = snapshot.store.find(_credential(environ))
    if account is None:
        raise Unauthorized("unknown token")
    body = snapshot.lists[account.token_sha256, path] if name is None else snapshot.item(account, path, name)
    if body is None:
        raise NoSigningKeys()

    chosen = body.identity
    accept_encoding = environ.get("HTTP_ACCEPT_ENCODING")
    if body.compressible and accept_encoding and _accepts_gzip(accept_encoding):
        chosen = body.gzipped()
    # Fresh lists each time: some servers (wsgiref) add their own headers to ours.
    if_none_match = environ.get("HTTP_IF_NONE_MATCH")
    if if_none_match and _matches(if_none_match, chosen.etag):
        return "304 Not Modified", list(chosen.not_modified), b""
    return "200 OK", list(chosen.headers), chosen.data


def health(environ: WSGIEnvironment, status: store.Status) -> Tuple[str, Headers, bytes]:
    """Answer the health check: 200 while a good version of the data file is in service, else 503.

    The body says which version (the SHA-256 of the file's bytes: the same on every replica that
    serves the same file), when it was loaded, and whether the last look at the file failed
    (``stale``) and when: never a fault, a name or anything else from the file.
    """
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        raise MethodNotAllowed()
    ready = status.version is not None
    document = {"status": "ok" if ready else "unavailable", "version": status.version,
                "loadedAt": None if status.loaded_at is None else _utc(status.loaded_at),
                "stale": status.failed_at is not None,
                "failedAt": None if status.failed_at is None else _utc(status.failed_at)}
    if ready:
        return _json_answer(HTTPStatus.OK, document)
    return _json_answer(HTTPStatus.SERVICE_UNAVAILABLE, document, [("Retry-After", "1")])


def _json_answer(status: HTTPStatus, document: Any,
                 headers: Sequence[Tuple[str, str]] = ()) -> Tuple[str, Headers, bytes]:
    """An answer of its own (an error, the health check): compact JSON that no cache keeps."""
    body = json.dumps(document, separators=(",", ":")).encode()
    return "%d %s" % (status, status.phrase), [
        ("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff")] + list(headers), body


def _item_path(environ: WSGIEnvironment, path_info: str) -> Tuple[str, str]:
    """Split an item's path into its collection's path and the item's name; raise NotFound.

    The name is the one segment after the collection's path (a trailing slash is dropped),
    percent-decoded once.  In PATH_INFO, already decoded, an escaped slash (``%2F``) looks
    like a separator: the raw URI, where the server passes it on, tells them apart (and an
    escaped slash anywhere else makes it no path of ours).
    """
    parts = path_info.split("/", 3)  # "", "v2", "queues", "<name>" -- split once, look up twice
    path = "/".join(parts[:3])
    if len(parts) < 4 or ROUTES.get(path, (None, None))[1] is None:
        raise NotFound()
    raw = (environ.get("REQUEST_URI") or environ.get("RAW_URI") or "").partition("?")[0]  # waitress, uWSGI; gunicorn
    if raw and unquote_to_bytes(_latin1(raw)).endswith(_latin1(path_info)):  # this request as it arrived
        head, _, segment = (raw[:-1] if raw.endswith("/") else raw).rpartition("/")
        if [unquote_to_bytes(_latin1(piece)) for piece in head.split("/")[-2:]] != [_latin1(p) for p in parts[1:3]]:
            raise NotFound()
        name = unquote_to_bytes(_latin1(segment))
    else:  # no raw URI, or one that a dispatcher rewrote: PATH_INFO alone
        name = _latin1(parts[3][:-1] if parts[3].endswith("/") else parts[3])
        if b"/" in name:
            raise NotFound()
    if not name:
        raise NotFound()
    # Names are UTF-8 in the URL; bytes that are not cannot name anything, and stay visible as escapes.
    return path, name.decode("utf-8", "backslashreplace")


def _credential(environ: WSGIEnvironment) -> bytes:
    """Return the request's one token, or raise Unauthorized with the reason.  It may come in
    the Authorization header and qstash_token query fields: each well formed, all the same."""
    query = environ.get("QUERY_STRING")
    header = environ.get("HTTP_AUTHORIZATION")
    if not query and header is not None and header[:7] == "Bearer ":  # the usual form, the short way
        token = header[7:]
        if token and " " not in token and "\t" not in token:
            return _latin1(token)
    tokens = _query_tokens(query) if query else set()
    if header is not None:
        scheme, _, token = header.strip(" \t").partition(" ")
        if scheme.lower() != "bearer":  # the scheme is case-insensitive (RFC 9110, 11.1)
            raise Unauthorized("not a Bearer header")
        tokens.add(_latin1(token.lstrip(" ")))
    if not tokens:
        raise Unauthorized("no credential")
    if len(tokens) > 1:
        raise Unauthorized("tokens disagree" if b"" not in tokens else "malformed")
    token = tokens.pop()
    if not token or b" " in token or b"\t" in token:  # no account's token has one
        raise Unauthorized("malformed")
    return token


# A field whose name has escapes (it may spell qstash_token), in "&" + the query.
_ESCAPED_FIELD = re.compile(r"&([^&=]*%[^&=]*)(=[^&]*)?")


def _query_tokens(query: str) -> set[bytes]:
    """Return the distinct decoded values of the query's qstash_token fields (b"" for an empty one).

    The query is cut at each ``&qstash_token`` and searched for escaped names by regular
    expression, not read field by field, and each distinct spelling is decoded once: a
    thousand fields cost little.  More than MAX_QUERY_TOKENS spellings are refused unread.
    """
    query = "&" + query
    spellings = set()
    if "&qstash_token" in query:
        for rest in set(query.split("&qstash_token")[1:]):
            if not rest or rest[0] in "=&":  # the whole name, not qstash_tokens=
                spellings.add(rest.partition("&")[0])
    if "%" in query:
        # Only a name of 14 to 36 characters can spell qstash_token with an escape ("%71" is one letter).
        escaped = {(name, value) for name, value in _ESCAPED_FIELD.findall(query) if 14 <= len(name) <= 36}
        if len(escaped) > MAX_QUERY_TOKENS:
            raise Unauthorized("malformed")
        spellings.update(value for name, value in escaped if _unquote(name) == b"qstash_token")
    if len(spellings) > MAX_QUERY_TOKENS:
        raise Unauthorized("malformed")
    return {_unquote(value[1:]) for value in spellings}


def _unquote(text: str) -> bytes:
    """Decode a query field: "+" is a space, then percent-escapes (as HTML forms write them)."""
    return unquote_to_bytes(_latin1(text).replace(b"+", b" "))


def _latin1(text: str) -> bytes:
    """Return the bytes behind a PEP 3333 native string."""
    # Only a server that breaks PEP 3333 hands over other characters; keep them distinct.
    return text.encode("latin-1", "backslashreplace")


def _accepts_gzip(header: str) -> bool:
    """Tell whether an Accept-Encoding value admits gzip (RFC 9110, 12.5.3: q=0 refuses; gzip beats *)."""
    star = False
    for item in header.split(","):
        coding, *params = item.split(";")
        q = 1.0
        for param in params:
            name, _, value = param.strip().partition("=")
            if name.lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q > 0
    return star


def _matches(header: str, etag: str) -> bool:
    """Tell whether If-None-Match names ``etag`` (weak comparison, RFC 9110, 13.1.2)."""
    for tag in header.split(","):
        tag = tag.strip()
        if tag == "*" or (tag[2:] if tag.startswith("W/") else tag) == etag:
            return True
    return False


def _request_line(environ: WSGIEnvironment) -> str:
    """Return 'METHOD /path?query' for the log: the path as it arrived, printable, short, no query value.

    Every value is redacted (but LOGGED_QUERY_VALUES'), and so is a field whose name is no
    plain name (a token pasted as the query); after LOGGED_QUERY_FIELDS fields, a count.
    """
    raw = (environ.get("REQUEST_URI") or environ.get("RAW_URI") or "").partition("?")[0]
    if raw:  # escapes as sent: /v2/queues/a%2Fb is not /v2/queues/a/b
        path = _printable(raw[:1000])
    else:
        path = _printable((environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))[:1000], _PATH_SAFE)
    line = "%s %s" % (_printable(environ.get("REQUEST_METHOD", "")), path)
    query = environ.get("QUERY_STRING", "")
    if query:
        fields = query.split("&", LOGGED_QUERY_FIELDS)
        shown = []
        for field in fields[:LOGGED_QUERY_FIELDS]:
            name, equals, value = field.partition("=")
            if not equals or not _PARAMETER_NAME.fullmatch(name):
                shown.append("[redacted]")
            elif name in LOGGED_QUERY_VALUES:
                shown.append(_printable(field[:100]))
            else:
                shown.append(name + "=[redacted]")
        if len(fields) > LOGGED_QUERY_FIELDS:
            shown.append("[%d more]" % (fields[-1].count("&") + 1))
        line += "?" + "&".join(shown)
    return line


#: What _request_line reads of the environ, and the client's address first.
_LOGGED_ENVIRON = ("REMOTE_ADDR", "REQUEST_METHOD", "REQUEST_URI", "RAW_URI", "SCRIPT_NAME", "PATH_INFO",
                   "QUERY_STRING")
_PARAMETER_NAME = re.compile(r"[A-Za-z0-9_.%-]{1,24}")  # longer may be a token pasted as a name
_QUERY_SAFE = "/!$&'()*+,;=:@-._~%[]"  # a raw query or path keeps its escapes
_PATH_SAFE = _QUERY_SAFE.replace("%", "")  # a decoded path's "%" is itself escaped


def _printable(text: str, safe: str = _QUERY_SAFE) -> str:
    """Percent-encode all but printable ASCII in ``safe``, so a log line stays one line."""
    return quote(_latin1(text), safe=safe)


# Helpers ------------------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Tell whether ``host`` names only this machine's loopback interface."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _UTCFormatter(logging.Formatter):
    """Log lines that start with an ISO 8601 UTC timestamp: 2026-11-23T18:41:39.123Z."""

    def formatTime(self, record: logging.LogRecord, datefmt: Optional[str] = None) -> str:  # noqa: N802
        """Return the record's time as 2026-11-23T18:41:39.123Z."""
        return _utc(record.created)


class _OncePer(logging.Filter):
    """Pass on a record if none has passed in the last ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._seconds = seconds
        self._next = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.created < self._next:
            return False
        self._next = record.created + self._seconds
        return True


def _utc(created: float) -> str:
    return "%s.%03dZ" % (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)), int(created % 1 * 1000))


def _program() -> str:
    """The command as it was run, for --help, --version and hints."""
    if __name__ != "__main__":
        return "qstash-lists"  # the console script
    if __spec__ is not None:
        return "python -m " + __spec__.name
    return "python " + os.path.basename(sys.argv[0])


def _parser() -> argparse.ArgumentParser:
    environment = ["%s: %s (%s)" % (s.env, s.help, "for " + s.option if s.option else "default: " + str(s.default))
                   for s in SETTINGS.values() if s.env]
    parser = argparse.ArgumentParser(
        prog=_program(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve QStash's URL groups and queues (GET /v2/topics, /v2/queues and one of each "
                    "by name) from a JSON data file.",
        epilog="environment (the command line wins; nothing else is read):\n  " + "\n  ".join(environment)
               + "\nsignals: SIGHUP makes the server look at the data file at once; SIGTERM or Ctrl-C stops it.",
    )
    for key, setting in SETTINGS.items():
        if setting.option:
            default = ("$%s, else %s" % (setting.env, setting.default)) if setting.env else setting.default
            parser.add_argument(setting.option, dest=key, metavar=key.upper(),
                                help="%s (default: %s)" % (setting.help, default))
    parser.add_argument("--quiet", action="store_true", help="no access log (default: log each request)")
    parser.add_argument("--check", action="store_true", help="validate the data file, print a summary and exit")
    parser.add_argument("--example", action="store_true", help="print an example data file and exit")
    parser.add_argument("--record", action="store_true",
                        help="write the data file from the account of QSTASH_TOKEN at QSTASH_URL, and exit")
    parser.add_argument("--signing-keys", action="store_true",
                        help="with --record: record the account's signing keys too (secrets; default: not)")
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    return parser


def _fail(lines: Sequence[str]) -> int:
    print("\n".join(lines), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
