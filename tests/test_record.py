"""--record: a data file from a real account, tried against a running qstash-lists (a round trip)
and against a small fake QStash that misbehaves in each way a real one might.  Every failure is one
line that says what happened and what to do, and leaves the old file byte for byte."""

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from helpers import (
    ALPHA_GROUP,
    ALPHA_QUEUE,
    SIGNING_KEYS,
    TOKEN_A,
    accounts_document,
    bearer,
    call,
    run,
    served,
    serving,
    write_json,
)

import app as service

Answer = Tuple[int, str, bytes]  # status, Content-Type, body
UPSTREAM = "is --upstream (QSTASH_LISTS_UPSTREAM) the QStash API?"


class Fake(http.server.ThreadingHTTPServer):
    answers: Dict[str, Answer]
    delay: float = 0.0
    seen: List[Tuple[str, Optional[str]]]
    misbehave: Optional[str] = None  # "drip", "endless" or "redirect": see Handler


class Handler(http.server.BaseHTTPRequestHandler):
    server: Fake

    def do_GET(self) -> None:  # noqa: N802
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        time.sleep(self.server.delay)
        if self.server.misbehave is not None:
            try:
                self.misbehave(self.server.misbehave)
            except OSError:  # the client gave up
                pass
            return
        status, kind, body = self.server.answers.get(
            self.path, (404, "application/json", b'{"error":"no"}')
        )
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def misbehave(self, how: str) -> None:
        """A whole valid answer a byte every 0.3 s ("drip"), an array that never ends ("endless"),
        or a redirect to itself ("redirect")."""
        if how == "redirect":
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.server.answers[self.path][2]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if how == "drip":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.flush()
        if how == "drip":
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
            return
        self.wfile.write(b"[")
        while True:  # never more than --max-size in the time given, and never the end
            self.wfile.write(json.dumps(ALPHA_QUEUE).encode() + b",")
            self.wfile.flush()
            time.sleep(0.01)

    def log_message(self, *args: Any) -> None:
        pass


def good(extra: bool = False) -> Dict[str, Answer]:
    endpoints: List[Dict[str, str]] = [dict(e) for e in ALPHA_GROUP["endpoints"]]  # type: ignore[attr-defined]
    group: Dict[str, Any] = dict(ALPHA_GROUP, endpoints=endpoints)
    queue: Dict[str, Any] = dict(ALPHA_QUEUE)
    if extra:  # fields QStash may add over time, and an endpoint without a name written as ""
        endpoints.append({"url": "https://c.example.com/hook", "name": "", "topicName": "orders"})
        queue.update(dlqCount=3, secretish="value-not-to-print")
    return {
        "/v2/topics": (200, "application/json", json.dumps([group]).encode()),
        "/v2/queues": (200, "application/json", json.dumps([queue]).encode()),
        "/v2/keys": (200, "application/json", json.dumps(SIGNING_KEYS).encode()),
    }


@pytest.fixture
def fake() -> Iterator[Fake]:
    server = Fake(("127.0.0.1", 0), Handler)
    server.answers, server.seen = good(), []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def record(fake: Fake, path: Path, *args: str, token: str = TOKEN_A) -> Tuple[int, str, str]:
    return run(
        ["--record", "--data", str(path)] + list(args),
        env={
            "QSTASH_LISTS_UPSTREAM": "http://127.0.0.1:%d" % fake.server_address[1],
            "QSTASH_TOKEN": token,
        },
    )


def test_a_round_trip_serves_the_same_lists(tmp_path: Path) -> None:
    """What a running server answers, recorded, serves the same lists."""
    copy = tmp_path / "copy.json"
    with serving(write_json(tmp_path / "d.json", accounts_document()), "--quiet") as server:
        code, out, err = run(
            ["--record", "--data", str(copy)],
            env={"QSTASH_LISTS_UPSTREAM": server.url, "QSTASH_TOKEN": TOKEN_A},
        )
        assert (code, err) == (0, "")
        assert out == "%s: recorded 1 account, 1 URL group, 1 queue from %s\n" % (copy, server.url)
        original = service.create_app(
            service.open_data(str(tmp_path / "d.json"), None), access_log=False
        )
        recorded = service.create_app(service.open_data(str(copy), TOKEN_A), access_log=False)
        for path in (
            "/v2/topics",
            "/v2/queues",
            "/v2/topics/orders",
            "/v2/queues/emails",
        ):
            auth = bearer(TOKEN_A)
            assert (
                call(recorded, path, headers=auth).body == call(original, path, headers=auth).body
            )
    assert TOKEN_A not in out + err + copy.read_text()


