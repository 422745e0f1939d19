"""QStash's bad days on demand (--reset): faults a suite asks for per account, and its request log,
through the WSGI callable; the SDKs' view of them is in test_sdks.py, the plugin's in
test_plugin.py."""

import io
import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Dict, List
from wsgiref.util import setup_testing_defaults

import pytest
from helpers import TOKEN_A, TOKEN_B, accounts_document, bearer, call, write_json
from test_writes import send

import app as service

FAULTS, REQUESTS = service.FAULTS_PATH, service.REQUESTS_PATH


@pytest.fixture
def app(tmp_path: Path) -> Any:
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)
    yield service.TestDouble(service.create_app(data, access_log=False))
    data.close()


def fault(app: Any, token: str = TOKEN_A, **keys: Any) -> None:
    assert send(app, "POST", FAULTS, keys, token=token).status == 200


def log(app: Any, token: str = TOKEN_A) -> List[Dict[str, Any]]:
    response = call(app, REQUESTS, headers=bearer(token))
    assert response.status == 200 and response.headers["Cache-Control"] == "no-store"
    return response.json()  # type: ignore[no-any-return]


def statuses(app: Any, token: str = TOKEN_A) -> List[Any]:
    return [entry["status"] for entry in log(app, token)]


@pytest.mark.parametrize("method, path", [("POST", FAULTS), ("DELETE", FAULTS), ("GET", REQUESTS)])
def test_without_resets_the_bad_days_are_not_there(tmp_path: Path, method: str, path: str) -> None:
    file = write_json(tmp_path / "d.json", accounts_document())
    data = service.open_data(str(file), None, writable=True)
    app = service.create_app(data, access_log=False)
    response = send(app, method, path, {"status": 429} if method == "POST" else None)
    assert response.status == 404
    assert response.json() == {
        "error": "not found: %s answers once the server is started with --reset "
        "(QSTASH_LISTS_RESET=1)" % path
    }
    data.close()


@pytest.mark.parametrize("path", [FAULTS, REQUESTS])
def test_a_web_page_is_refused(app: Any, path: str) -> None:
    headers = dict(bearer(TOKEN_A), Origin="https://evil.example")
    assert (
        call(app, path, method="POST" if path == FAULTS else "GET", headers=headers).status == 403
    )


def test_a_burst_rate_limit_as_qstash_sends_it(app: Any) -> None:
    fault(app, status=429)
    before = int(time.time())
    response = call(app, headers=bearer(TOKEN_A))
    assert response.status == 429
    assert response.json() == {"error": "429: a fault this suite asked for (%s)" % FAULTS}
    headers = response.headers
    assert (headers["Burst-RateLimit-Limit"], headers["Burst-RateLimit-Remaining"]) == ("100", "0")
    assert before + 1 <= int(headers["Burst-RateLimit-Reset"]) <= int(time.time()) + 1
    assert "RateLimit-Limit" not in headers
    assert call(app, headers=bearer(TOKEN_A)).status == 200  # once


def test_a_daily_limit_with_the_values_given(app: Any) -> None:
    fault(app, status=429, daily=True, times=2, limit=7, remaining=1, reset=1800000000)
    for _ in range(2):
        headers = call(app, "/v2/topics", headers=bearer(TOKEN_A)).headers
        assert [headers["RateLimit-" + k] for k in ("Limit", "Remaining", "Reset")] == [
            "7",
            "1",
            "1800000000",
        ]
        assert "Burst-RateLimit-Limit" not in headers
    fault(app, daily=True)  # daily alone: a 429
    reset = int(call(app, headers=bearer(TOKEN_A)).headers["RateLimit-Reset"])
    assert reset % 86400 == 0 and 0 < reset - time.time() <= 86400  # midnight UTC


def test_a_fault_meets_only_the_requests_it_names_and_only_its_accounts(app: Any) -> None:
    fault(app, status=503, method="POST", path="/v2/queues*", times=2)
    assert call(app, headers=bearer(TOKEN_A)).status == 200  # a GET
    assert send(app, "POST", "/v2/queues/emails/pause").status == 503
    assert send(app, "POST", "/v2/queues", {"queueName": "q"}, token=TOKEN_B).status == 200
    upsert = send(app, "POST", "/v2/queues", {"queueName": "q", "parallelism": 2})
    assert upsert.status == 503
    assert send(app, "POST", "/v2/queues", {"queueName": "q"}).status == 200
    assert statuses(app) == [200, 503, 503, 200]
    assert statuses(app, TOKEN_B) == [200]


