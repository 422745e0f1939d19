"""Slow, broken and hostile clients against the real server, and gunicorn restarting a worker
while the data file is bad.  Each case here broke the service before its fix."""

import http.client
import json
import os
import re
import resource
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from helpers import (
    ALPHA_QUEUE,
    Q_TEMPLATE,
    ROOT,
    TOKEN_A,
    Output,
    accounts_document,
    children,
    eventually,
    free_port,
    run,
    served,
    serving,
    started,
    write_json,
)

import app as service

SECRET = "eyJVc2VySUQiOiJzM2NyM3QiLCJQYXNzd29yZCI6Im5vcGUifQ=="


def big_document(queues: int) -> Dict[str, Any]:
    return {
        "accounts": [
            {
                "token": TOKEN_A,
                "queues": [dict(ALPHA_QUEUE)]
                + [dict(Q_TEMPLATE, name="queue-%05d" % i) for i in range(queues)],
            }
        ]
    }


def get(
    host: str, port: int, path: str, token: Optional[str] = TOKEN_A, timeout: float = 10
) -> Tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(
            "GET", path, headers={} if token is None else {"Authorization": "Bearer " + token}
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_never_reading_pipeliners_do_not_stop_a_fresh_client(tmp_path: Path) -> None:
    """As many clients as there are worker threads each pipeline 200 requests for a 285 KB list
    and never read.  waitress's default output watermark (16 MiB) parked every worker for as
    long as those clients stayed; bodies now go by reference and no worker waits for a reader."""
    data = write_json(tmp_path / "big.json", big_document(3200))
    request = b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"
    with serving(data, "--threads", "4") as server:
        status, body = get(server.host, server.port, "/v2/queues")
        assert status == 200 and len(body) > 250000
        hogs = []
        for _ in range(4):
            sock = socket.create_connection((server.host, server.port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(request * 200)
            hogs.append(sock)
        try:
            # Taken by the workers: with the old watermark, each parked after some 60 answers.
            server.err.wait_for('"GET /v2/queues" 200', count=100)
            assert get(server.host, server.port, "/v2/queues/emails") == (
                200,
                json.dumps(served(ALPHA_QUEUE), separators=(",", ":")).encode(),
            )
        finally:
            for sock in hogs:
                sock.close()
        code, _, err = server.stop()
    assert code == 0 and "Traceback" not in err


def test_a_burst_of_waiting_requests_writes_no_line_for_each(tmp_path: Path) -> None:
    """waitress warns "Task queue depth is N" for each request that waits for a thread, from the
    thread that serves every connection, holding its task lock: 400 at once would be 400 lines (a
    stderr that is read slowly would hold up every client), so python app.py makes no such
    record."""
    data = write_json(tmp_path / "data.json", big_document(100))
    request = b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"
    with serving(data, "--threads", "1", "--quiet") as server:
        clients = [
            socket.create_connection((server.host, server.port), timeout=10) for _ in range(400)
        ]
        try:
            for sock in clients:
                sock.sendall(request)
            for sock in clients:
                assert sock.recv(12) == b"HTTP/1.1 200"
        finally:
            for sock in clients:
                sock.close()
        code, _, err = server.stop()
    assert code == 0
    assert err.count("Task queue depth is ") == 0, err


def test_descriptors_above_1023_do_not_crash_the_server(tmp_path: Path) -> None:
    """40 inherited descriptors and 1,000 idle connections put the server's sockets above 1023,
    where select() fails; the server polls instead, answers on them, and answers a fresh client
    once they are gone."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2200:
        if hard != resource.RLIM_INFINITY and hard < 2200:
            pytest.skip(
                "this machine allows %d descriptors: run it as root, or after ulimit -Hn 2200"
                % hard
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (2200, hard))  # the server inherits it
    inherited = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]
    data = write_json(tmp_path / "data.json", accounts_document())
    try:
        with serving(data, "--quiet", pass_fds=inherited) as server:
            idle = [
                socket.create_connection((server.host, server.port), timeout=10) for _ in range(995)
            ]
            try:
                last = idle[-1]  # accepted last: the server's highest descriptor
                last.sendall(
                    b"GET /v2/queues/emails HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
                    b"token-a\r\n\r\n"
                )
                assert last.recv(4096).startswith(b"HTTP/1.1 200 ")
                assert server.proc.poll() is None
                highest = max(int(fd) for fd in os.listdir("/proc/%d/fd" % server.proc.pid))
                assert highest > 1023
            finally:
                for sock in idle:
                    sock.close()
            assert get(server.host, server.port, "/v2/queues/emails")[0] == 200
            code, _, err = server.stop()
    finally:
        for fd in inherited:
            os.close(fd)
    assert code == 0 and "Traceback" not in err and "out of range" not in err


def test_query_values_never_reach_the_log(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    with serving(data) as server:
        for query in [
            "token=" + SECRET,
            "QSTASH_TOKEN=" + SECRET,
            "access_token=" + SECRET,
            "Authorization=Bearer%20" + SECRET,
            "qstash_token=" + SECRET,
            SECRET,
        ]:
            assert get(server.host, server.port, "/v2/queues?" + query, token=None)[0] == 401
        code, _, err = server.stop()
    assert code == 0
    assert err.count('"GET /v2/queues?') == 6
    assert SECRET not in err and SECRET[:12] not in err and SECRET[-12:] not in err


def test_a_junk_query_is_answered_correctly_and_logged_short(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    with serving(data) as server:
        assert (
            get(
                server.host,
                server.port,
                "/v2/queues/emails?" + "&".join(["qstash_token=x"] * 500),
                token=None,
            )[0]
            == 401
        )
        status, body = get(
            server.host,
            server.port,
            "/v2/queues/emails?" + "&".join(["qstash_token=token-a"] * 500),
            token=None,
        )
        assert (status, json.loads(body)) == (200, served(ALPHA_QUEUE))
        code, _, err = server.stop()
    lines = [line for line in err.splitlines() if '"GET /v2/queues/emails?' in line]
    assert len(lines) == 2 and all(len(line) < 300 and "[492 more]" in line for line in lines)


def test_check_never_echoes_a_token_pasted_as_its_digest(tmp_path: Path) -> None:
    bad = write_json(tmp_path / "data.json", {"accounts": [{"tokenSha256": SECRET}]})
    code, out, err = run(["--check", "--data", str(bad)])
    assert code == 2 and out == ""
    assert err.startswith("%s: accounts[0].tokenSha256: expected 64 hexadecimal digits" % bad)
    assert SECRET not in err and SECRET[:12] not in err


def wait_until_answered(port: int, timeout: float = 30) -> None:
    """Wait for a server that is starting on ``port`` to answer."""

    def answered() -> bool:
        try:
            return get("127.0.0.1", port, "/v2/queues/emails", timeout=2)[0] == 200
        except OSError:
            return False

    eventually(answered, timeout=timeout)


def deploy_command(program: str, port: int = 8080) -> List[str]:
    """docs/deploying.md's command line ``QSTASH_TOKEN=... program ...``, listening on
    127.0.0.1:``port`` instead of the 8080 (or 8081) it shows."""
    text = (ROOT / "docs" / "deploying.md").read_text()
    match = re.search(
        r"^QSTASH_TOKEN=\.\.\. (?:\.venv/bin/)?(%s .*)$" % re.escape(program), text, re.M
    )
    assert match, program
    return shlex.split(re.sub(r"127\.0\.0\.1:80\d\d\b", "127.0.0.1:%d" % port, match.group(1)))


def test_gunicorn_keeps_serving_when_a_worker_restarts_while_the_file_is_bad(
    tmp_path: Path,
) -> None:
    """gunicorn (the documented recipe, two workers) loses a worker while the data file is invalid.
    The new worker answers 503 until the file is good, and the master stays up."""
    data = write_json(tmp_path / "data.json", accounts_document())
    port = free_port()
    command = [sys.executable, "-m"] + deploy_command("gunicorn", port)
    env = dict(os.environ, QSTASH_LISTS_DATA=str(data), PYTHONPATH=str(ROOT))
    env.pop("QSTASH_TOKEN", None)
    with started(command, env, cwd=str(tmp_path)) as master:
        log = Output(master.stderr)
        wait_until_answered(port)
        workers = eventually(lambda: len(children(master.pid)) == 2 and children(master.pid))
        # An edit half done, renamed over the file (written in place, a worker could judge the
        # file empty first, and say so twice).
        data.with_suffix(".new").write_text('{"accounts": [')
        os.replace(data.with_suffix(".new"), data)
        kept, unserved = (
            "%s: keeping the last good version" % data,
            "%s: serving 503 until it is valid" % data,
        )
        eventually(lambda: log.count(kept) + log.count(unserved) == 2, 30)  # both judged it
        refused = log.count(unserved)
        os.kill(workers[0], signal.SIGKILL)
        eventually(lambda: len(set(children(master.pid)) - set(workers)) == 1, timeout=30)
        log.wait_for(unserved, count=refused + 1)  # the new worker has no good version
        statuses = set()
        for _ in range(40):
            status, body = get("127.0.0.1", port, "/v2/queues/emails")
            statuses.add(status)
            if status == 503:
                assert json.loads(body)["error"] == service.UNAVAILABLE
        assert statuses <= {200, 503} and master.poll() is None
        document = accounts_document()
        document["accounts"][0]["queues"][0]["lag"] = 5
        write_json(data, document)
        eventually(
            lambda: all(
                json.loads(get("127.0.0.1", port, "/v2/queues/emails")[1]).get("lag") == 5
                for _ in range(10)
            ),
            timeout=30,
        )
        assert master.poll() is None
        master.send_signal(signal.SIGTERM)
        assert master.wait(timeout=30) == 0
    err = log.text()
    assert "%s: cannot" % data not in err
    assert "%s: line 1, column 15: invalid JSON" % data in err


def test_the_documented_waitress_serve_command_has_the_same_limits(tmp_path: Path) -> None:
    command = deploy_command("waitress-serve")
    flags = {
        arg[2:].split("=")[0].replace("-", "_"): (arg.split("=", 1)[1] if "=" in arg else True)
        for arg in command
        if arg.startswith("--") and not arg.startswith("--call")
    }
    expected = dict(
        service.WAITRESS_SETTINGS, threads=int(service.SETTINGS["threads"].default or 8)
    )
    assert set(flags) >= set(expected)
    for name, value in expected.items():
        assert str(flags[name]).lower() == str(value).lower(), name
    data = write_json(tmp_path / "data.json", accounts_document())
    port = free_port()
    env = dict(os.environ, QSTASH_LISTS_DATA=str(data), PYTHONPATH=str(ROOT))
    with started(
        [sys.executable, "-m", "waitress"] + deploy_command("waitress-serve", port)[1:],
        env,
        cwd=str(tmp_path),
    ):
        wait_until_answered(port)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
            )
            assert sock.recv(100)[9:13] == b"431 "  # waitress's own default allows 256 KiB
