"""qstash-lists in tests: serve() runs a stand-in in a thread on a free port, and the fixture
``qstash_server`` (this is the pytest plugin the package installs; ``-p no:qstash_lists`` turns
it off) gives each test its own."""

import contextlib
import json
import os
import secrets
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Optional

if TYPE_CHECKING or not __package__:  # beside app.py, loaded by name
    import app
else:
    from . import app


class Server(NamedTuple):
    """A server that :func:`serve` runs: where it listens, the token of its one-account file, and
    the data file."""

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
    """Serve ``data`` (a data file's path, or its document, written to a file of its own that goes
    at the end) until the ``with`` block ends: on a free port unless told, writable unless told;
    a one-account document gets ``token`` (default: a new random one)."""
    from waitress import create_server

    token = token or secrets.token_urlsafe(16)
    with contextlib.ExitStack() as stack:
        if not isinstance(data, (str, os.PathLike)):
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="qstash-lists-"))
            with open(os.path.join(folder, "data.json"), "w", encoding="utf-8") as file:
                json.dump(data, file)
            data = file.name
        source = app.open_data(os.fspath(data), token, 3600, writable=writable)
        stack.callback(source.close)
        socket_map: "dict[int, Any]" = {}
        server = create_server(
            app.create_app(source, access_log=False),
            map=socket_map,
            host=host,
            port=port,
            threads=4,
            **app.WAITRESS_SETTINGS,
        )
        stop = threading.Event()
        thread = threading.Thread(
            target=app.run, args=(server, socket_map, 5.0, stop.is_set), name="qstash-lists server"
        )
        thread.start()
        try:
            yield Server(
                "http://%s:%s"
                % (host if ":" not in host else "[%s]" % host, server.effective_port),
                token,
                os.fspath(data),
            )
        finally:
            stop.set()
            server.pull_trigger()  # the loop wakes at once, and stops
            thread.join()


try:
    import pytest
except ImportError:  # serve() needs no pytest
    pytest = None  # type: ignore[assignment]
if pytest is not None:

    @pytest.fixture
    def qstash_data() -> Any:
        """The document each test's data file starts from: one empty account.  Override this fixture
        (in a test module or a conftest.py) to start from your own, in the data file's
        one-account form."""
        return {"urlGroups": [], "queues": []}

    @pytest.fixture
    def qstash_server(
        qstash_data: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[Server]:
        """A writable qstash-lists for this test alone, serving a data file of its own
        (``qstash_data``); QSTASH_URL and QSTASH_TOKEN are set as the SDKs read them (``.url``,
        ``.token``, ``.path`` say the same). It stops when the test ends; each pytest-xdist
        worker has its own."""
        path = tmp_path / "qstash-lists.json"
        path.write_text(json.dumps(qstash_data), encoding="utf-8")
        with serve(str(path)) as server:
            monkeypatch.setenv("QSTASH_URL", server.url)
            monkeypatch.setenv("QSTASH_TOKEN", server.token)
            yield server