def test_delete_clears_the_faults_and_a_reset_the_log_too(app: Any) -> None:
    fault(app, status=500, times=5)
    fault(app, status=429, token=TOKEN_B)
    assert call(app, headers=bearer(TOKEN_A)).status == 500
    assert send(app, "DELETE", FAULTS).status == 200
    assert call(app, headers=bearer(TOKEN_A)).status == 200
    assert statuses(app) == [500, 200]
    fault(app, status=500)
    assert send(app, "POST", service.RESET_PATH).status == 200
    assert log(app) == []
    assert call(app, headers=bearer(TOKEN_A)).status == 200
    assert call(app, headers=bearer(TOKEN_B)).status == 429  # B's stays B's


def test_a_delay_then_the_answer(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    waited: List[float] = []
    monkeypatch.setattr(time, "sleep", waited.append)
    fault(app, delay=2.5)
    assert call(app, headers=bearer(TOKEN_A)).status == 200
    assert waited == [2.5]


def by_waitress(app: Any) -> Any:
    """``app`` as waitress calls it: with its wsgi.file_wrapper (the double can drop then)."""
    from waitress.buffers import ReadOnlyFileBasedBuffer

    def called(environ: Dict[str, Any], start_response: Any) -> Any:
        return app(dict(environ, **{"wsgi.file_wrapper": ReadOnlyFileBasedBuffer}), start_response)

    return called


def test_a_drop_closes_the_connection_unanswered(app: Any) -> None:
    from waitress.channel import ClientDisconnected  # waitress closes the connection

    fault(app, drop=True)
    with pytest.raises(ClientDisconnected):
        send(by_waitress(app), "POST", "/v2/queues", {"queueName": "dropped"})
    assert log(app) == [
        {
            "method": "POST",
            "path": "/v2/queues",
            "query": [],
            "body": {"queueName": "dropped"},
            "status": None,
        }
    ]
    assert send(app, "POST", "/v2/queues", {"queueName": "dropped"}).status == 200


def test_a_drop_has_its_line_in_the_access_log(tmp_path: Path, caplog: Any) -> None:
    """As every request (docs/deploying.md): no status (none was sent), and why."""
    from waitress.channel import ClientDisconnected

    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)
    double = service.TestDouble(service.create_app(data))
    fault(double, drop=True)
    with caplog.at_level(logging.INFO, "qstash_lists.access"), pytest.raises(ClientDisconnected):
        call(by_waitress(double), "/v2/queues", headers=bearer(TOKEN_A), REMOTE_ADDR="10.0.0.9")
    [line] = [r.getMessage() for r in caplog.records if r.name == "qstash_lists.access"]
    match = re.fullmatch(r'10\.0\.0\.9 "GET /v2/queues" (.*) 0 [\d.]+ms \((.*)\)', line)
    assert match and match.groups() == ("-", "dropped: a fault")
    data.close()


@pytest.mark.parametrize(
    "keys, expected",
    [
        ({}, "a fault needs a status, a delay or drop"),
        ({"status": 200}, "status: expected an HTTP error status, such as 429 or 503, got 200"),
        ({"status": 499}, "status: expected an HTTP error status, such as 429 or 503, got 499"),
        ({"status": 429, "times": 0}, "times: expected a whole number from 1, got 0"),
        ({"status": 429, "times": True}, "times: expected a whole number from 1, got true"),
        ({"delay": 31}, "delay: expected 0 to 30 seconds, got 31"),
        ({"drop": "yes"}, 'drop: expected true or false, got "yes"'),
        ({"status": 429, "method": "PUT"}, 'method: expected GET, HEAD, POST or DELETE, got "PUT"'),
        ({"status": 429, "path": "v2"}, 'path: expected a path, such as /v2/queues*, got "v2"'),
        ({"status": 429, "limit": -1}, "limit: expected a whole number, got -1"),
        ({"status": []}, "status: expected an HTTP error status, such as 429 or 503, got []"),
        ({"status": 429.0}, "status: expected an HTTP error status, such as 429 or 503, got 429.0"),
        (
            {"status": 503, "daily": True},
            "daily and status 503: a daily limit is a 429 (leave status out)",
        ),
        (
            {"status": 429, "token": "x"},
            '"token": not a fault\'s (status, times, daily, method, path, delay, drop, limit, '
            "remaining, reset)",
        ),
    ],
)
def test_a_bad_fault_is_a_400_that_says_why(app: Any, keys: Any, expected: str) -> None:
    response = send(app, "POST", FAULTS, keys)
    assert (response.status, response.json()) == (400, {"error": "bad request: " + expected})
    assert call(app, headers=bearer(TOKEN_A)).status == 200


