"""qstash-lists in tests: ``from qstash_lists.testing import serve`` runs a stand-in in a thread on
a free port; the fixture ``qstash_server`` (this pytest plugin; ``-p no:qstash_lists`` turns it
off) gives each test a fresh state on one server for the whole run."""

import contextlib
import http.client
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Optional

if TYPE_CHECKING or not __package__:  # beside app.py, loaded by name
    import app
else:
    from . import app

EMPTY_ACCOUNT: "dict[str, list[Any]]" = {"urlGroups": [], "queues": []}  # qstash_data's default
ENVIRON_SETTING = "qstash_lists_environ"  # the ini line that starts the server first (below)
FIXTURE = "the qstash_data fixture"  # what a fault in it names


class Server(NamedTuple):
    """A server serve() runs: its URL, its clients' token (see _token), the data file it serves;
    and the bad days of the token's account (docs/http.md)."""

    url: str
    token: str
    path: str

    def fault(self, **fault: Any) -> None:
        """Have the next requests meet a fault: the keys of POST /qstash-lists/faults, such as
        status=429, times=2, daily=True, method="POST", path="/v2/queues*", delay=0.5, drop=True."""
        self._ask("POST", app.FAULTS_PATH, json.dumps(fault).encode())

    def clear_faults(self) -> None:
        self._ask("DELETE", app.FAULTS_PATH)

    def requests(self) -> "list[dict[str, Any]]":
        """What the account asked since the test (or serve()) began, oldest first."""
        return json.loads(self._ask("GET", app.REQUESTS_PATH))  # type: ignore[no-any-return]

    def _ask(self, method: str, path: str, body: Optional[bytes] = None) -> bytes:
        # Never through a proxy, as urllib would take one from the environment.
        connection = http.client.HTTPConnection(self.url.partition("//")[2])
        try:
            connection.request(method, path, body, {"Authorization": "Bearer " + self.token})
            answer = connection.getresponse()
            data = answer.read()
        finally:
            connection.close()
        if answer.status >= 400:  # the server's words: a fault's bad key, say
            raise ValueError(json.loads(data)["error"])
        return data


@contextlib.contextmanager
def serve(data: Any, token: Optional[str] = None) -> Iterator[Server]:
    """Serve ``data`` (a data file's path, whose copy is served, or a document; a one-account one
    gets ``token``, else a random one), writable, on a free loopback port, until the block ends.
    It sets no environment variable or signal handler, logs no request, never exits."""
    if isinstance(data, (str, os.PathLike)):
        raw, source = Path(data).read_bytes(), str(data)
    else:
        raw, source = json.dumps(data).encode(), "serve()'s document"
    with _serving(raw, source, token) as served:
        yield served.server


class _Served(NamedTuple):
    """A copy of a data file served: its Server, DataFile and BadDays, and (the plugin's) whether
    its first account answers the token the ini line gave QSTASH_TOKEN at the start."""

    server: Server
    data: Any
    days: Any
    first: bool = False


@contextlib.contextmanager
def _serving(raw: bytes, source: str, token: Optional[str]) -> Iterator[_Served]:
    """serve() of the data file ``raw``, whose faults name ``source``."""
    token = token or secrets.token_urlsafe(16)
    clients = _token(raw, source, token)  # checked before any copy is made
    with tempfile.TemporaryDirectory(prefix="qstash-lists-") as folder:
        path = os.path.join(folder, "data.json")
        Path(path).write_bytes(raw)
        # Waiting writes may hold half its threads (see store.WAITING_WRITES).
        waiting = app.SERVING_THREADS // 2
        data = app.open_data(path, token, 3600, writable=True, waiting_writes=waiting)
        days = app.BadDays()
        try:
            with app.serving(data, resets=days) as url:
                yield _Served(Server(url, clients, path), data, days)
        finally:
            data.close()


def _token(raw: bytes, source: str, token: str) -> str:
    """The token clients of the file ``raw`` send, as --run's; DataError naming ``source``."""
    found = app._token_of(app.store.parse(raw, source, token), token)
    if found is None:
        raise ValueError("%s: clients use the first account's 'token'; none has one" % source)
    return found


def _put_back(served: _Served, document: Any) -> str:
    """Write ``document`` whole, whatever a test left, and forget the bad days; its token."""
    accounts = document.get("accounts") if type(document) is dict else None
    if served.first and type(accounts) is list and accounts and type(accounts[0]) is dict:
        account = {k: v for k, v in accounts[0].items() if k not in ("token", "tokenSha256")}
        account["token"] = served.server.token
        document = dict(document, accounts=[account] + accounts[1:])
    raw = json.dumps(document).encode()
    token = _token(raw, FIXTURE, served.server.token)
    served.data.replace(raw)
    served.days.clear()
    return token


_run = contextlib.ExitStack()  # the run's server in this process (an xdist worker's own)
_session: "list[_Served]" = []  # it

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
        if "QSTASH_URL" in os.environ and not config.getini(ENVIRON_SETTING):
            return (
                "qstash-lists: QSTASH_URL is %s: a client your tests build at import talks to it; "
                "add 'qstash_lists_environ = true' to pytest.ini to give it the stand-in"
            ) % os.environ["QSTASH_URL"]
        return None

    def _start(first: bool) -> _Served:
        raw = json.dumps(EMPTY_ACCOUNT).encode()
        _session.append(_run.enter_context(_serving(raw, FIXTURE, None))._replace(first=first))
        return _session[0]

    def pytest_configure(config: pytest.Config) -> None:
        if config.getini(ENVIRON_SETTING):
            server = _start(True).server
            os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"] = server.url, server.token

    def pytest_unconfigure(config: pytest.Config) -> None:
        _session.clear()
        _run.close()

    @pytest.fixture
    def qstash_data() -> Any:
        """The document each test's data file starts from (override it): one empty account."""
        return EMPTY_ACCOUNT

    @pytest.fixture
    def qstash_server(qstash_data: Any, monkeypatch: pytest.MonkeyPatch) -> Server:
        """The run's writable qstash-lists, put back to ``qstash_data`` for this test, and
        QSTASH_URL and QSTASH_TOKEN set as the SDKs read them.  Each xdist worker has its own."""
        served = _session[0] if _session else _start(False)
        token = _put_back(served, qstash_data)
        monkeypatch.setenv("QSTASH_URL", served.server.url)
        monkeypatch.setenv("QSTASH_TOKEN", token)
        return served.server._replace(token=token)
