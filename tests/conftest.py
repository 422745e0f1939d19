"""pytest fixtures; the helpers they use live in helpers.py, which tests import by name."""

import signal
from pathlib import Path
from typing import Any

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
# would
# inherit that: waitress-serve could not be stopped with SIGINT, and the app would leave SIGHUP
# alone.
# A Python handler is reset to the default in a child, as a shell starts it; this run keeps nohup's
# intent (a hangup does not end it).
for _signum, _handler in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGHUP, lambda *args: None),
):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, _handler)