def test_unknown_fields_and_signing_keys_are_left_out_by_name(fake: Fake, tmp_path: Path) -> None:
    fake.answers = good(extra=True)
    path = tmp_path / "data.json"
    code, out, err = record(fake, path)
    assert code == 0
    assert (
        err == "%s: left out what a data file does not hold: endpoints.topicName, queues.dlqCount, "
        "queues.secretish\n" % path
    )
    written = json.loads(path.read_text())
    assert "signingKeys" not in written and written["queues"] == [served(ALPHA_QUEUE)]
    assert written["urlGroups"][0]["endpoints"][-1] == {"url": "https://c.example.com/hook"}
    assert [p for p, _ in fake.seen] == ["/v2/topics", "/v2/queues"]
    assert all(auth == "Bearer " + TOKEN_A for _, auth in fake.seen)
    assert run(["--check", "--data", str(path)], env={"QSTASH_TOKEN": TOKEN_A})[0] == 0


BEFORE = b'{"queues": []}\n  '  # an existing file, kept byte for byte


@pytest.mark.parametrize(
    "answers, args, line",
    [
        (
            {"/v2/topics": (401, "application/json", b'{"error":"Unauthorized"}')},
            [],
            "GET {url}/v2/topics: answered 401 Unauthorized; check QSTASH_TOKEN; {path} is "
            "unchanged",
        ),
        (
            {"/v2/queues": (500, "application/json", b'{"error":"oops"}')},
            [],
            "GET {url}/v2/queues: answered 500 Internal Server Error; try again later; {path} is "
            "unchanged",
        ),
        (
            {"/v2/topics": (200, "text/html", b"<html><body>Bad gateway</body></html>")},
            [],
            "GET {url}/v2/topics: the answer is not JSON; " + UPSTREAM + "; {path} is unchanged",
        ),
        (
            {"/v2/topics": (200, "application/json", b'{"topics": []}')},
            [],
            "GET {url}/v2/topics: not a JSON array of objects; "
            + UPSTREAM
            + "; {path} is unchanged",
        ),
        (
            {
                "/v2/queues": (
                    200,
                    "application/json",
                    json.dumps([dict(ALPHA_QUEUE)] * 40).encode(),
                )
            },
            ["--max-size", "1K"],
            "GET {url}/v2/queues: the answer is over 1024 bytes (--max-size); {path} is unchanged",
        ),
        (
            {
                "/v2/queues": (
                    200,
                    "application/json",
                    json.dumps([dict(ALPHA_QUEUE, lag=-1)]).encode(),
                )
            },
            [],
            "{path}: queues[0].lag: expected an integer from 0 to 2**53 - 1, got -1",
        ),
    ],
)
def test_each_failure_is_one_line_and_leaves_the_file(
    fake: Fake, tmp_path: Path, answers: Any, args: Any, line: str
) -> None:
    fake.answers.update(answers)
    path = tmp_path / "data.json"
    path.write_bytes(BEFORE)
    code, out, err = record(fake, path, *args)
    url = "http://127.0.0.1:%d" % fake.server_address[1]
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == line.format(url=url, path=path)
    assert "Traceback" not in err and TOKEN_A not in err
    assert path.read_bytes() == BEFORE
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]  # no temporary file left behind


@pytest.mark.parametrize("how", ["drip", "endless", "silent"])
def test_record_ends_within_its_deadline_whatever_the_api_does(
    fake: Fake, tmp_path: Path, how: str
) -> None:
    """A socket timeout bounds each read, not a whole answer: a drip-fed one (a byte every 0.3 s,
    each read well within any timeout) or one that never ends kept --record running for minutes."""
    if how == "silent":
        fake.delay = 60.0
    else:
        fake.misbehave = how
    path = tmp_path / "data.json"
    path.write_bytes(BEFORE)
    url = "http://127.0.0.1:%d" % fake.server_address[1]
    # Without the deadline, the run would outlast run()'s own 30 s (the fake never finishes): that
    # fails the test,
    # and the message says the deadline ended it, whatever the machine's load.
    code, out, err = run(
        ["--record", "--data", str(path)],
        env={
            "QSTASH_LISTS_UPSTREAM": url,
            "QSTASH_TOKEN": TOKEN_A,
            "QSTASH_LISTS_RECORD_TIMEOUT": "2",
        },
    )
    assert (code, out) == (2, "")
    assert err == (
        "GET %s/v2/topics: no whole answer within 2 s (--record-timeout, "
        "QSTASH_LISTS_RECORD_TIMEOUT); "
        "%s is unchanged\n" % (url, path)
    )
    assert path.read_bytes() == BEFORE
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]


