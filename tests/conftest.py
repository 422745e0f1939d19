"""pytest fixtures; the helpers they use live in helpers.py, which tests import by name."""

import faulthandler
import os
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest
from helpers import accounts_document, write_json

import app as service


@pytest.fixture
def data_path(tmp_path: Path) -> Path:
    return write_json(tmp_path / "data.json", accounts_document())


@pytest.fixture
def app(data_path: Path) -> Any:
    return service.create_app(service.open_data(str(data_path), None), access_log=False)


# Started from a background job or under nohup, SIGINT or SIGHUP is ignored, and a child process
# would inherit that: waitress-serve could not be stopped with SIGINT, and the app would leave
# SIGHUP alone.  A Python handler is reset to the default in a child, as a shell starts it; this
# run keeps nohup's intent (a hangup does not end it).
for _signum, _handler in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGHUP, lambda *args: None),
):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, _handler)


# A test that hangs ends its process with every thread's stack on the terminal's stderr, instead of
# holding the run until CI's time is up (a cleanup that waited forever once took all 90 minutes).
# It is a watchdog, not a timing: the slowest test takes 23 s under coverage (CI names five).
HANG_SECONDS = 600


def pytest_configure(config: Any) -> None:
    config.hang_stderr = os.dup(2)  # the terminal's (pytest captures fd 2 around each test)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=item.config.hang_stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
