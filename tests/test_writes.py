"""--writable: QStash's writes of queues and URL groups, each saved to the data file whole before
its 200."""

import copy
import errno
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, cast

import pytest
from helpers import (
    ALPHA_GROUP,
    ALPHA_QUEUE,
    ROOT,
    SIGNING_KEYS,
    TOKEN_A,
    TOKEN_B,
    TOKEN_C,
    Response,
    accounts_document,
    bearer,
    call,
    free_port,
    served,
    serving,
    started,
    upsert,
    write_json,
)

import app as service
import store


def send(
    app: Any,
    method: str,
    path: str,
    body: Any = None,
    token: str = TOKEN_A,
    raw: Optional[bytes] = None,
) -> Response:
    """One write as the SDKs send it: JSON with spaces after separators (Python's), or no body at
    all."""
    data = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
    environ: Dict[str, Any] = {
        "wsgi.input": io.BytesIO(data),
        "CONTENT_LENGTH": str(len(data)) if data else "",
    }
    return call(app, path, method=method, headers=bearer(token), **environ)


def wrote(response: Response) -> None:
    """A write's answer as QStash's: 200 without content, kept by no cache."""
    assert (response.status, response.body) == (200, b""), response
    assert response.headers["Content-Length"] == "0"
    assert response.headers["Cache-Control"] == "no-store"


def write(app: Any, method: str, path: str, body: Any = None, token: str = TOKEN_A) -> None:
    """Make a write and check its answer (see wrote)."""
    wrote(send(app, method, path, body, token))


def item(app: Any, path: str, token: str = TOKEN_A) -> Any:
    """The item at ``path`` as the server answers it now; None if it is not there."""
    response = call(app, path, headers=bearer(token))
    assert response.status in (200, 404), response
    return response.json() if response.status == 200 else None


@pytest.fixture
def path(data_path: Path) -> Path:
    return data_path


@pytest.fixture
def writable(path: Path) -> Any:
    return service.create_app(
        service.open_data(str(path), None, interval=3600, writable=True), access_log=False
    )


def on_disk(path: Path) -> Any:
    return json.loads(path.read_text())


def test_upsert_creates_then_updates_a_queue_keeping_created_at(writable: Any, path: Path) -> None:
    write(writable, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1, "paused": False})
    queue = item(writable, "/v2/queues/jobs")
    assert queue == dict(queue, name="jobs", parallelism=1, lag=0, paused=False)
    assert (
        queue["createdAt"] == queue["updatedAt"]
        and abs(queue["createdAt"] / 1000 - __import__("time").time()) < 60
    )
    write(writable, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 2, "paused": True})
    updated = item(writable, "/v2/queues/jobs")
    assert updated["createdAt"] == queue["createdAt"] and updated["updatedAt"] >= queue["updatedAt"]
    assert (updated["parallelism"], updated["paused"]) == (2, True)
    assert [q["name"] for q in call(writable, "/v2/queues", headers=bearer(TOKEN_A)).json()] == [
        "emails",
        "jobs",
    ]
    assert on_disk(path)["accounts"][0]["queues"][1] == updated  # on disk before the 200
    # A line a queue.
    assert path.read_text().splitlines()[:2] == ['{"accounts": [', '{"token": "token-a",']


def test_an_upsert_without_paused_keeps_the_queues_and_the_writer_does_not_read_its_own_write_again(
    writable: Any, caplog: Any, monkeypatch: Any
) -> None:
    import logging

    loads: List[int] = []
    real = store.DataFile._load

    def load(*args: Any) -> Any:
        loads.append(1)
        return real(*args)

    monkeypatch.setattr(store.DataFile, "_load", load)
    with caplog.at_level(logging.INFO, "qstash_lists"):
        write(writable, "POST", "/v2/queues/emails/pause")
        write(writable, "POST", "/v2/queues", {"queueName": "emails", "parallelism": 3})
        assert item(writable, "/v2/queues/emails")["paused"]
        assert item(writable, "/v2/queues/emails")["parallelism"] == 3
    # Its own version is in service already, as the very file renamed in: no read looks again.
    assert "reloaded" not in caplog.text and loads == []