ODD_VALUES = [None, True, 0, -1, 1.5, 1e308, 2**64, "", "x", [], [429], {}, {"a": 1}]


def test_every_odd_fault_document_is_a_400_or_a_fault(app: Any) -> None:
    """Every key with every odd value, alone and beside a status: never a 500."""
    for key in service.FAULT_KEYS:
        for value in ODD_VALUES:
            for document in ({key: value}, {"status": 503, key: value}):
                assert send(app, "POST", FAULTS, document).status in (200, 400), document
    assert send(app, "DELETE", FAULTS, {}).status == 200


def test_the_log_holds_what_was_asked_and_never_a_token(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "REQUEST_LOG", 3)
    call(app, query="qstash_token=%s&a=1&b" % TOKEN_A)
    call(app, "/v2/queues/emails", headers=dict(bearer(TOKEN_A), Cookie="secret"))
    assert call(app, headers=bearer(TOKEN_B)).status == 200
    assert call(app, headers=bearer("wrong")).status == 401  # no account: no log
    fault(app, status=429)
    send(app, "POST", "/v2/queues", {"queueName": "jobs", "parallelism": 3})
    send(app, "DELETE", "/v2/topics/orders")
    entries = log(app)
    assert entries == [  # the oldest gone: REQUEST_LOG
        {"method": "GET", "path": "/v2/queues/emails", "query": [], "body": None, "status": 200},
        {
            "method": "POST",
            "path": "/v2/queues",
            "query": [],
            "body": {"queueName": "jobs", "parallelism": 3},
            "status": 429,
        },
        {"method": "DELETE", "path": "/v2/topics/orders", "query": [], "body": None, "status": 200},
    ]
    monkeypatch.setattr(service, "REQUEST_LOG", 1000)
    send(app, "POST", service.RESET_PATH)
    call(app, query="qstash_token=%s&a=1&b" % TOKEN_A)
    assert log(app)[0]["query"] == ["a", "b", "qstash_token"]
    assert TOKEN_A not in json.dumps(log(app)) and TOKEN_B not in json.dumps(log(app, TOKEN_B))


def test_a_drop_under_another_server_is_a_500_and_logged_so(app: Any) -> None:
    """gunicorn and uWSGI cannot close a connection unanswered: the client sees a 500, and the
    request log says 500, not "dropped" (issue 59.6)."""
    fault(app, drop=True)
    response = send(app, "POST", "/v2/queues", {"queueName": "dropped"})
    assert response.status == 500
    assert response.json() == {"error": "500: a fault this suite asked for (%s)" % FAULTS}
    assert statuses(app) == [500]


def test_an_accounts_faults_are_bounded(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "MAX_FAULTS", 3)
    for _ in range(3):
        fault(app, status=503, path="/nowhere")
    response = send(app, "POST", FAULTS, {"status": 503})
    assert response.status == 400
    assert response.json() == {
        "error": "bad request: an account has at most 3 faults; DELETE %s clears them" % FAULTS
    }
    fault(app, token=TOKEN_B, status=503)  # another account's are its own
    assert send(app, "DELETE", FAULTS).status == 200
    fault(app, status=503)


