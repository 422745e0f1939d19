"""qstash-lists' pytest plugin (installed with the package): the ``qstash_server`` fixture, a fresh, writable
stand-in for QStash in each test.  ``pytest -p no:qstash_lists`` turns it off.

    def test_upsert(qstash_server):  # QSTASH_URL and QSTASH_TOKEN are set for the SDKs
        client = QStash(os.environ["QSTASH_TOKEN"], base_url=os.environ["QSTASH_URL"])
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

if TYPE_CHECKING or not __package__:  # beside app.py, loaded by name (-p pytest_plugin)
    import app
else:
    from . import app


@pytest.fixture
def qstash_data() -> Any:
    """The document each test's data file starts from: one empty account.  Override this fixture (in a test module
    or a conftest.py) to start from your own, in the data file's one-account form."""
    return {"urlGroups": [], "queues": []}


@pytest.fixture
def qstash_server(qstash_data: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[app.Server]:
    """A writable qstash-lists for this test alone, on a free port, serving a data file of its own (``qstash_data``);
    QSTASH_URL and QSTASH_TOKEN are set as the SDKs read them; ``.url``, ``.token`` and ``.path`` say the same.
    It stops when the test ends; each pytest-xdist worker has its own."""
    path = tmp_path / "qstash-lists.json"
    path.write_text(json.dumps(qstash_data), encoding="utf-8")
    with app.serve(str(path)) as server:
        monkeypatch.setenv("QSTASH_URL", server.url)
        monkeypatch.setenv("QSTASH_TOKEN", server.token)
        yield server
