"""qstash-lists in tests: serve() runs a stand-in in a thread on a free port; the fixture
``qstash_server`` (this pytest plugin, ``-p no:qstash_lists``: off) puts one back for each test."""

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple, Optional, cast
from urllib.error import HTTPError
from urllib.request import ProxyHandler, Request, build_opener

if TYPE_CHECKING or not __package__:  # beside app.py, loaded by name
    import app
else:
    from . import app

EMPTY_ACCOUNT: "dict[str, list[Any]]" = {"urlGroups": [], "queues": []}  # qstash_data's default
ENVIRON_SETTING = "qstash_lists_environ"  # the ini line that starts the server first (below)
FIXTURE = "the qstash_data fixture"  # what a fault in it names
_DIRECT = build_opener(ProxyHandler({}))  # never a proxy (urlopen takes one from the environment)
#: The process that removes the served copy's folder once this one closes its pipe (at the end of
#: serve(), or when this process ends however it ends: SIGKILL included).
_SWEEPER = "import shutil, sys; sys.stdin.buffer.read(); shutil.rmtree(sys.argv[1], True)"
#: The write ends of this process's sweepers' pipes, which a forked child closes (else the block's
#: end waits for that child).  Changed by one set operation at a time (atomic under the GIL).
_SWEEPER_PIPES: "set[int]" = set()


class Server(NamedTuple):
    """A server serve() runs: its URL, clients' token, data file, and its account's bad days."""

    url: str
    token: str
    path: str

    def fault(self, *, token: Optional[str] = None, **fault: Any) -> None:
        """Have the next requests of the account (``token``: another's) meet a fault (POST
        /qstash-lists/faults's keys: docs/http.md)."""
        self._ask("POST", app.FAULTS_PATH, token, json.dumps(fault).encode())

    def clear_faults(self, *, token: Optional[str] = None) -> None:
        """Forget the account's faults (``token``: another's): DELETE /qstash-lists/faults."""
        self._ask("DELETE", app.FAULTS_PATH, token)

    def requests(self, *, token: Optional[str] = None) -> "list[dict[str, Any]]":
        """What the account (``token``: another) asked since the test or serve() began, oldest
        first."""
        return json.loads(self._ask("GET", app.REQUESTS_PATH, token))  # type: ignore[no-any-return]

    def _ask(
        self, method: str, path: str, token: Optional[str], body: Optional[bytes] = None
    ) -> bytes:
        auth = {"Authorization": "Bearer " + (token or self.token)}
        try:
            with _DIRECT.open(Request(self.url + path, body, auth, method=method)) as answer:
                return answer.read()  # type: ignore[no-any-return]
        except HTTPError as exc:  # the server's words: a fault's bad key, say
            raise ValueError(json.loads(exc.read())["error"]) from None


@contextlib.contextmanager
def serve(data: Any, token: Optional[str] = None) -> Iterator[Server]:
    """Serve ``data`` (a data file's path, whose copy is served, or a document; a one-account one
    gets ``token``, else a random one), writable, on a free loopback port, until the block ends.
    It sets no environment variable or signal handler, logs no request, never exits."""
    if isinstance(data, (str, os.PathLike)):
        raw, source = Path(data).read_bytes(), str(data)
    else:
        source = "serve()'s document"
        raw = _encoded(data, source)
    with _serving(raw, source, token) as (server, _, _):
        yield server


def _encoded(document: Any, source: str) -> bytes:
    """``document`` as JSON, or a DataError that names ``source`` (a value JSON cannot hold)."""
    try:
        return json.dumps(document).encode()
    except (TypeError, ValueError) as exc:  # a date, a set; a circular reference
        raise app.store.DataError(["%s: not JSON: %s" % (source, exc)]) from None


@contextlib.contextmanager
def _serving(
    raw: bytes, source: str, token: Optional[str], wrap: "Callable[[Any], Any]" = lambda app: app
) -> Iterator[Any]:
    """serve() of the data file ``raw``, whose faults name ``source``, its app in ``wrap``: (its
    Server, DataFile, TestDouble)."""
    token = token or secrets.token_urlsafe(16)
    loaded = app.store.parse(raw, source, token)  # before any copy: a fault names ``source``
    clients = app.clients_token(loaded, token, source)
    with _folder() as folder:
        path = os.path.join(folder, "data.json")
        Path(path).write_bytes(raw)
        data = app.open_data(path, token, 3600, writable=True)
        try:
            double = app.TestDouble(app.create_app(data, access_log=False))
            with app.serving(wrap(double)) as url:
                yield Server(url, clients, path), data, double
        finally:
            data.close()


@contextlib.contextmanager
def _folder() -> Iterator[str]:
    """A temporary folder, removed at the block's end, or by _SWEEPER if this process ends first."""
    with tempfile.TemporaryDirectory(prefix="qstash-lists-") as folder:
        read, write = os.pipe()
        _SWEEPER_PIPES.add(write)
        sweeper = [sys.executable, "-c", _SWEEPER, folder]
        out = subprocess.DEVNULL  # its own session: no Ctrl-C, hangup or group kill reaches it
        try:
            process = subprocess.Popen(
                sweeper, stdin=read, stdout=out, stderr=out, start_new_session=True
            )
        except BaseException:
            _forget_sweeper(write)
            raise
        finally:
            os.close(read)
        with process:  # the end closes its pipe, and waits for it to remove the folder
            try:
                yield folder
            finally:
                _forget_sweeper(write)