def test_a_writer_that_opened_a_version_replaced_before_its_lock_takes_the_new_one(
    path: Path, monkeypatch: Any
) -> None:
    """Another process renames a new version over the file between this open and its lock."""
    real, replaced = store._open, cast(List[int], [])

    def open_then_replaced(target: str) -> int:
        fd = real(target)
        if not replaced:
            replaced.append(1)
            document = on_disk(path)
            document["accounts"][1]["queues"] = []
            write_json(path.with_suffix(".new"), document)
            os.replace(path.with_suffix(".new"), path)
        return fd

    monkeypatch.setattr(store, "_open", open_then_replaced)
    with store._locked(str(path), time.monotonic() + 1) as held:
        assert (
            held.stat.st_ino == path.stat().st_ino and on_disk(path)["accounts"][1]["queues"] == []
        )


def test_pause_resume_and_delete(writable: Any) -> None:
    write(writable, "POST", "/v2/queues/emails/pause")
    assert item(writable, "/v2/queues/emails")["paused"] is True
    write(writable, "POST", "/v2/queues/emails/pause")  # already paused: no effect
    write(writable, "POST", "/v2/queues/emails/resume")
    assert item(writable, "/v2/queues/emails")["paused"] is False
    assert send(writable, "POST", "/v2/queues/nothere/pause").json() == {
        "error": 'not found: no queue named "nothere"'
    }
    write(writable, "DELETE", "/v2/queues/emails")
    assert item(writable, "/v2/queues") == []
    # Deleting what is not there: nothing to do.
    write(writable, "DELETE", "/v2/queues/emails")
    assert item(writable, "/v2/queues/emails") is None


def test_endpoints_are_added_and_removed_and_the_last_one_takes_the_group(
    writable: Any, path: Path
) -> None:
    one, two = {"url": "https://a.example/1"}, {"name": "second", "url": "https://a.example/2"}
    write(writable, "POST", "/v2/topics/fresh/endpoints", {"endpoints": [one, two]})
    group = item(writable, "/v2/topics/fresh")
    assert (group["name"], group["endpoints"]) == ("fresh", [one, two])
    write(writable, "POST", "/v2/topics/fresh/endpoints", {"endpoints": [one]})
    assert item(writable, "/v2/topics/fresh")["endpoints"] == [one, two]
    # A name replaces the endpoint of that name.
    moved = {"name": "second", "url": "https://b.example/2"}
    write(writable, "POST", "/v2/topics/fresh/endpoints", {"endpoints": [moved]})
    assert item(writable, "/v2/topics/fresh")["endpoints"] == [one, moved]
    write(writable, "DELETE", "/v2/topics/fresh/endpoints", {"endpoints": [{"name": "second"}]})
    assert item(writable, "/v2/topics/fresh")["endpoints"] == [one]
    write(writable, "DELETE", "/v2/topics/fresh/endpoints", {"endpoints": [one]})
    assert item(writable, "/v2/topics/fresh") is None
    assert [g["name"] for g in on_disk(path)["accounts"][0]["urlGroups"]] == ["orders"]
    assert (
        send(writable, "DELETE", "/v2/topics/fresh/endpoints", {"endpoints": [one]}).status == 404
    )
    write(writable, "DELETE", "/v2/topics/orders")
    write(writable, "DELETE", "/v2/topics/orders")
    assert call(writable, "/v2/topics", headers=bearer(TOKEN_A)).json() == []


def test_a_write_changes_the_tokens_own_account_and_nothing_else(writable: Any, path: Path) -> None:
    before = on_disk(path)
    send(
        writable,
        "POST",
        "/v2/queues",
        {"queueName": "emails", "parallelism": 9, "paused": False},
        token=TOKEN_B,
    )
    send(
        writable,
        "POST",
        "/v2/topics/orders/endpoints",
        {"endpoints": [{"url": "https://c.example/"}]},
        token=TOKEN_C,
    )  # an account given by its token's digest
    after = on_disk(path)
    # A's untouched.
    assert after["accounts"][0]["queues"] == [served(q) for q in before["accounts"][0]["queues"]]
    assert after["accounts"][0]["urlGroups"] == [
        served(g) for g in before["accounts"][0]["urlGroups"]
    ]
    assert after["accounts"][0]["signingKeys"] == SIGNING_KEYS
    assert [q["name"] for q in after["accounts"][1]["queues"]] == ["reports", "emails"]
    assert after["accounts"][2]["tokenSha256"] == before["accounts"][2]["tokenSha256"]
    assert after["accounts"][2]["urlGroups"][0]["endpoints"] == [{"url": "https://c.example/"}]
    assert call(writable, "/v2/topics/orders", headers=bearer(TOKEN_A)).json() == ALPHA_GROUP


