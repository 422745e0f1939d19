"""Live reload: new content is picked up, bad content never replaces good, readers never see a mix."""

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Set

from helpers import Q_TEMPLATE, TOKEN_A, bearer, call, write_json

import app as service
import store


def version(n: int, queues: int = 50) -> Dict[str, Any]:
    """A file whose every queue name says which version it belongs to."""
    return {"accounts": [{"token": TOKEN_A, "queues": [
        dict(Q_TEMPLATE, name="v%d-%d" % (n, i)) for i in range(queues + n)
    ]}]}


def names(response: Any) -> List[str]:
    return [q["name"] for q in response.json()]


def test_a_changed_file_is_served_without_a_restart(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", version(1, 1))
    app = service.create_app(service.open_data(str(path), None, interval=0), access_log=False)
    assert names(call(app, headers=bearer(TOKEN_A))) == ["v1-0", "v1-1"]
    write_json(path, version(2, 1))
    assert names(call(app, headers=bearer(TOKEN_A))) == ["v2-0", "v2-1", "v2-2"]


def test_a_bad_version_is_logged_once_and_the_last_good_one_served(tmp_path: Path, caplog: Any) -> None:
    path = write_json(tmp_path / "d.json", version(1, 1))
    data = service.open_data(str(path), None, interval=0)
    app = service.create_app(data, access_log=False)
    broken = version(2, 1)
    broken["accounts"][0]["queues"][1]["lag"] = "7"
    write_json(path, broken)
    with caplog.at_level(logging.INFO, "qstash_lists"):
        for _ in range(3):
            assert names(call(app, headers=bearer(TOKEN_A))) == ["v1-0", "v1-1"]
    assert [r.getMessage() for r in caplog.records] == [
        '%s: accounts[0].queues[1].lag: expected a non-negative integer, got "7"' % path,
        "%s: keeping the last good version" % path,
    ]
    write_json(path, version(3, 1))
    assert names(call(app, headers=bearer(TOKEN_A)))[0] == "v3-0"


def test_deleted_then_restored(tmp_path: Path, caplog: Any) -> None:
    path = write_json(tmp_path / "d.json", version(1, 1))
    data = service.open_data(str(path), None, interval=0)
    os.remove(path)
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        assert data.current().store.accounts[0].queues[0].name == "v1-0"
    assert "%s: cannot read: No such file or directory" % path in caplog.text
    write_json(path, version(2, 1))
    assert data.current().store.accounts[0].queues[0].name == "v2-0"


def test_truncated_file_keeps_the_last_good_version(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", version(1, 1))
    data = service.open_data(str(path), None, interval=0)
    text = json.dumps(version(2, 1))
    path.write_text(text[: len(text) // 2])
    assert data.current().store.accounts[0].queues[0].name == "v1-0"


def test_checks_at_most_once_per_interval(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", version(1, 1))
    data = service.open_data(str(path), None, interval=3600)
    write_json(path, version(2, 1))
    assert data.current().store.accounts[0].queues[0].name == "v1-0"  # not looked at yet
    data.refresh(force=True)  # what SIGHUP does
    assert data.current().store.accounts[0].queues[0].name == "v2-0"


def test_a_forced_reload_sees_an_edit_that_keeps_size_and_mtime(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", version(1, 1))
    data = service.open_data(str(path), None, interval=0)
    before = os.stat(path)
    path.write_text(path.read_text().replace("v1-", "v8-"))  # same size, new names
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert data.current().store.accounts[0].queues[0].name in ("v1-0", "v8-0")  # inode may differ
    data.refresh(force=True)
    assert data.current().store.accounts[0].queues[0].name == "v8-0"


def test_readers_see_whole_snapshots_while_the_file_churns(tmp_path: Path) -> None:
    """Writers rewrite the file (valid, invalid, truncated, deleted and restored)
    while reader threads call the app: every answer is 200 with a complete array
    that is exactly one version of the file."""
    path = write_json(tmp_path / "d.json", version(0))
    app = service.create_app(service.open_data(str(path), None, interval=0), access_log=False)
    expected = {n: [q["name"] for q in version(n)["accounts"][0]["queues"]] for n in range(17)}
    stop = threading.Event()
    seen: Set[int] = set()
    errors: List[str] = []

    def reader() -> None:
        while not stop.is_set():
            response = call(app, headers=bearer(TOKEN_A))
            if response.status != 200:
                errors.append("status %d" % response.status)
                continue
            got = names(response)
            n = int(got[0].split("-")[0][1:])
            if got != expected[n]:
                errors.append("version %d is not whole" % n)
            seen.add(n)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        for n in range(1, 17):
            text = json.dumps(version(n))
            kind = n % 4
            if kind == 1:  # half written, then finished
                path.write_text(text[: len(text) // 3])
                path.write_text(text)
            elif kind == 2:  # deleted, then restored by an atomic rename
                os.remove(path)
                (tmp_path / "new.json").write_text(text)
                os.replace(tmp_path / "new.json", path)
            elif kind == 3:  # not JSON, then valid
                path.write_text("{not json")
                path.write_text(text)
            else:
                path.write_text(text)
            for _ in range(20):  # let the readers see it
                if n in seen:
                    break
                threading.Event().wait(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len(seen) > 8, sorted(seen)
    assert store.load(str(path), None).accounts[0].queues[0].name == "v16-0"
