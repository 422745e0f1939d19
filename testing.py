"""qstash-lists in tests: serve() runs a stand-in in a thread on a free port, and the fixture
``qstash_server`` (this is the pytest plugin the package installs; ``-p no:qstash_lists`` turns
it off) gives each test a fresh state on one server for the whole run.

    from qstash_lists.testing import serve
"""

import contextlib
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
INTERVAL = 3600.0  # seconds between serve()'s looks: a writable server looks at every request
ENVIRON_SETTING = "qstash_lists_environ"  # the ini line that starts the server first (below)
FIXTURE = "the qstash_data fixture"  # what a fault in it names


class Server(NamedTuple):
    """A server serve() runs: its URL, its clients' token (see _token), the data file it serves."""

    url: str
    token: str
    path: str


@contextlib.contextmanager
def serve(data: Any, token: Optional[str] = None) -> Iterator[Server]:
    """Serve ``data`` until the ``with`` block ends, writable, on a free loopback port: a data
    file's path (a copy of it is served: the file is left as it was) or a document; a one-account
    document gets ``token`` (default: a new random one).  A fault names ``data``.  It does not
    set QSTASH_URL or QSTASH_TOKEN, set a signal handler, log a request, or exit."""
    if isinstance(data, (str, os.PathLike)):
        raw, source = Path(data).read_bytes(), str(data)
    else:
        raw, source = json.dumps(data).encode(), "serve()'s document"
    with _serving(raw, source, token) as (server, _):
        yield server


@contextlib.contextmanager
def _serving(raw: bytes, source: str, token: Optional[str]) -> Iterator["tuple[Server, Any]"]:
    """serve() of the data file ``raw``, whose faults name ``source``; and its DataFile."""
    token = token or secrets.token_urlsafe(16)
    clients = _token(raw, source, token)  # checked before any copy is made
    with tempfile.TemporaryDirectory(prefix="qstash-lists-") as folder:
        path = os.path.join(folder, "data.json")
        Path(path).write_bytes(raw)
        # Waiting writes may hold half its threads (see store.WAITING_WRITES).
        waiting = app.SERVING_THREADS // 2
        data = app.open_data(path, token, INTERVAL, writable=True, waiting_writes=waiting)
        try:
            with app.serving(data) as url:
                yield Server(url, clients, path), data
        finally:
            data.close()


def _token(raw: bytes, source: str, token: str) -> str:
    """The token clients of the file ``raw`` send, as --run's; DataError naming ``source``."""
    found = app._token_of(app.store.parse(raw, source, token), token)
    if found is None:
        raise ValueError("%s: clients use the first account's 'token'; none has one" % source)
    return found


class _Session:
    """The run's one server, put back to each test's ``qstash_data`` before it (its URL and token
    stay).  ``first``: the first account answers the run's own token, which the ini line gave
    QSTASH_TOKEN before any qstash_data was known."""

    def __init__(self, first: bool) -> None:
        self.first = first
        self._stack = contextlib.ExitStack()
        raw = json.dumps(EMPTY_ACCOUNT).encode()
        self.server, self._data = self._stack.enter_context(_serving(raw, FIXTURE, None))
        self.close = self._stack.close

    def reset(self, document: Any) -> str:
        """Put the data file back to ``document``, whatever a test left in it; return its token."""
        accounts = document.get("accounts") if type(document) is dict else None
        if self.first and type(accounts) is list and accounts and type(accounts[0]) is dict:
            first = {k: v for k, v in accounts[0].items() if k not in ("token", "tokenSha256")}
            first["token"] = self.server.token
            document = dict(document, accounts=[first] + accounts[1:])
        raw = json.dumps(document).encode()
        token = _token(raw, FIXTURE, self.server.token)
        self._data.replace(raw)  # written whole, even where a test broke the file
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
        return (
            "qstash-lists: QSTASH_URL is %s: a client your tests build at import talks to it; add "
            "'qstash_lists_environ = true' to pytest.ini to give it the stand-in"
        ) % os.environ["QSTASH_URL"]

    def pytest_configure(config: pytest.Config) -> None:
        if config.getini(ENVIRON_SETTING):
            _sessions.append(_Session(True))
            server = _sessions[0].server
            os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"] = server.url, server.token

    def pytest_unconfigure(config: pytest.Config) -> None:
        while _sessions:
            _sessions.pop().close()

    @pytest.fixture
    def qstash_data() -> Any:
        """The document each test's data file starts from: one empty account (override it in a
        module or a conftest.py, in either form of the data file)."""
        return EMPTY_ACCOUNT

    @pytest.fixture
    def qstash_server(qstash_data: Any, monkeypatch: pytest.MonkeyPatch) -> Server:
        """The run's writable qstash-lists, put back to ``qstash_data`` for this test;
        QSTASH_URL and QSTASH_TOKEN set as the SDKs read them (``.url``, ``.token``, ``.path``
        say the same).  Each pytest-xdist worker has its own."""
        if not _sessions:
            _sessions.append(_Session(False))
        token = _sessions[0].reset(qstash_data)
        monkeypatch.setenv("QSTASH_URL", _sessions[0].server.url)
        monkeypatch.setenv("QSTASH_TOKEN", token)
        return _sessions[0].server._replace(token=token)