BAD = [
    ("POST", "/v2/queues", b"not json", "bad request: the body is not UTF-8 JSON"),
    ("POST", "/v2/queues", b"[]", "bad request: the body is not a JSON object"),
    ("POST", "/v2/queues", b"", "bad request: the body is not UTF-8 JSON"),
    ("POST", "/v2/queues", b"[" * 30000 + b"]" * 30000, "bad request: the body is not UTF-8 JSON"),
    (
        "POST",
        "/v2/queues",
        {"parallelism": 1},
        "bad request: queueName: expected a name of only letters, digits, '-', '.' and "
        "'_', not dots alone, at "
        "most 200 characters, got nothing",
    ),
    (
        "POST",
        "/v2/queues",
        {"queueName": "a b", "parallelism": 1},
        "bad request: queueName: expected a name of only letters, digits, '-', '.' and "
        "'_', not dots alone, at "
        'most 200 characters, got "a b"',
    ),
    (
        "POST",
        "/v2/queues",
        {"queueName": "q" * 201, "parallelism": 1},
        "bad request: queueName: expected a name of only letters, digits, '-', '.' and "
        "'_', not dots alone, at "
        'most 200 characters, got "%s' % ("q" * 59),
    ),
    (
        "POST",
        "/v2/queues",
        {"queueName": "q", "parallelism": 0},
        "bad request: parallelism: expected a whole number from 1 to 2**53 - 1 (1 if left out), "
        "got 0",
    ),
    (
        "POST",
        "/v2/queues",
        {"queueName": "q", "parallelism": "2"},
        "bad request: parallelism: expected a whole number from 1 to 2**53 - 1 (1 if left out), "
        'got "2"',
    ),
    (
        "POST",
        "/v2/queues",
        {"queueName": "q", "parallelism": 1, "paused": "yes"},
        'bad request: paused: expected true or false, got "yes"',
    ),
    (
        "POST",
        "/v2/topics/g/endpoints",
        {"endpoints": []},
        "bad request: endpoints: expected a non-empty array of endpoints, got []",
    ),
    (
        "POST",
        "/v2/topics/g/endpoints",
        {"endpoint": [{"url": "https://a/"}]},
        "bad request: endpoints: expected a non-empty array of endpoints, got nothing",
    ),
    (
        "POST",
        "/v2/topics/g/endpoints",
        {"endpoints": [{"name": "n"}]},
        "bad request: endpoints[0]: expected an object with an absolute http or https url, and a "
        "printable name if any",
    ),
    (
        "POST",
        "/v2/topics/g/endpoints",
        {"endpoints": [{"url": "ftp://a/"}]},
        "bad request: endpoints[0]: expected an object with an absolute http or https url, and a "
        "printable name if any",
    ),
    (
        "DELETE",
        "/v2/topics/orders/endpoints",
        {"endpoints": [{}]},
        "bad request: endpoints[0]: expected an object with an absolute http or https url, or a "
        "name, and a printable name if any",
    ),
    (
        "POST",
        "/v2/topics/a%20b/endpoints",
        {"endpoints": [{"url": "https://a/"}]},
        "bad request: a URL group's name has only letters, digits, '-', '.' and "
        "'_', not dots alone",
    ),
    (
        "DELETE",
        "/v2/queues/caf\xc3\xa9",
        None,
        "bad request: a queue's name has only letters, digits, '-', '.' and '_', not dots alone",
    ),
]


