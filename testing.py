"""qstash-lists in tests: serve() runs a stand-in in a thread on a free port, and the fixture
``qstash_server`` (this is the pytest plugin the package installs; ``-p no:qstash_lists`` turns
it off) gives each test a fresh state on one server for the whole run.

    from qstash_lists.testing import serve
"""

import contextlib
import functools
import json
import os
import secrets
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Optional

if TYPE_CHECKING or not __package__:  # beside app.py, loaded by name
    import app
else:
    from . import app

EMPTY_ACCOUNT: "dict[str, list[Any]]" = {"urlGroups": [], "queues": []}  # qstash_data's default
INTERVAL = 3600.0  # seconds between serve()'s looks: a writable server looks at every request
ENVIRON_SETTING = "qstash_lists_environ"  # the ini line that starts the server first (below)


class Server(NamedTuple):
    """A server that :func:`serve` runs: where it listens, the token of its one-account file, and
    the data file it serves."""

    url: str
    token: str
    path: str


@contextlib.contextmanager
def serve(
    data: Any,
    token: Optional[str] = None,
    *,
    writable: bool = True,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Iterator[Server]:
    """Serve ``data`` until the ``with`` block ends: a data file's path (a copy of it is served:
    the file is left as it was) or a document; on a free port and writable unless told; a
    one-account document gets ``token`` (default: a new random one).

    It does not set QSTASH_URL or QSTASH_TOKEN, set a signal handler, log a request, or exit."""
    with _serving(data, token, writable=writable, host=host, port=port) as (server, _):
        yield server


@contextlib.contextmanager
def _serving(
    data: Any, token: Optional[str], *, writable: bool, host: str, port: int
) -> Iterator["tuple[Server, Any]"]:
    """serve(), with the store.DataFile it serves."""
    token = token or secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="qstash-lists-") as folder:
        path = os.path.join(folder, "data.json")
        if isinstance(data, (str, os.PathLike)):
            shutil.copyfile(data, path)
        else:
            with open(path, "w", encoding="utf-8") as file:
                json.dump(data, file)
        # Waiting writes may hold half its threads (see store.WAITING_WRITES).
        waiting = app.SERVING_THREADS // 2
        source = app.open_data(path, token, INTERVAL, writable=writable, waiting_writes=waiting)
        try:
            with app.serving(source, host, port) as url:
                yield Server(url, token, path), source
        finally:
            source.close()


class _Session(contextlib.ExitStack):
    """The run's one server: started once (the first test that asks, or the ini setting), put
    back to each test's ``qstash_data`` before it (in place: its URL and token stay)."""

    def __init__(self) -> None:
        super().__init__()
        self.server, self._source = self.enter_context(
            _serving(EMPTY_ACCOUNT, None, writable=True, host="127.0.0.1", port=0)
        )

    def reset(self, document: Any) -> str:
        """Put the data file back to ``document``; return the token its tests use, as --run
        gives it: the server's for a one-account document, else the first account's that names
        its token in clear."""
        fresh = self._source.replace(json.dumps(document).encode())
        token = app._token_of(fresh, self.server.token)
        if token is None:
            raise ValueError(
                "qstash_data: QSTASH_TOKEN is set to the first account's 'token', and none has one"
            )
        return token


@functools.lru_cache(maxsize=None)  # the run's server in this process (an xdist worker's own)
def _the_session() -> _Session:
    return _Session()


try:
    import pytest
except ImportError:  # serve() needs no pytest
    pytest = None  # type: ignore[assignment]
if pytest is not None:

    def pytest_addoption(parser: pytest.Parser) -> None:
        parser.addini(
            ENVIRON_SETTING,
            "start the qstash-lists server when the run starts and set QSTASH_URL and "
            "QSTASH_TOKEN for it, before the tests are imported (an app that reads them once)",
            type="bool",
            default=False,
        )

    def pytest_configure(config: pytest.Config) -> None:
        if config.getini(ENVIRON_SETTING):
            server = _the_session().server
            os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"] = server.url, server.token

    def pytest_unconfigure(config: pytest.Config) -> None:
        if _the_session.cache_info().currsize:
            _the_session().close()
            _the_session.cache_clear()

    @pytest.fixture
    def qstash_data() -> Any:
        """The document each test's data file starts from: one empty account.  Override this fixture
        (in a test module or a conftest.py) to start from your own, in either form of the data
        file."""
        return EMPTY_ACCOUNT

    @pytest.fixture
    def qstash_server(qstash_data: Any, monkeypatch: pytest.MonkeyPatch) -> Server:
        """The run's writable qstash-lists, put back to ``qstash_data`` for this test (a few
        milliseconds); QSTASH_URL and QSTASH_TOKEN are set as the SDKs read them (``.url``,
        ``.token``, ``.path`` say the same).  Its URL stays for the run, and its token while the
        document's does; each pytest-xdist worker has its own."""
        session = _the_session()
        token = session.reset(qstash_data)
        monkeypatch.setenv("QSTASH_URL", session.server.url)
        monkeypatch.setenv("QSTASH_TOKEN", token)
        return session.server._replace(token=token)