def test_a_redirect_is_not_followed_with_the_token(fake: Fake, tmp_path: Path) -> None:
    """urllib would send the Authorization header on to wherever a redirect points (and loop)."""
    fake.misbehave = "redirect"
    path = tmp_path / "data.json"
    path.write_bytes(BEFORE)
    code, out, err = record(fake, path)
    url = "http://127.0.0.1:%d" % fake.server_address[1]
    assert (code, out) == (2, "")
    assert err == (
        "GET %s/v2/topics: answered 302 Found; %s; %s is unchanged\n" % (url, UPSTREAM, path)
    )
    assert len(fake.seen) == 1 and path.read_bytes() == BEFORE


def test_the_deadline_is_a_setting(tmp_path: Path) -> None:
    code, _, err = run(["--record", "--record-timeout", "0"], env={"QSTASH_TOKEN": TOKEN_A})
    assert (code, err) == (2, "--record-timeout: expected a number of seconds from 0.01 to 3600\n")


def test_a_refused_connection_and_a_missing_token(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "data.json"
    path.write_bytes(BEFORE)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = "http://127.0.0.1:%d" % closed.getsockname()[1]  # bound, never listening: refused
        env = {"QSTASH_LISTS_UPSTREAM": url, "QSTASH_TOKEN": TOKEN_A}
        code, _, err = run(["--record", "--data", str(path)], env=env)
    assert code == 2 and err.startswith("GET %s/v2/topics: no whole answer (" % url)
    assert run(["--record", "--data", str(path)]) == (
        2,
        "",
        "QSTASH_TOKEN is not set: --record reads the account whose token it is\n",
    )
    assert path.read_bytes() == BEFORE


def test_the_file_keeps_its_mode_and_a_symlink_its_target(fake: Fake, tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_bytes(BEFORE)
    target.chmod(0o644)
    link = tmp_path / "data.json"
    link.symlink_to(target)
    code, _, err = record(fake, link)
    assert (code, err) == (0, "")
    assert link.is_symlink() and json.loads(target.read_text())["queues"][0]["name"] == "emails"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.json", "real.json"]


def test_the_size_limit_is_checked_on_the_bytes_written(fake: Fake, tmp_path: Path) -> None:
    """Each answer fits in --max-size; the file they make does not: refused, not written."""
    path = tmp_path / "data.json"
    path.write_bytes(BEFORE)
    limit = max(len(body) for _, _, body in fake.answers.values()) + 1
    code, out, err = record(fake, path, "--max-size", str(limit))
    assert (code, out) == (2, "") and err.count("\n") == 2
    assert err.startswith("%s: would be " % path) and "over the limit of %d bytes" % limit in err
    assert path.read_bytes() == BEFORE


@pytest.mark.parametrize("how", ["nested", "bad host", "no directory"])
def test_each_other_failure_is_one_line(fake: Fake, tmp_path: Path, how: str) -> None:
    path = tmp_path / ("missing/data.json" if how == "no directory" else "data.json")
    if how != "no directory":
        path.write_bytes(BEFORE)
    if how == "nested":
        fake.answers["/v2/topics"] = (200, "application/json", b"[" * 100000 + b"]" * 100000)
    env = {
        "QSTASH_TOKEN": TOKEN_A,
        "QSTASH_LISTS_UPSTREAM": "http://a..b"
        if how == "bad host"
        else "http://127.0.0.1:%d" % fake.server_address[1],
    }
    code, out, err = run(["--record", "--data", str(path)], env=env)
    assert (
        (code, out) == (2, "")
        and "Traceback" not in err
        and err.count("\n") == (2 if how == "no directory" else 1)
    )
    expected = {
        "nested": "the answer is not JSON",
        "bad host": "no whole answer (",
        "no directory": "cannot write: No such file or directory",
    }[how]
    assert expected in err
    assert how == "no directory" or path.read_bytes() == BEFORE