@pytest.mark.parametrize("method, route, body, message", BAD)
def test_bad_input_gets_a_400_naming_the_field_and_writes_nothing(
    writable: Any, path: Path, method: str, route: str, body: Any, message: str
) -> None:
    before = path.read_bytes()
    if isinstance(body, bytes):
        response = send(writable, method, route, raw=body)
    else:
        response = send(writable, method, route, body)
    assert (response.status, response.json()) == (400, {"error": message})
    assert path.read_bytes() == before


def test_a_message_is_escaped_once(writable: Any) -> None:
    """The SDK user reads the body as it is: a value outside the rule shows as written, in UTF-8."""
    response = send(writable, "POST", "/v2/queues", {"queueName": "ünï", "parallelism": 1})
    message = (
        'bad request: queueName: expected a name of %s, at most 200 characters, got "ünï"'
        % store.NAME_RULE
    )
    assert (
        response.body
        == json.dumps({"error": message}, ensure_ascii=False, separators=(",", ":")).encode()
    )


def test_a_body_over_the_limit_is_refused_unread(writable: Any, path: Path) -> None:
    before = path.read_bytes()
    response = send(writable, "POST", "/v2/queues", raw=b" " * (service.MAX_BODY + 1))
    assert response.status == 413 and path.read_bytes() == before


@pytest.mark.parametrize(
    "edit, logged",
    [
        (
            lambda text: text.replace('"lag": 0', '"lag": "0"'),
            'queues[0].lag: expected an integer from 0 to 2**53 - 1, got "0"',
        ),
        (  # past --max-size: it does not load either
            lambda text: text + " " * 1000,
            "over the limit of",
        ),
    ],
)
def test_a_write_after_a_bad_hand_edit_is_refused_and_the_file_kept(
    path: Path, caplog: Any, edit: Callable[[str], str], logged: str
) -> None:
    limit = path.stat().st_size + 500
    app = service.create_app(
        service.open_data(str(path), None, interval=3600, writable=True, max_size=limit),
        access_log=False,
    )
    # The reloader has not looked yet.
    path.write_text(edit(path.read_text()))
    edited = path.read_bytes()
    response = send(
        app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1, "paused": False}
    )
    assert response.status == 409
    assert response.json()["error"].startswith(
        "conflict: the data file on the server was edited and does not load"
    )
    assert path.read_bytes() == edited
    assert logged in caplog.text


def test_a_write_whose_file_cannot_be_read_now_is_a_503_not_a_409(
    writable: Any, path: Path, monkeypatch: Any
) -> None:
    """An I/O error is no fault of the file's (which a 409 would say): try again."""

    def failing(read: Any, limit: int) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store, "read_at_most", failing)
    before = path.read_bytes()
    response = send(writable, "POST", "/v2/queues", {"queueName": "jobs"})
    assert (response.status, response.headers["Retry-After"]) == (503, "1")
    assert path.read_bytes() == before