def test_the_log_is_bounded_in_bytes_and_never_reads_a_reads_body(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "REQUEST_LOG_BYTES", 3500)
    for i in range(4):  # about 1 KB each
        send(app, "POST", "/v2/queues", {"queueName": "q%d" % i, "x": "y" * 1000})
    assert [entry["body"]["queueName"] for entry in log(app)] == ["q1", "q2", "q3"]

    class Unread(io.BytesIO):
        def read(self, *args: Any) -> bytes:
            raise AssertionError("a GET's body was read")

    unread: Dict[str, Any] = {"wsgi.input": Unread(), "CONTENT_LENGTH": "5"}
    get = call(app, headers=bearer(TOKEN_A), **unread)
    assert get.status == 200 and log(app)[-1]["body"] is None


def test_a_request_delayed_past_its_accounts_reset_does_nothing(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test gave up on a delayed write, and the next test reset the account meanwhile: the
    write, its delay over, neither lands in the next test's fresh state nor enters its log."""

    def sleep(seconds: float) -> None:  # the next test begins while the request waits
        assert send(app, "POST", service.RESET_PATH).status == 200

    monkeypatch.setattr(time, "sleep", sleep)
    fault(app, delay=2)
    response = send(app, "POST", "/v2/queues", {"queueName": "from-the-last-test"})
    assert response.status == 503 and log(app) == []
    assert call(app, "/v2/queues/from-the-last-test", headers=bearer(TOKEN_A)).status == 404


def test_with_one_thread_no_delay_is_waited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--threads 1 (or 0 delays given): half the threads is none, so a delay never holds the one
    thread every client needs; its request is answered at once."""
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)
    double = service.TestDouble(service.create_app(data, access_log=False), delays=1 // 2)
    waited: List[float] = []
    monkeypatch.setattr(time, "sleep", waited.append)
    fault(double, status=503, delay=5)
    assert (call(double, headers=bearer(TOKEN_A)).status, waited) == (503, [])
    data.close()


@pytest.mark.parametrize("raw", [b'{"queueName": "x", "parallelism": NaN}', b'{"x": "\\ud800"}'])
def test_a_body_the_log_could_not_answer_with_is_logged_as_none(app: Any, raw: bytes) -> None:
    """NaN (Python's json.dumps writes it) or a lone surrogate parse, but are not JSON an answer
    can carry: the log keeps no body for them, and answers."""
    assert send(app, "POST", "/v2/queues", raw=raw).status == 400
    assert [(entry["body"], entry["status"]) for entry in log(app)] == [(None, 400)]


def test_a_content_length_of_thousands_of_digits_is_a_400_as_without_the_double(app: Any) -> None:
    """Called as an embedding server may: wsgiref's validator cannot read it either."""
    for wsgi in (app, app.service):
        environ: Dict[str, Any] = {}
        setup_testing_defaults(environ)
        environ.update(REQUEST_METHOD="POST", PATH_INFO="/v2/queues", CONTENT_LENGTH="1" * 5000)
        environ.update(HTTP_AUTHORIZATION="Bearer " + TOKEN_A, QUERY_STRING="")
        started: List[str] = []
        wsgi(environ, lambda status, headers, exc_info=None, seen=started: seen.append(status))
        assert started == ["400 Bad Request"]


def test_delays_hold_at_most_the_workers_given_and_never_the_health_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delay past the double's slots is not waited (its request is answered at once), and
    /healthz never meets a fault, whatever the suites ask."""
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)
    double = service.TestDouble(service.create_app(data, access_log=False), delays=1)
    waited: List[float] = []
    inner: List[int] = []

    def sleep(seconds: float) -> None:
        waited.append(seconds)
        if not inner:  # while the first delay holds its slot, another comes
            inner.append(call(double, headers=bearer(TOKEN_B)).status)

    monkeypatch.setattr(time, "sleep", sleep)
    fault(double, status=503, delay=5, path="/v2/queues")
    fault(double, token=TOKEN_B, delay=7, path="/v2/queues")
    fault(double, status=503, path="/*", times=100)
    assert call(double, headers=bearer(TOKEN_A)).status == 503
    assert (waited, inner) == ([5], [200])  # B's delay found no free slot: answered at once
    assert call(double, service.HEALTH_PATH).status == 200
    assert statuses(double, TOKEN_B) == [200]
    data.close()
