"""Faults against the real server: oversized requests, vanishing and stalling clients, a data
file that churns under load, and other WSGI servers."""

import http.client
import json
import logging
import os
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
from helpers import (
    ALPHA_QUEUE,
    Q_TEMPLATE,
    ROOT,
    TOKEN_A,
    TOKEN_B,
    accounts_document,
    bearer,
    call,
    eventually,
    served,
    serving,
    started,
    write_json,
)

REQUEST = b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"


def status_of(server: Any, data: bytes, timeout: float = 10) -> int:
    """Send ``data`` on a new connection; return the status of the answer."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(data)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1."), answer[:100]
    return int(answer[9:12])


def test_oversized_requests_get_waitress_own_4xx(data_path: Path) -> None:
    with serving(data_path, "--quiet") as server:
        huge_header = REQUEST[:-2] + b"X-Padding: " + b"a" * 20000 + b"\r\n\r\n"
        assert status_of(server, huge_header) == 431
        huge_body = (
            b"POST /v2/queues HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        )
        assert status_of(server, huge_body) == 413
        # A TLS hello.
        garbage = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64) + b"\r\n\r\n"
        assert status_of(server, garbage) == 400
        assert server.get("/v2/queues", {"Authorization": "Bearer " + TOKEN_A})[0] == 200
        code, _, err = server.stop()
    assert code == 0 and "Traceback" not in err


def test_clients_that_vanish_or_stall_do_not_hold_up_others(tmp_path: Path) -> None:
    big = {
        "accounts": [
            {"token": TOKEN_A, "queues": [dict(Q_TEMPLATE, name="q%d" % i) for i in range(10000)]}
        ]
    }
    with serving(write_json(tmp_path / "big.json", big), "--quiet") as server:
        for abrupt in (False, True) * 10:  # ask for 1 MB, read a little, hang up (FIN or RST)
            sock = socket.create_connection((server.host, server.port), timeout=10)
            sock.sendall(REQUEST)
            assert sock.recv(1024).startswith(b"HTTP/1.1 200 ")
            if abrupt:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        stalled = [
            socket.create_connection((server.host, server.port), timeout=10) for _ in range(60)
        ]
        for sock in stalled[:20]:
            sock.sendall(b"GET /v2/queues HTTP/1.1\r\nHost:")  # half a request, then nothing
        try:
            for _ in range(20):  # each within the client's 10 s timeout
                status, _, body = server.get("/v2/queues", {"Authorization": "Bearer " + TOKEN_A})
                assert status == 200 and len(json.loads(body)) == 10000
        finally:
            for sock in stalled:
                sock.close()
        code, _, err = server.stop()
    assert code == 0 and "Traceback" not in err


def version(n: int) -> Dict[str, Any]:
    """Account A: 1,000 queues named for version ``n`` (a body of about 100 KB); B: one queue."""
    return {
        "accounts": [
            {
                "token": TOKEN_A,
                "queues": [dict(Q_TEMPLATE, name="v%d-%d" % (n, i)) for i in range(1000 + n)],
            },
            {"token": TOKEN_B, "queues": [ALPHA_QUEUE]},
        ]
    }


def test_no_failed_or_partial_response_while_the_file_churns(tmp_path: Path) -> None:
    """Four keep-alive clients for about 5 s while the file is rewritten, truncated, deleted and
    restored, and replaced with invalid JSON: every answer is a 200 with one whole version."""
    path = write_json(tmp_path / "d.json", version(0))
    stop = threading.Event()
    seen: Set[int] = set()
    errors: List[str] = []
    served = [0]

    with serving(path, "--quiet", "--interval", "0.05") as server:

        def client(token: str) -> None:
            conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
            while not stop.is_set():
                try:
                    conn.request("GET", "/v2/queues", headers={"Authorization": "Bearer " + token})
                    response = conn.getresponse()
                    body = response.read()
                    names = [q["name"] for q in json.loads(body)]
                except Exception as exc:  # any failure at all is what this test looks for
                    errors.append(repr(exc))
                    conn.close()
                    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
                    continue
                served[0] += 1
                if response.status != 200:
                    errors.append("status %d" % response.status)
                elif token == TOKEN_B:
                    if names != [ALPHA_QUEUE["name"]]:
                        errors.append("account B saw %r" % names[:3])
                else:
                    n = int(names[0].split("-")[0][1:])
                    if names != ["v%d-%d" % (n, i) for i in range(1000 + n)]:
                        errors.append("version %d is not whole" % n)
                    seen.add(n)
            conn.close()

        def refusals() -> int:
            return server.err.count(": cannot read: ") + server.err.count(
                "keeping the last good version"
            )

        threads = [
            threading.Thread(target=client, args=(token,))
            for token in (TOKEN_A, TOKEN_A, TOKEN_A, TOKEN_B)
        ]
        for thread in threads:
            thread.start()
        try:
            for n in range(1, 9):
                text = json.dumps(version(n))
                refused = refusals()
                if n % 4 == 1:
                    path.write_text(text[: len(text) // 2])  # truncated...
                elif n % 4 == 2:
                    os.remove(path)  # deleted...
                elif n % 4 == 3:
                    path.write_text('{"accounts": [}')  # invalid...
                if n % 4:  # ...seen and kept out...
                    eventually(lambda: refusals() > refused)  # noqa: B023
                tmp = tmp_path / "next.json"
                tmp.write_text(text)
                os.replace(tmp, path)  # ...then a good version, atomically, which the clients see
                eventually(lambda: n in seen)  # noqa: B023
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        code, _, err = server.stop()
    assert errors == []
    assert served[0] > 200 and len(seen) >= 3, (served, sorted(seen))
    assert code == 0 and "Traceback" not in err
    assert "keeping the last good version" in err


SIMPLE_SERVER = """
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server
import app

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