def test_a_write_on_a_file_system_that_refuses_the_lock_is_a_503_naming_it(
    writable: Any, path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """ENOLCK (an NFS lock manager that does not answer): nothing written, try again."""
    import fcntl

    def refused(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", refused)
    before = path.read_bytes()
    response = send(writable, "POST", "/v2/queues", {"queueName": "jobs"})
    assert (response.status, response.headers["Retry-After"]) == (503, "1")
    assert path.read_bytes() == before
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "%s: cannot lock: %s; nothing was written" % (path, os.strerror(errno.ENOLCK))
    ]


def test_a_write_that_would_pass_the_size_limit_is_refused(path: Path) -> None:
    limit = len(json.dumps(on_disk(path), indent=2)) + 60
    app = service.create_app(
        service.open_data(str(path), None, interval=3600, writable=True, max_size=limit),
        access_log=False,
    )
    before = path.read_bytes()
    response = send(
        app,
        "POST",
        "/v2/topics/big/endpoints",
        {"endpoints": [{"url": "https://a.example/%d" % i} for i in range(10)]},
    )
    assert response.status == 507 and path.read_bytes() == before


def test_a_new_kind_of_refusal_answers_as_its_nearest_parent() -> None:
    """The refusals are looked up along the class's MRO: a new subclass of TooLarge is a 507, of
    DataError a 503 with Retry-After, never the answer of whatever is listed last."""

    class Over(store.TooLarge):
        pass

    class Other(store.DataError):
        pass

    too_large = service._refused(Over(["x: over"]))
    assert too_large.status == 507 and too_large.why == "too large"
    other = service._refused(Other(["x: other"]))
    assert other.status == 503 and ("Retry-After", "1") in other.render().headers
    assert service._refused(store.Busy(["x: busy"])).status == 503


def test_mode_owner_and_symlink_are_kept(tmp_path: Path) -> None:
    target = write_json(tmp_path / "real.json", accounts_document())
    os.chmod(target, 0o644)
    link = tmp_path / "data.json"
    link.symlink_to(target)
    app = service.create_app(
        service.open_data(str(link), None, interval=3600, writable=True), access_log=False
    )
    send(app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1, "paused": False})
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [q["name"] for q in on_disk(target)["accounts"][0]["queues"]] == ["emails", "jobs"]
    # No temporary file left.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.json", "real.json"]


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root, to make the users: run the suite as root (CI does)",
)
def test_a_writer_of_the_files_group_keeps_the_group_and_the_mode() -> None:
    """Two users of one group (staff) write one file (0660, in their group's folder): a write by
    the one who does not own it keeps its group, so the owner's own server still reads it (only
    root can keep the owner too)."""
    owner, writer, staff = 1000, 33, 50
    top = tempfile.mkdtemp()
    try:
        os.chmod(top, 0o755)
        os.chown(top, 0, staff)
        os.chmod(top, 0o770)
        path = write_json(Path(top) / "data.json", {"queues": []})
        os.chown(path, owner, staff)
        os.chmod(path, 0o660)
        data = store.DataFile(str(path), "t", 3600, writable=True)
        digest = hashlib.sha256(b"t").digest()
        pid = os.fork()
        if pid == 0:  # the writer: no file but this one is opened
            try:
                os.setgroups([staff])
                os.setgid(writer)
                os.setuid(writer)
                data.update(digest, lambda a, now: store.upsert_queue(a, now, "jobs", 1, None))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        data.close()
        after = path.stat()
        assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (writer, staff, 0o660)
        assert [q["name"] for q in on_disk(path)["queues"]] == ["jobs"]
    finally:
        shutil.rmtree(top)


def test_an_interrupted_write_removes_its_temporary_file_and_keeps_the_old(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = write_json(tmp_path / "data.json", accounts_document())
    before = path.read_bytes()

    data = store.DataFile(str(path), interval=3600, writable=True)

    def interrupted(fd: int) -> None:
        raise SystemExit(0)  # what SIGTERM raises before serving (app._stop)

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(SystemExit):
        data.replace(
            json.dumps({"accounts": [{"token": TOKEN_A, "queues": [ALPHA_QUEUE]}]}).encode()
        )
    data.close()
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["data.json"]


def test_the_one_account_form_is_written_in_place(tmp_path: Path) -> None:
    path = write_json(tmp_path / "one.json", {"queues": [ALPHA_QUEUE]})
    app = service.create_app(
        service.open_data(str(path), "t", interval=3600, writable=True), access_log=False
    )
    assert send(app, "DELETE", "/v2/queues/emails", token="t").status == 200
    assert on_disk(path) == {"urlGroups": [], "queues": []}


def test_a_write_is_logged_with_what_it_did(writable: Any, caplog: Any, path: Path) -> None:
    app = service.create_app(service.open_data(str(path), None, interval=3600, writable=True))
    import logging

    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        send(app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1, "paused": False})
        send(app, "DELETE", "/v2/queues/none")
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith('- "POST /v2/queues" 200 ') and lines[0].endswith(" (queue created)")
    assert lines[1].startswith('- "DELETE /v2/queues/none" 200 ') and lines[1].endswith(
        " (not there)"
    )
    assert TOKEN_A not in caplog.text


