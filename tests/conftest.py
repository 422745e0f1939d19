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


# Started from a background job (a CI runner, nohup), SIGINT is ignored, and a child process would
# inherit that: waitress-serve, which leaves SIGINT to Python's default handler, could not be
# stopped with it.  A Python handler is reset to the default in a child, as an interactive shell does.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