def _forget_sweeper(write: int) -> None:
    """Close ``write``, the end of a sweeper's pipe, if this process holds it."""
    if write in _SWEEPER_PIPES:
        _SWEEPER_PIPES.discard(write)
        os.close(write)


def _forget_sweepers() -> None:
    """In a forked child: its copies of the sweepers' pipes are not this process's ends."""
    for write in list(_SWEEPER_PIPES):
        _forget_sweeper(write)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_sweepers)


class _Session:
    """The run's one server, put back to each test's ``qstash_data`` before it.  Its first account
    (in clear) also answers the run's own token in a Bearer header, which the ini line gave
    QSTASH_TOKEN before any qstash_data (a client built at import holds it)."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.run = self.first = secrets.token_urlsafe(16)  # the run's; the one it stands for
        raw = json.dumps(EMPTY_ACCOUNT).encode()
        serving = _serving(raw, FIXTURE, self.run, self._aliased)
        self.server, self._data, self._double = self._stack.enter_context(serving)
        self.close = self._stack.close

    def _aliased(self, wsgi: Any) -> Any:
        """``wsgi``, where the run's token is the first account's."""
        run = "Bearer " + self.run

        def aliased(environ: Any, start_response: Any) -> Any:
            if environ.get("HTTP_AUTHORIZATION") == run:
                environ["HTTP_AUTHORIZATION"] = "Bearer " + self.first
            return wsgi(environ, start_response)

        return aliased

    def reset(self, document: Any) -> str:
        """Write ``document`` whole, whatever a test left, forget the bad days; return its token."""
        raw = _encoded(document, FIXTURE)
        loaded = app.store.parse(raw, FIXTURE, self.server.token)
        self.first = app.clients_token(loaded, self.server.token, FIXTURE)
        self._double.initial = self._data.replace(raw)  # what a reset puts back
        self._double.clear()
        return self.first


_sessions: "list[_Session]" = []  # the run's server in this process (an xdist worker's own)
_elsewhere: "list[str]" = []  # without the ini line: what the run's environment reaches instead
_before: "dict[str, Optional[str]]" = {}  # with it: QSTASH_URL and QSTASH_TOKEN before the run


def _reaching(environ: Mapping[str, str], when: str = "where pytest started") -> "list[str]":
    """Why a client built from ``environ`` (as it was ``when``) would reach another server than
    the fixture's (a real QStash, perhaps), and the fix; [] if it would not."""
    if "QSTASH_URL" in environ:
        why = "QSTASH_URL is %s" % environ["QSTASH_URL"]
    elif "QSTASH_TOKEN" in environ:
        why = "QSTASH_TOKEN is set without QSTASH_URL (so an SDK calls QStash itself)"
    else:
        return []
    fix = "add 'qstash_lists_environ = true' to pytest.ini, or unset it for the run"
    return [
        "qstash-lists: %s %s: a client built from it would not reach this test's server; %s (env "
        "-u QSTASH_URL -u QSTASH_TOKEN pytest)" % (why, when, fix)
    ]


try:
    import pytest
except ImportError:  # serve() needs no pytest
    pytest = None  # type: ignore[assignment]
if pytest is not None:

    def pytest_addoption(parser: pytest.Parser) -> None:
        what = "start qstash-lists first, and set QSTASH_URL and QSTASH_TOKEN before any import"
        parser.addini(ENVIRON_SETTING, what, type="bool", default=False)

    def pytest_configure(config: pytest.Config) -> None:
        if config.getini(ENVIRON_SETTING):
            _sessions.append(_Session())
            server = _sessions[0].server
            _before.update({key: os.environ.get(key) for key in ("QSTASH_URL", "QSTASH_TOKEN")})
            os.environ.update(QSTASH_URL=server.url, QSTASH_TOKEN=server.token)
        else:
            _elsewhere[:] = _reaching(os.environ)

    def pytest_unconfigure(config: pytest.Config) -> None:
        while _sessions:
            _sessions.pop().close()
        for key, value in _before.items():  # the environment as the run found it
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _before.clear()

    @pytest.fixture
    def qstash_data() -> Any:
        """The document each test's data file starts from (override it): one empty account."""
        return EMPTY_ACCOUNT

    @pytest.fixture
    def qstash_server(qstash_data: Any, monkeypatch: pytest.MonkeyPatch) -> Server:
        """The run's server, put back to ``qstash_data``, and QSTASH_URL and QSTASH_TOKEN set."""
        # Set since, without the ini line: by an import (a .env loaded by the app's settings).
        since = "since pytest started (a .env loaded at import, say)"
        elsewhere = _elsewhere or ([] if _before else _reaching(os.environ, since))
        if elsewhere:
            pytest.fail(elsewhere[0], pytrace=False)
        if not _sessions:
            _sessions.append(_Session())
        try:
            token = _sessions[0].reset(qstash_data)
        except (app.store.DataError, ValueError) as exc:  # its place named: no traceback to read
            fix = "%s\ncorrect the qstash_data fixture's document" % exc
            raise pytest.fail.Exception(fix, pytrace=False) from None
        monkeypatch.setenv("QSTASH_URL", _sessions[0].server.url)
        monkeypatch.setenv("QSTASH_TOKEN", token)
        return cast(Server, _sessions[0].server)._replace(token=token)