def _upserts(url: str, names: List[str], token: str = TOKEN_A) -> List[int]:
    import http.client
    import urllib.parse

    host = urllib.parse.urlsplit(url)
    statuses = []
    conn = http.client.HTTPConnection(str(host.hostname), host.port, timeout=30)
    for name in names:
        body = json.dumps({"queueName": name, "parallelism": 1, "paused": False})
        conn.request(
            "POST",
            "/v2/queues",
            body,
            {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
    conn.close()
    return statuses


@contextmanager
def writers(how: str, path: Path) -> Iterator[List[str]]:
    """The URLs of two processes that write one file: two replicas (python app.py), or one
    documented gunicorn or uWSGI recipe's two processes behind one port."""
    if how == "replicas":
        with (
            serving(path, "--writable", "--quiet") as one,
            serving(path, "--writable", "--quiet") as two,
        ):
            yield [one.url, two.url]
        return
    from test_hostile import deploy_command, wait_until_answered
    from test_workers import NO_UWSGI, UWSGI

    if how == "uwsgi" and UWSGI is None:
        pytest.skip(NO_UWSGI)
    port = free_port()
    command = (
        [UWSGI or ""] + deploy_command(how, port)[1:]
        if how == "uwsgi"
        else [sys.executable, "-m"] + deploy_command(how, port)
    )
    env = {"QSTASH_LISTS_DATA": str(path), "QSTASH_LISTS_WRITABLE": "1", "PYTHONPATH": str(ROOT)}
    with started(
        command, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(path.parent)
    ):
        wait_until_answered(port)
        yield ["http://127.0.0.1:%d" % port] * 2


@pytest.mark.parametrize("how", ["replicas", "gunicorn", "uwsgi"])
def test_200_upserts_from_8_clients_through_two_processes_all_land(
    tmp_path: Path, how: str
) -> None:
    """Two processes on one file, eight clients, 200 upserts: every one is in the file and in the
    next list from either process (a write in one is seen by the next read in the other)."""
    path = write_json(tmp_path / "data.json", accounts_document())
    with writers(how, path) as urls:
        results: Dict[int, List[int]] = {}
        names = ["q%03d" % i for i in range(200)]
        threads = [
            threading.Thread(
                target=lambda i=i: results.__setitem__(i, _upserts(urls[i % 2], names[i::8]))
            )
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(sum(results.values(), [])) == [200] * 200
        expected = sorted(["emails"] + names)
        for url in urls * 3:  # spread over the processes
            listed = json.loads(_get(url, "/v2/queues"))
            assert sorted(q["name"] for q in listed) == expected
    assert sorted(q["name"] for q in on_disk(path)["accounts"][0]["queues"]) == expected
    others = [
        store.load(str(path), None),
        store.parse(json.dumps(accounts_document()).encode(), "", None),
    ]
    assert [account.lines for account in others[0].accounts[1:]] == [
        a.lines for a in others[1].accounts[1:]
    ]


def _get(url: str, path: str) -> bytes:
    import http.client
    import urllib.parse

    host = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(str(host.hostname), host.port, timeout=30)
    conn.request("GET", path, headers={"Authorization": "Bearer " + TOKEN_A})
    body = conn.getresponse().read()
    conn.close()
    return body


def test_a_sigkilled_writer_leaves_the_old_file_or_the_new_never_half(tmp_path: Path) -> None:
    """A writer killed at any moment: the file always loads, and holds some prefix of the writes."""
    import signal
    import subprocess
    import sys
    import time

    path = write_json(tmp_path / "data.json", accounts_document())
    script = (
        "import app, io, json, sys\ndata = app.open_data(sys.argv[1], None, interval=3600, "
        "writable=True)\nwsgi = app.create_app(data, access_log=False)\nfor i in range(100000):\n  "
        "  body = json.dumps({'queueName': 'k%d' % i, 'parallelism': 1}).encode()\n    env = "
        "{'REQUEST_METHOD': 'POST', 'PATH_INFO': '/v2/queues', 'CONTENT_LENGTH': str(len(body)),\n "
        "          'wsgi.input': io.BytesIO(body), 'HTTP_AUTHORIZATION': 'Bearer token-a'}\n    "
        "wsgi(env, lambda *a: None)\n    print(i, flush=True)\n"
    )
    for delay in (0.3, 0.5, 0.7):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(path)],
            cwd=str(Path(__file__).parent.parent),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # writing
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        loaded = store.load(str(path), None)  # whole: the old version or the new
        names = list(loaded.accounts[0].queues)
        assert names[0] == "emails" and names[1:] == ["k%d" % i for i in range(len(names) - 1)]
        write_json(path, accounts_document())


def test_read_only_refuses_every_write_and_changes_nothing(data_path: Path) -> None:
    app = service.create_app(service.open_data(str(data_path), None), access_log=False)
    before = data_path.read_bytes()
    for method, route in (
        ("POST", "/v2/queues"),
        ("DELETE", "/v2/queues/emails"),
        ("POST", "/v2/queues/emails/pause"),
        ("POST", "/v2/topics/orders/endpoints"),
        ("DELETE", "/v2/topics/orders"),
    ):
        response = send(app, method, route, {"queueName": "x", "parallelism": 1})
        assert response.status == 405 and "--writable" in response.json()["error"]
    assert data_path.read_bytes() == before


def test_the_writable_setting(tmp_path: Path, monkeypatch: Any) -> None:
    path = write_json(tmp_path / "data.json", copy.deepcopy(accounts_document()))
    for off in ("0", "false", "no", "off"):
        app = service.make_app({"QSTASH_LISTS_DATA": str(path), "QSTASH_LISTS_WRITABLE": off})
        assert send(app, "DELETE", "/v2/queues/emails").status == 405
    app = service.make_app({"QSTASH_LISTS_DATA": str(path), "QSTASH_LISTS_WRITABLE": "1"})
    assert send(app, "DELETE", "/v2/queues/emails").status == 200
    with pytest.raises(SystemExit):
        service.make_app({"QSTASH_LISTS_DATA": str(path), "QSTASH_LISTS_WRITABLE": "maybe"})


def test_another_process_reads_each_write_at_its_next_request(tmp_path: Path) -> None:
    """Two DataFiles on one file, as two processes: each write answered through one is read
    through the other at its next request (the file parsed whole); a version in a hand edit's
    layout too."""
    path = write_json(tmp_path / "data.json", accounts_document())
    writer = service.open_data(str(path), None, interval=3600, writable=True)
    reader = service.open_data(str(path), None, interval=3600, writable=True)
    digest = hashlib.sha256(TOKEN_B.encode()).digest()
    for name, parallelism in (("q10", 5), ("new", 1), ("q10", 6)):
        upsert(writer, digest, name, parallelism, None)
        after = reader.current()
        assert after is not None and after.accounts[1].queues[name].parallelism == parallelism
    # The reader writes too: a delete and an upsert, seen by the writer.
    assert reader.update(digest, lambda a, now: store.delete_queue(a, now, "new")) == "deleted"
    assert upsert(reader, digest, "q10", 9, True) == "queue updated"
    seen = writer.current()
    assert (
        seen is not None
        and "new" not in seen.accounts[1].queues
        and seen.accounts[1].queues["q10"].paused
    )
    loaded, last = store.load(str(path), None), reader.current()
    assert last is not None and [a.lines for a in loaded.accounts] == [
        a.lines for a in last.accounts
    ]
    path.write_text(json.dumps(on_disk(path), indent=4))  # a hand edit, in another layout
    edited = reader.current()
    assert (
        edited is not None
        and edited is not last
        and [a.lines for a in edited.accounts] == [a.lines for a in loaded.accounts]
    )
    writer.close()
    reader.close()


def test_an_upsert_without_parallelism_makes_it_1_as_qstashs_default(writable: Any) -> None:
    """QStash's OpenAPI document gives parallelism a default of 1 (and both SDKs send 1 when their
    caller gives none): a new queue gets it, and so does one that is there; paused left out is the
    queue's own."""
    write(writable, "POST", "/v2/queues", {"queueName": "fresh"})
    assert item(writable, "/v2/queues/fresh")["parallelism"] == 1
    write(writable, "POST", "/v2/queues", {"queueName": "emails", "parallelism": 2})
    write(writable, "POST", "/v2/queues", {"queueName": "emails", "paused": True})
    assert [item(writable, "/v2/queues/emails")[key] for key in ("parallelism", "paused")] == [
        1,
        True,
    ]
    write(writable, "POST", "/v2/queues", {"queueName": "emails", "parallelism": 3})
    write(writable, "POST", "/v2/queues", {"queueName": "emails", "parallelism": None})
    assert [item(writable, "/v2/queues/emails")[key] for key in ("parallelism", "paused")] == [
        1,
        True,
    ]


def test_a_hand_edit_that_repeats_a_known_account_is_refused_by_the_process_that_knew_it(
    tmp_path: Path,
) -> None:
    """The accounts another process knows stand for themselves without being read again, but a token
    given twice is still a fault: the file is refused whole and the last good version stays."""
    path = write_json(tmp_path / "data.json", accounts_document())
    writer = service.open_data(str(path), None, interval=3600, writable=True)
    reader = service.open_data(str(path), None, interval=3600, writable=True)
    upsert(writer, hashlib.sha256(TOKEN_B.encode()).digest(), "q01", 5)
    before = reader.current()  # the file is in the writer's form now
    assert before is not None and before.accounts[1].queues["q01"].parallelism == 5
    first = before.accounts[0].lines + b",\n"
    # Account A twice, each byte for byte as known.
    path.write_bytes(path.read_bytes().replace(first, first * 2))
    assert reader.current() is before and reader.status().failed_at is not None
    with pytest.raises(store.DataError) as info:
        store.load(str(path), None)
    assert "same token as accounts[0]" in info.value.problems[0]
    writer.close()
    reader.close()


def test_writes_that_come_while_one_is_written_wait_for_it_each_with_its_own_answer(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The writes that come while this process's write at work is made wait for it, then are made
    one after another, each answered for itself: one for an account not there is refused alone."""
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, interval=3600, writable=True)
    go, at_work = threading.Event(), threading.Event()
    # The others wait for the first however slow the machine.
    monkeypatch.setattr(store, "LOCK_TIMEOUT", 600)
    answers: Dict[str, str] = {}

    def held(account: store.Account, now: int) -> Tuple[store.Account, str]:
        at_work.set()  # the first write's edit, made under the lock, held meanwhile
        go.wait()
        return store.upsert_queue(account, now, "first", None, None)

    def write(name: str, token: str = TOKEN_B) -> None:
        digest = hashlib.sha256(token.encode()).digest()
        try:
            answers[name] = (
                upsert(data, digest, name) if name != "first" else data.update(digest, held)
            )
        except store.NoSuchAccount:
            answers[name] = "no such account"

    threads = [threading.Thread(target=write, args=("first",))]
    threads[0].start()
    at_work.wait()
    threads += [threading.Thread(target=write, args=("q%d" % i,)) for i in range(5)]
    threads.append(threading.Thread(target=write, args=("lost", "not-a-token")))
    for thread in threads[1:]:
        thread.start()
    go.set()
    for thread in threads:
        thread.join()
    assert answers == dict(
        {name: "queue created" for name in ["first", "q0", "q1", "q2", "q3", "q4"]},
        lost="no such account",
    )
    names = [queue["name"] for queue in on_disk(path)["accounts"][1]["queues"]]
    assert names[1] == "first" and sorted(names[2:]) == ["q0", "q1", "q2", "q3", "q4"]
    data.close()


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/v2/queues", {"queueName": "emails", "parallelism": 2}),
        ("POST", "/v2/queues/emails/resume", None),
        (
            "POST",
            "/v2/topics/orders/endpoints",
            {"endpoints": [{"url": "http://crm.example.com/hook"}]},  # ALPHA_GROUP's unnamed one
        ),
        ("DELETE", "/v2/queues/nothing", None),
    ],
)
def test_a_write_that_changes_nothing_leaves_the_file_byte_for_byte(
    tmp_path: Path, method: str, path: str, body: Any
) -> None:
    """An app that upserts its queue at each start with the settings it has, endpoints the group
    has, a queue resumed that runs, a delete of what is not there: 200, and the file as it was
    (its bytes and its inode: not even rewritten), so a committed data.json stays clean."""
    data_path = tmp_path / "data.json"
    data_path.write_bytes(store.load(str(write_json(data_path, accounts_document())), None).lines)
    before = data_path.read_bytes(), data_path.stat().st_ino
    data = service.open_data(str(data_path), None, interval=3600, writable=True)
    assert send(service.create_app(data, False), method, path, body).status == 200
    assert (data_path.read_bytes(), data_path.stat().st_ino) == before
    data.close()