inner = app.make_app()

def mounted(environ, start_response):
    # What a dispatcher does for a prefix: move it from PATH_INFO to SCRIPT_NAME.
    path = environ.get("PATH_INFO", "")
    if path.startswith("/qstash/"):
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + "/qstash"
        environ["PATH_INFO"] = path[len("/qstash"):]
    return inner(environ, start_response)

server = make_server("127.0.0.1", 0, mounted, handler_class=Quiet)
print("on http://127.0.0.1:%d" % server.server_port, flush=True)
server.handle_request(); server.handle_request(); server.handle_request(); server.handle_request()
"""


def test_serves_under_wsgiref_simple_server_and_a_prefix(data_path: Path) -> None:
    env = dict(os.environ, QSTASH_LISTS_DATA=str(data_path), PYTHONPATH=str(ROOT))
    env.pop("QSTASH_TOKEN", None)
    with started([sys.executable, "-c", SIMPLE_SERVER], env) as proc:
        port = int(proc.stdout.readline().rsplit(":", 1)[1])  # type: ignore[union-attr]
        answers = []
        for path, headers in [
            ("/v2/queues", {"Authorization": "Bearer " + TOKEN_A}),
            ("/qstash/v2/queues/", {"Authorization": "Bearer " + TOKEN_A}),
            ("/qstash/v2/topics", {}),
            ("/qstash/nowhere", {}),
        ]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            answers.append((response.status, json.loads(response.read())))
            conn.close()
        _, err = proc.communicate(timeout=10)
    assert answers[0] == (200, [served(ALPHA_QUEUE)])
    assert answers[1] == (200, [served(ALPHA_QUEUE)])
    assert answers[2][0] == 401 and answers[3][0] == 404
    assert "Traceback" not in err and "Warning" not in err


def test_make_app_answers_503_until_the_file_is_good_and_never_uses_the_dev_token(
    tmp_path: Path, caplog: Any
) -> None:
    import app

    path = write_json(tmp_path / "data.json", {"queues": []})  # one account, and no QSTASH_TOKEN
    path.write_text('{"accounts": [')  # half written
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        wsgi = app.make_app({"QSTASH_LISTS_DATA": str(path)})
    assert caplog.messages == [
        "%s: line 1, column 15: invalid JSON: Expecting value" % path,
        "%s: serving 503 until it is valid" % path,
    ]
    for token in (app.DEV_TOKEN, TOKEN_A):
        response = call(wsgi, headers=bearer(token))
        assert (response.status, response.headers["Retry-After"]) == (503, "1")
        assert response.json() == {
            "error": "service unavailable: the server's data file cannot be served yet; "
            "the server log names the problem and its fix, and the file is served as soon as it is "
            "good"
        }
    write_json(path, {"queues": []})  # one account: make_app has no token for it
    missing = (
        "%s: holds a single account, and QSTASH_TOKEN is not set: set it to the token its clients "
        "send" % path
    )
    eventually(lambda: missing in caplog.messages)
    assert call(wsgi, headers=bearer(app.DEV_TOKEN)).status == 503
    write_json(path, accounts_document())
    # The reloader's next look.
    eventually(lambda: call(wsgi, headers=bearer(TOKEN_A)).status == 200)
    assert call(wsgi, headers=bearer(app.DEV_TOKEN)).status == 401


def test_make_app_with_a_token_serves_a_one_account_file(tmp_path: Path) -> None:
    import app

    one = write_json(tmp_path / "one.json", {"queues": [ALPHA_QUEUE]})
    wsgi = app.make_app({"QSTASH_LISTS_DATA": str(one), "QSTASH_TOKEN": "t"})
    assert call(wsgi, headers=bearer("t")).json() == [served(ALPHA_QUEUE)]


@pytest.mark.parametrize(
    "environ, line",
    [
        (
            {"QSTASH_TOKEN": "has space"},
            "QSTASH_TOKEN: expected a non-empty token of visible ASCII characters, no spaces",
        ),
        (
            {"QSTASH_LISTS_MAX_SIZE": "lots"},
            "QSTASH_LISTS_MAX_SIZE: expected a size in bytes from 1 to 4G, such as 64M (K, M or G "
            "may follow the number)",
        ),
        (
            {"QSTASH_LISTS_INTERVAL": "\u0662"},
            "QSTASH_LISTS_INTERVAL: expected a number of seconds from 0.01 to 3600",
        ),
        (
            {"QSTASH_LISTS_DATA": "{one}"},
            "{one}: holds a single account, and QSTASH_TOKEN is not set: set it to the token its "
            "clients send",
        ),
    ],
)
def test_make_app_refuses_a_bad_setting_in_one_line(
    data_path: Path, capsys: Any, environ: Dict[str, str], line: str
) -> None:
    import app

    one = write_json(data_path.parent / "one.json", {"queues": []})
    environ = dict(
        {"QSTASH_LISTS_DATA": str(data_path)}, **{k: v.format(one=one) for k, v in environ.items()}
    )
    with pytest.raises(SystemExit) as info:
        app.make_app(environ)
    assert info.value.code == 3  # gunicorn: a worker that failed to boot, not one to boot again
    assert capsys.readouterr().err == line.format(one=one) + "\n"
