"""qstash-lists in tests: serve() runs a stand-in in a thread on a free port; the fixture
``qstash_server`` (this pytest plugin, ``-p no:qstash_lists``: off) puts one back for each test."""

import contextlib
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Optional, cast
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


class Server(NamedTuple):
    """A server serve() runs: its URL, clients' token, data file, and its account's bad days."""

    url: str
    token: str
    path: str

    def fault(self, **fault: Any) -> None:
        """Have the next requests meet a fault (POST /qstash-lists/faults's keys: docs/http.md)."""
        self._ask("POST", app.FAULTS_PATH, json.dumps(fault).encode())

    def clear_faults(self) -> None:  # DELETE /qstash-lists/faults
        self._ask("DELETE", app.FAULTS_PATH)

    def requests(self) -> "list[dict[str, Any]]":
        """What the account asked since the test (or serve()) began, oldest first."""
        return json.loads(self._ask("GET", app.REQUESTS_PATH))  # type: ignore[no-any-return]

    def _ask(self, method: str, path: str, body: Optional[bytes] = None) -> bytes:
        auth = {"Authorization": "Bearer " + self.token}
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
        raw, source = json.dumps(data).encode(), "serve()'s document"
    with _serving(raw, source, token) as (server, _):
        yield server


@contextlib.contextmanager
def _serving(raw: bytes, source: str, token: Optional[str], days: Any = True) -> Iterator[Any]:
    """serve() of the data file ``raw``, whose faults name ``source``: (its Server, DataFile)."""
    token = token or secrets.token_urlsafe(16)
    loaded = app.store.parse(raw, source, token)  # before any copy: a fault names ``source``
    clients = app.clients_token(loaded, token, source)
    with tempfile.TemporaryDirectory(prefix="qstash-lists-") as folder:
        path = os.path.join(folder, "data.json")
        Path(path).write_bytes(raw)
        data = app.open_data(path, token, 3600, writable=True)
        try:
            with app.serving(data, resets=days) as url:
                yield Server(url, clients, path), data
        finally:
            data.close()


class _Session:
    """The run's one server, put back to each test's ``qstash_data`` before it.  ``first``: its
    first account answers the token the ini line gave QSTASH_TOKEN before any qstash_data."""

    def __init__(self, first: bool) -> None:
        self.first, self.days, self._stack = first, app.BadDays(), contextlib.ExitStack()
        raw = json.dumps(EMPTY_ACCOUNT).encode()
        self.server, self._data = self._stack.enter_context(_serving(raw, FIXTURE, None, self.days))
        self.close = self._stack.close

    def reset(self, document: Any) -> str:
        """Write ``document`` whole, whatever a test left, forget the bad days; return its token."""
        accounts = document.get("accounts") if type(document) is dict else None
        if self.first and type(accounts) is list and accounts and type(accounts[0]) is dict:
            first = {k: v for k, v in accounts[0].items() if k not in ("token", "tokenSha256")}
            first["token"] = self.server.token
            document = dict(document, accounts=[first] + accounts[1:])
        raw = json.dumps(document).encode()
        loaded = app.store.parse(raw, FIXTURE, self.server.token)
        token = app.clients_token(loaded, self.server.token, FIXTURE)
        self._data.replace(raw)
        self.days.clear()
        return token


_sessions: "list[_Session]" = []  # the run's server in this process (an xdist worker's own)

try:
    import pytest
except ImportError:  # serve() needs no pytest
    pytest = None  # type: ignore[assignment]
if pytest is not None:

    def pytest_addoption(parser: pytest.Parser) -> None:
        what = "start qstash-lists first, and set QSTASH_URL and QSTASH_TOKEN before any import"
        parser.addini(ENVIRON_SETTING, what, type="bool", default=False)

    def pytest_report_header(config: pytest.Config) -> Optional[str]:
        """Say at the start where QSTASH_URL names another server (a real QStash, perhaps)."""
        if "QSTASH_URL" not in os.environ or config.getini(ENVIRON_SETTING):
            return None
        said = "qstash-lists: QSTASH_URL is %s: a client your tests build at import talks to it; %s"
        return said % (os.environ["QSTASH_URL"], "add 'qstash_lists_environ = true' to pytest.ini")

    def pytest_configure(config: pytest.Config) -> None:
        if config.getini(ENVIRON_SETTING):
            _sessions.append(_Session(True))
            server = _sessions[0].server
            os.environ.update(QSTASH_URL=server.url, QSTASH_TOKEN=server.token)

    def pytest_unconfigure(config: pytest.Config) -> None:
        while _sessions:
            _sessions.pop().close()

    @pytest.fixture
    def qstash_data() -> Any:
        """The document each test's data file starts from (override it): one empty account."""
        return EMPTY_ACCOUNT

    @pytest.fixture
    def qstash_server(qstash_data: Any, monkeypatch: pytest.MonkeyPatch) -> Server:
        """The run's server, put back to ``qstash_data``, and QSTASH_URL and QSTASH_TOKEN set."""
        if not _sessions:
            _sessions.append(_Session(False))
        token = _sessions[0].reset(qstash_data)
        monkeypatch.setenv("QSTASH_URL", _sessions[0].server.url)
        monkeypatch.setenv("QSTASH_TOKEN", token)
        return cast(Server, _sessions[0].server)._replace(token=token)
