"""pytest fixtures; the helpers they use live in helpers.py, which tests import by name."""

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
