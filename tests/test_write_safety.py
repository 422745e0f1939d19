"""Writes that no web page, no single request, no held lock and no hand edit can hurt: each case
here broke the writes before its fix (a web page changing the file, a request that stalls every
account, a lock that takes every worker, a hand edit lost, two writers sharing a temporary file,
a write in another account, a bad body answered 500, an account taking another's room)."""

import contextlib
import fcntl
import http.client
import json
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, cast

import pytest
from helpers import (
    ALPHA_QUEUE,
    TOKEN_A,
    TOKEN_B,
    Response,
    accounts_document,
    call,
    serving,
    write_json,
)
from test_writes import on_disk, send

import app as service
import store


@pytest.fixture
def path(data_path: Path) -> Path:
    return data_path


def writable(path: Path, **options: Any) -> Any:
    return service.create_app(
        service.open_data(str(path), None, interval=3600, writable=True, **options),
        access_log=False,
    )


def error(response: Response) -> str:
    return str(response.json()["error"])


# ---- 1. Browsers and DNS rebinding
# ----------------------------------------------------------------
PAGE = [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
]


@pytest.mark.parametrize("headers", PAGE)
@pytest.mark.parametrize(
    "method, route, body",
    [
        ("POST", "/v2/queues/emails/pause", None),
        ("POST", "/v2/queues", {"queueName": "x", "parallelism": 1}),
        (
            "POST",
            "/v2/topics/orders/endpoints",
            {"endpoints": [{"name": "billing", "url": "https://attacker.example/"}]},
        ),
        ("DELETE", "/v2/queues/emails", None),
        ("GET", "/v2/queues", None),
        ("GET", "/v2/keys", None),
    ],
)
def test_a_web_page_can_neither_read_nor_write(
    path: Path, headers: Dict[str, str], method: str, route: str, body: Any
) -> None:
    before = path.read_bytes()
    data = json.dumps(body).encode() if body is not None else b""
    response = call(
        writable(path),
        route,
        method=method,
        headers=dict(headers, Authorization="Bearer " + TOKEN_A),
        CONTENT_TYPE="text/plain",
        CONTENT_LENGTH=str(len(data)),
        **{"wsgi.input": __import__("io").BytesIO(data)},
    )
    assert response.status == 403 and error(response).startswith(
        "forbidden: this server takes no request from a web"
    )
    assert path.read_bytes() == before


@pytest.fixture
def dev_file(tmp_path: Path) -> Path:
    return write_json(tmp_path / "one.json", {"queues": [ALPHA_QUEUE]})


def dev_app(path: Path, allowed: List[str] = ()) -> Any:  # type: ignore[assignment]
    data = service.open_data(
        str(path), None, interval=3600, writable=True, fallback=service.DEV_TOKEN
    )
    return service.create_app(data, access_log=False, allowed_hosts=allowed)


@pytest.mark.parametrize(
    "host, allowed, status",
    [
        ("rebind.evil.example:8080", [], 403),
        ("rebind.evil.example", [], 403),
        ("localhost.evil.example", [], 403),
        ("qstash.internal:8080", ["qstash.internal"], 200),
        ("QStash.Internal", ["qstash.internal"], 200),
        ("127.0.0.1:8080", [], 200),
        ("localhost:8080", [], 200),
        ("api.localhost", [], 200),
        ("[::1]:8080", [], 200),
        ("10.0.3.7:8080", [], 200),
        (None, [], 200),
    ],
)
def test_the_dev_token_is_taken_only_from_a_name_no_dns_can_move(
    dev_file: Path, host: Optional[str], allowed: List[str], status: int
) -> None:
    """DNS rebinding: a page at rebind.evil.example, resolved to 127.0.0.1, is same-origin and sends
    no Origin; the published dev token is refused unless the Host is an IP address, localhost, or
    a name the operator allows."""
    app = dev_app(dev_file, allowed)
    headers = {"Authorization": "Bearer " + service.DEV_TOKEN}
    environ = {} if host is None else {"HTTP_HOST": host}
    for method in ("GET", "DELETE"):
        response = call(app, "/v2/queues/emails", method=method, headers=headers, **environ)
        assert response.status == status
        if status == 403:
            assert "--allowed-hosts" in error(response)
    assert (on_disk(dev_file)["queues"] == []) == (status == 200)


def test_a_token_of_its_own_is_taken_whatever_the_host(path: Path) -> None:
    response = call(
        writable(path),
        "/v2/queues",
        headers={"Authorization": "Bearer " + TOKEN_A},
        HTTP_HOST="qstash.team.example",
    )
    assert response.status == 200


# ---- 2. A write costs what it touches
# --------------------------------------------------------------
class Counted(str):
    """A string that counts its comparisons (a search compares each name with each)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_endpoints_are_matched_through_an_index_not_request_times_group() -> None:
    group = store.UrlGroup(
        1,
        2,
        "big",
        tuple(store.Endpoint(Counted("e%d" % i), "https://a.example/%d" % i) for i in range(1000)),
    )
    account = store.Account(b"", url_groups={"big": group})
    Counted.compared = 0
    gone: List[Dict[str, str]] = [{"name": Counted("x%d" % i)} for i in range(3000)]
    kept, _ = store.remove_endpoints(account, 3, "big", gone + [{"name": "e5"}])
    assert len(kept.url_groups["big"].endpoints) == 999
    added, _ = store.add_endpoints(
        account, 3, "big", [store.Endpoint(Counted("y%d" % i), "https://b/") for i in range(3000)]
    )
    assert len(added.url_groups["big"].endpoints) == 4000
    assert Counted.compared < 20000  # request x group would be 3,000,000 (each a hash look-up here)


def test_removing_matches_every_field_given_and_nothing_else() -> None:
    group = store.UrlGroup(
        1,
        2,
        "g",
        (
            store.Endpoint(None, "https://a/1"),
            store.Endpoint(None, "https://a/2"),
            store.Endpoint("named", "https://a/3"),
        ),
    )
    account = store.Account(b"", url_groups={"g": group})
    # The unnamed one at that URL alone.
    kept, _ = store.remove_endpoints(account, 3, "g", [{"url": "https://a/1"}])
    assert [e.url for e in kept.url_groups["g"].endpoints] == ["https://a/2", "https://a/3"]
    assert store.remove_endpoints(account, 3, "g", [{"name": "named", "url": "https://a/9"}]) == (
        account,
        "no endpoint matched",
    )
    kept, _ = store.remove_endpoints(account, 3, "g", [{"name": "named", "url": "https://a/3"}])
    assert [e.name for e in kept.url_groups["g"].endpoints] == [None, None]


# ---- 3. A held lock holds no worker for long
# ------------------------------------------------------
def test_while_another_process_holds_the_lock_writes_get_503_and_reads_are_answered(
    tmp_path: Path,
) -> None:
    """Eight writes at once against two threads: each gives up within LOCK_TIMEOUT with a 503 and
    Retry-After (a client's 10 s timeout would end a write that waited its turn behind the
    others), and reads keep being answered while the lock is held."""
    path = write_json(tmp_path / "data.json", accounts_document())
    with (
        serving(path, "--writable", "--quiet", "--threads", "2") as server,
        open(path, "rb") as held,
    ):
        fcntl.flock(held, fcntl.LOCK_EX)  # as another process would
        answers: List[Any] = []

        def upsert(i: int) -> None:
            conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
            conn.request(
                "POST",
                "/v2/queues",
                json.dumps({"queueName": "w%d" % i}),
                {"Authorization": "Bearer " + TOKEN_A},
            )
            response = conn.getresponse()
            answers.append((response.status, response.getheader("Retry-After"), response.read()))
            conn.close()

        threads = [threading.Thread(target=upsert, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for token in (TOKEN_A, TOKEN_B) * 3:
            assert server.get("/v2/queues", {"Authorization": "Bearer " + token})[0] == 200
        for thread in threads:
            thread.join()
        assert [(status, retry) for status, retry, _ in answers] == [(503, "1")] * 8
    assert [q["name"] for q in on_disk(path)["accounts"][0]["queues"]] == ["emails"]


# ---- 4. A hand edit is never lost
# ------------------------------------------------------------------
def edit_during_the_write(monkeypatch: Any, path: Path, edit: Any, times: int = 1) -> None:
    """Have ``edit`` save the file (as an editor, taking no lock) once the writer has written its
    version aside."""
    real, done = os.fsync, cast(List[int], [])

    def fsync(fd: int) -> None:
        real(fd)
        if len(done) < times and stat.S_ISREG(os.fstat(fd).st_mode):  # the file, not its folder
            done.append(1)
            edit()

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("how", ["in place", "renamed"])
def test_a_hand_edit_saved_during_a_write_is_kept_and_the_write_made_on_it(
    path: Path, monkeypatch: Any, how: str
) -> None:
    app = writable(path)
    document = on_disk(path)
    document["accounts"][1]["queues"].append(dict(ALPHA_QUEUE, name="by-hand"))

    def edit() -> None:
        if how == "renamed":
            os.replace(write_json(path.with_suffix(".new"), document), path)
        else:
            write_json(path, document)

    edit_during_the_write(monkeypatch, path, edit)
    assert send(app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1}).status == 200
    after = on_disk(path)
    assert [q["name"] for q in after["accounts"][1]["queues"]] == ["reports", "by-hand"]
    assert [q["name"] for q in after["accounts"][0]["queues"]] == ["emails", "jobs"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["data.json"]


def test_a_write_gives_up_on_a_file_saved_by_hand_during_each_of_its_attempts(
    path: Path, monkeypatch: Any
) -> None:
    app = writable(path)
    document, saved = on_disk(path), cast(List[bytes], [])

    def edit() -> None:
        document["accounts"][1]["queues"].append(dict(ALPHA_QUEUE, name="by-hand-%d" % len(saved)))
        saved.append(write_json(path, document).read_bytes())

    edit_during_the_write(monkeypatch, path, edit, times=store.WRITE_ATTEMPTS)
    response = send(app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1})
    # Not a 409 (that says the file does not load): it loads, and kept changing; try again.
    assert (
        (response.status, response.headers["Retry-After"]) == (503, "1")
        and path.read_bytes() == saved[-1]
        and len(saved) == store.WRITE_ATTEMPTS
    )


def test_a_broken_hand_edit_saved_during_a_write_is_never_overwritten(
    path: Path, monkeypatch: Any
) -> None:
    app = writable(path)
    broken = path.read_bytes()[:-40]  # half saved
    edit_during_the_write(monkeypatch, path, lambda: path.write_bytes(broken))
    response = send(app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 1})
    assert response.status == 409 and path.read_bytes() == broken


# ---- 5. Each writer its own temporary file
# --------------------------------------------------------
def test_nothing_at_a_fixed_name_blocks_a_write_and_each_write_has_its_own_temporary_file(
    path: Path, monkeypatch: Any
) -> None:
    (path.parent / ".data.json.qstash-lists-tmp").mkdir()  # the fixed name of old
    names: List[str] = []
    real = tempfile.mkstemp

    def mkstemp(**options: Any) -> Any:
        made = real(**options)
        names.append(made[1])
        return made

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    app = writable(path)
    for name in ("one", "two"):
        assert send(app, "POST", "/v2/queues", {"queueName": name, "parallelism": 1}).status == 200
    assert len(set(names)) == 2 and all(Path(name).parent == path.parent for name in names)
    assert sorted(p.name for p in path.parent.iterdir()) == [
        ".data.json.qstash-lists-tmp",
        "data.json",
    ]


# ---- 6. A write goes to the token's own account, or nowhere
# ---------------------------------------
@pytest.mark.parametrize("when", ["before the request", "while the write waits for the lock"])
def test_a_write_to_a_file_swapped_for_another_goes_nowhere_but_its_own_account(
    tmp_path: Path, monkeypatch: Any, when: str
) -> None:
    path = write_json(tmp_path / "data.json", {"accounts": [{"token": "tok-alice", "queues": []}]})
    data = service.open_data(
        str(path), None, interval=3600, writable=True, fallback=service.DEV_TOKEN
    )
    app = service.create_app(data, access_log=False)
    # The dev token's account, once in service.
    one = write_json(tmp_path / "one.json", {"queues": []})
    real = store._locked

    @contextlib.contextmanager
    def swapped(*args: Any) -> Iterator[Any]:
        os.replace(one, path)  # after the request was authenticated, before the write has the lock
        with real(*args) as locked:
            yield locked

    if when == "before the request":
        os.replace(one, path)
    else:
        monkeypatch.setattr(store, "_locked", swapped)
    response = send(
        app, "POST", "/v2/queues", {"queueName": "x", "parallelism": 1}, token="tok-alice"
    )
    assert response.status == 401 and on_disk(path) == {"queues": []}


def test_a_write_waits_for_this_processes_other_writes_no_longer_than_for_anothers(
    path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(store, "LOCK_STUCK", 600)  # it waits out its deadline
    data = service.open_data(str(path), None, interval=3600, writable=True)
    app = service.create_app(data, access_log=False)
    data._turns.since = time.monotonic()  # another thread's write, stuck
    response = send(app, "POST", "/v2/queues", {"queueName": "x", "parallelism": 1})
    assert (response.status, response.headers["Retry-After"]) == (503, "1")


# ---- 7. Every bad body is a 400 naming the field
# ---------------------------------------------------
@pytest.mark.parametrize(
    "body, message",
    [
        (
            b'{"queueName": "q", "parallelism": NaN}',
            "parallelism: expected a whole number from 1 to 2**53 - 1 (1 if left out), got NaN",
        ),
        (
            b'{"queueName": "q", "parallelism": Infinity}',
            "parallelism: expected a whole number from 1 to 2**53 - 1 (1 if left out), "
            "got Infinity",
        ),
        (
            b'{"queueName": "q", "parallelism": -Infinity}',
            "parallelism: expected a whole number from 1 to 2**53 - 1 (1 if left out), got "
            "-Infinity",
        ),
        (
            b'{"queueName": "q", "parallelism": 1e400}',
            "parallelism: expected a whole number from 1 to 2**53 - 1 (1 if left out), "
            "got Infinity",
        ),
        (b'{"queueName": "q", "paused": NaN}', "paused: expected true or false, got NaN"),
        (
            b'{"queueName": "\\ud800"}',
            "queueName: expected a name of only letters, digits, '-', '.' and "
            "'_', not dots alone, at most "
            '200 characters, got "\\ud800"',
        ),
        (
            b'{"queueName": "q", "paused": "\\udfff"}',
            'paused: expected true or false, got "\\udfff"',
        ),
        (
            b'{"queueName": "decoy", "queueName": "emails", "parallelism": 1}',
            "queueName: given twice in one object",
        ),
        pytest.param(
            b'{"queueName": "q", "parallelism": 1' + b', "x": 1' * 3000 + b"}",
            "x: given twice in one object",
            id="a key given 3,000 times",
        ),
        (b"\xff\xfe{}", "the body is not UTF-8 JSON"),
    ],
)
def test_every_bad_upsert_body_is_a_400_naming_the_field(
    path: Path, body: bytes, message: str
) -> None:
    before = path.read_bytes()
    response = send(writable(path), "POST", "/v2/queues", raw=body)
    assert (response.status, error(response)) == (400, "bad request: " + message)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"endpoints": NaN}', "endpoints: expected a non-empty array of endpoints, got NaN"),
        (
            b'{"endpoints": [{"url": "https://a.example/\\ud800"}]}',
            "endpoints[0]: expected an object with an absolute http or https url, and a printable "
            "name if any",
        ),
        (
            b'{"endpoints": [{"url": "https://a/", "name": "\\ud800"}]}',
            "endpoints[0]: expected an object with an absolute http or https url, and a printable "
            "name if any",
        ),
        (
            b'{"endpoints": [{"url": "https://a/", "url": "https://b/"}]}',
            "url: given twice in one object",
        ),
    ],
)
def test_every_bad_endpoints_body_is_a_400_naming_the_field(
    path: Path, body: bytes, message: str
) -> None:
    response = send(writable(path), "POST", "/v2/topics/orders/endpoints", raw=body)
    assert (response.status, error(response)) == (400, "bad request: " + message)


def test_keys_given_twice_are_found_in_linear_time() -> None:
    """3,000 keys given twice in one object, in a file or a body: one pass, not a count of each in
    all."""
    counted = {"n": 0}

    class Key(str):
        def __eq__(self, other: object) -> bool:
            counted["n"] += 1
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    pairs: List[Tuple[str, Any]] = [(cast(str, Key("k%d" % i)), i) for i in range(3000)] * 2
    assert store._pairs(pairs)[store._TWICE][:2] == ["k0", "k1"]
    with pytest.raises(store.DataError):
        store.unique_keys(pairs)
    assert counted["n"] < 30000


# ---- 8. No account takes another's room; every name a write makes can be read and removed
# ---------
def test_a_name_a_write_makes_is_at_most_max_name_characters(path: Path) -> None:
    app = writable(path)
    too_long = "q" * (service.MAX_NAME + 1)
    long = send(app, "POST", "/v2/queues", {"queueName": too_long})
    assert long.status == 400 and "at most 200 characters, got" in error(long)
    endpoints = {"endpoints": [{"url": "https://a.example/1"}]}
    assert send(app, "POST", "/v2/topics/%s/endpoints" % too_long, endpoints).status == 400


def test_one_account_cannot_take_the_room_of_another(tmp_path: Path) -> None:
    """Under --max-size, each account has its share: one that fills its own gets 507, and another
    still writes."""
    path = write_json(
        tmp_path / "data.json", {"accounts": [{"token": TOKEN_A}, {"token": TOKEN_B}]}
    )
    app = writable(path, max_size=8000)
    statuses = [
        send(app, "POST", "/v2/queues", {"queueName": "q%03d" % i}).status for i in range(60)
    ]
    assert statuses[0] == 200 and statuses[-1] == 507
    assert send(app, "POST", "/v2/queues", {"queueName": "mine"}, token=TOKEN_B).status == 200
    assert send(app, "DELETE", "/v2/queues/q000").status == 200  # shrinking is always allowed


def test_the_default_name_limit_keeps_every_name_readable_and_deletable_by_its_url(
    tmp_path: Path,
) -> None:
    path = write_json(tmp_path / "data.json", accounts_document())
    name = "n" * service.MAX_NAME
    with serving(path, "--writable", "--quiet") as server:
        headers = {"Authorization": "Bearer " + TOKEN_A}
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("POST", "/v2/queues", json.dumps({"queueName": name}), headers)
        assert conn.getresponse().status == 200
        conn.close()
        assert server.get("/v2/queues/" + name, headers)[0] == 200
        assert server.get("/v2/queues/" + name, headers, method="DELETE")[0] == 200
        assert server.get("/v2/queues/" + name, headers)[0] == 404


@pytest.mark.parametrize(
    "raw",
    [
        b'\xef\xbb\xbf{"queueName": "q"}',  # a byte-order mark
        '{"queueName": "q"}'.encode("utf-16"),
        '{"queueName": "q"}'.encode("utf-32-le"),
    ],
)
def test_a_body_not_in_utf8_itself_is_refused(path: Path, raw: bytes) -> None:
    response = send(writable(path), "POST", "/v2/queues", raw=raw)
    assert (response.status, error(response)) == (
        400,
        "bad request: the body is not UTF-8 JSON",
    )


@pytest.mark.parametrize("name", [".", "..", "..."])
def test_a_name_of_dots_alone_is_refused_as_no_url_can_name_it(path: Path, name: str) -> None:
    response = send(writable(path), "POST", "/v2/queues", {"queueName": name})
    assert response.status == 400 and "not dots alone" in error(response)
    response = send(
        writable(path),
        "POST",
        "/v2/topics/%s/endpoints" % name,
        {"endpoints": [{"url": "https://x.example/"}]},
    )
    assert response.status in (400, 404)
