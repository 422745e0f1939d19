"""The deployment recipe as it is written: Debian's nginx running docs/nginx/qstash-lists.conf in
front of real replicas (``python app.py``), on loopback ports, against slow, idle and
never-reading clients, a rolling restart and a crash, a data-file change, and revalidation.  Each
case is bounded in time; hostile clients come from other loopback addresses (127.0.0.2 and up)
than the fresh one."""

import http.client
import os
import resource
import shutil
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from helpers import (
    ALPHA_QUEUE,
    Q_TEMPLATE,
    ROOT,
    TOKEN_A,
    Output,
    accounts_document,
    eventually,
    free_port,
    started,
    write_json,
)

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install nginx; .ci/run does)"
)
CONF = ROOT / "docs" / "nginx" / "qstash-lists.conf"
REQUEST = b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"
MAIN = """daemon off;
worker_processes 1;
worker_rlimit_nofile 8192;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/qstash-lists.conf;
}}
"""


@pytest.fixture(autouse=True)
def descriptors() -> None:
    """Room for the hundreds of client sockets these tests open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))


def get(
    port: int, path: str = "/v2/queues", timeout: float = 10
) -> Tuple[int, "http.client.HTTPMessage", bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer " + TOKEN_A})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


@contextmanager
def replica(data: Path, port: int) -> Iterator[Any]:
    """``python app.py`` on ``port``, answering; its stderr is read as it comes, as a supervisor
    would."""
    command = [
        sys.executable,
        str(ROOT / "app.py"),
        "--port",
        str(port),
        "--data",
        str(data),
        "--quiet",
    ]
    with started(command) as proc:
        Output(proc.stderr)
        assert " on http://" in proc.stdout.readline()  # type: ignore[union-attr]
        yield proc


@contextmanager
def nginx(tmp_path: Path, replicas: List[int], rate: str = "100r/s") -> Iterator[int]:
    """nginx with the documented file, its ports (and limit_req's ``rate``) changed to this
    test's: yields nginx's port."""
    port = free_port()
    text = CONF.read_text().replace("listen 80;", "listen 127.0.0.1:%d;" % port)
    text = text.replace(" rate=100r/s;", " rate=%s;" % rate)
    text = text.replace("/var/log/nginx/qstash-lists.log", str(tmp_path / "access.log"))
    upstreams = ["    server 127.0.0.1:%d max_fails=0;\n" % p for p in replicas]
    text = text.replace(
        "    server 127.0.0.1:8081 max_fails=0;\n    server 127.0.0.1:8082 max_fails=0;\n",
        "".join(upstreams),
    )
    assert "".join(upstreams) in text, "the upstream lines of docs/nginx/qstash-lists.conf changed"
    (tmp_path / "qstash-lists.conf").write_text(text)
    (tmp_path / "nginx.conf").write_text(MAIN.format(tmp=tmp_path))
    assert NGINX is not None
    with started([NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")]) as proc:
        eventually(lambda: _connects(port) or proc.poll() is not None)
        assert proc.poll() is None, (tmp_path / "error.log").read_text()
        yield port
        proc.send_signal(signal.SIGQUIT)  # nginx's graceful stop
        proc.wait(timeout=30)


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def hostile(port: int, count: int) -> List[socket.socket]:
    """``count`` connections to nginx from 127.0.0.2, 127.0.0.3, ... (20 from each)."""
    sockets = []
    for i in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.%d" % (2 + i // 20), 0))
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sockets.append(sock)
    return sockets


def fresh_client_answered(port: int, timeout: float) -> bool:
    """Whether a fresh client is answered before its own socket timeout (a client's, not a
    measurement)."""
    status, _, body = get(port, "/v2/queues/emails", timeout=timeout)
    return status == 200 and body.startswith(b'{"createdAt"')


def test_tricklers_and_idle_connections_do_not_stop_a_fresh_client(tmp_path: Path) -> None:
    """400 clients sending a request a byte a second and 400 idle connections: a fresh client is
    answered within a second (waitress alone never times a trickler out)."""
    data = write_json(tmp_path / "data.json", accounts_document())
    backend = free_port()
    with replica(data, backend), nginx(tmp_path, [backend]) as port:
        tricklers, idle = hostile(port, 400), hostile(port, 400)
        try:
            for i in range(3):  # three seconds of trickling, a byte each
                for sock in tricklers:
                    try:
                        sock.send(REQUEST[i : i + 1])
                    except OSError:
                        pass  # dropped by nginx: what a proxy is for
                assert fresh_client_answered(port, timeout=5)
                time.sleep(1)  # the tricklers' pace: a byte a second
        finally:
            for sock in tricklers + idle:
                sock.close()


def test_never_reading_pipeliners_do_not_stop_a_fresh_client(tmp_path: Path) -> None:
    """200 clients each pipelining 50 requests and never reading: nginx buffers the answers and
    the replica goes on answering, so a fresh client is answered while they still hold their
    connections (a replica they held would answer it only once nginx drops them, send_timeout
    10 s).  How long it waits depends on the machine: docs/deploying.md gives what was measured."""
    data = write_json(
        tmp_path / "data.json",
        {
            "accounts": [
                {
                    "token": TOKEN_A,
                    "queues": [dict(ALPHA_QUEUE)]
                    + [dict(Q_TEMPLATE, name="q%d" % i) for i in range(100)],
                }
            ]
        },
    )
    backend = free_port()
    with replica(data, backend), nginx(tmp_path, [backend]) as port:
        hogs = hostile(port, 200)
        try:
            for sock in hogs:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(REQUEST * 50)
            # Before nginx's send_timeout (10 s) drops them.
            assert fresh_client_answered(port, timeout=9)
        finally:
            for sock in hogs:
                sock.close()


class Load:
    """Two keep-alive clients asking through nginx until stopped, 40 times a second each (within
    the configuration's 100 a second per address), counting what failed when."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.failures: List[Tuple[float, str]] = []
        self.served = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run) for _ in range(2)]
        for thread in self.threads:
            thread.start()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.is_set():
            try:
                conn.request(
                    "GET", "/v2/queues/emails", headers={"Authorization": "Bearer " + TOKEN_A}
                )
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    self.failures.append((time.monotonic(), "status %d" % response.status))
                self.served += 1
                self.stop.wait(0.025)
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append((time.monotonic(), repr(exc)))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.close()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def served_more(self, than: int) -> bool:
        return self.served > than


def test_a_rolling_restart_then_a_crash_loses_nothing(tmp_path: Path) -> None:
    """SIGTERM a replica, start it again, then the other, under a steady load: no request fails.
    Then, 3 s after it is back, one replica is killed outright: nginx's defaults kept it marked
    down for 10 s and blacked the service out (1,460 of 2,000 requests got 502); now nothing
    fails."""
    data = write_json(tmp_path / "data.json", accounts_document())
    ports = [free_port(), free_port()]
    command = [
        [sys.executable, str(ROOT / "app.py"), "--port", str(p), "--data", str(data), "--quiet"]
        for p in ports
    ]
    procs: Dict[int, Any] = {}
    contexts = {}

    def start(i: int) -> None:
        contexts[i] = started(command[i])
        procs[i] = contexts[i].__enter__()
        assert " on http://" in procs[i].stdout.readline()

    def stop(i: int, signum: int = signal.SIGTERM) -> None:
        procs[i].send_signal(signum)
        procs[i].wait(timeout=30)
        contexts[i].__exit__(None, None, None)

    start(0)
    start(1)
    try:
        with nginx(tmp_path, ports) as port:
            load = Load(port)
            try:
                for i in (0, 1):  # the rolling restart
                    served = load.served
                    stop(i)
                    eventually(lambda: load.served_more(served + 20))  # noqa: B023 - served while it is down
                    start(i)
                    served = load.served
                    eventually(lambda: load.served_more(served + 20))  # noqa: B023
                assert load.failures == []
                start_of_crash = time.monotonic()
                stop(1, signal.SIGKILL)  # the other replica is back since a moment; this one dies
                served = load.served
                eventually(lambda: load.served_more(served + 100))
            finally:
                load.finish()
            # Only what was in flight on the killed replica may fail, and nginx retries even that.
            assert len(load.failures) <= 2, load.failures
            assert all(at >= start_of_crash for at, _ in load.failures), load.failures
    finally:
        for i in list(procs):
            if procs[i].poll() is None:
                stop(i)


def test_a_change_to_the_data_file_reaches_every_replica(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    ports = [free_port(), free_port()]
    with replica(data, ports[0]), replica(data, ports[1]):
        before = {get(p)[1]["ETag"] for p in ports}
        assert len(before) == 1  # the same bytes, the same ETag on every replica
        document = accounts_document()
        document["accounts"][0]["queues"][0]["lag"] = 42
        write_json(tmp_path / "next.json", document)
        os.replace(tmp_path / "next.json", data)
        eventually(lambda: all(get(p)[1]["ETag"] not in before for p in ports), timeout=30)
        assert len({get(p)[1]["ETag"] for p in ports}) == 1


def test_revalidation_keeps_the_connection_to_nginx(tmp_path: Path) -> None:
    """waitress closes a connection after a 304; nginx keeps the client's open across them."""
    data = write_json(tmp_path / "data.json", accounts_document())
    backend = free_port()
    with replica(data, backend), nginx(tmp_path, [backend]) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/v2/queues", headers={"Authorization": "Bearer " + TOKEN_A})
        first = conn.getresponse()
        first.read()
        etag = first.getheader("ETag") or ""
        sock = conn.sock
        for _ in range(5):
            conn.request(
                "GET",
                "/v2/queues",
                headers={"Authorization": "Bearer " + TOKEN_A, "If-None-Match": etag},
            )
            response = conn.getresponse()
            response.read()
            assert response.status == 304 and not response.will_close
            assert conn.sock is sock  # the same connection: http.client would have opened another
        conn.close()


def test_nginx_compresses_a_large_list_for_a_client_that_asks(tmp_path: Path) -> None:
    """The replicas send bodies whole (docs/http.md); the documented nginx compresses them."""
    import gzip

    document = {
        "accounts": [
            {"token": TOKEN_A, "queues": [dict(ALPHA_QUEUE, name="q%d" % i) for i in range(100)]}
        ]
    }
    data = write_json(tmp_path / "data.json", document)
    backend = free_port()
    with replica(data, backend), nginx(tmp_path, [backend]) as port:
        plain = get(port)[2]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": "Bearer " + TOKEN_A, "Accept-Encoding": "gzip"}
        conn.request("GET", "/v2/queues", headers=headers)
        response = conn.getresponse()
        body = response.read()
        conn.close()
    assert response.getheader("Content-Encoding") == "gzip" and len(body) * 4 < len(plain)
    assert gzip.decompress(body) == plain


def test_the_health_check_is_never_rate_limited_and_skips_a_replica_that_is_not_ready(
    tmp_path: Path,
) -> None:
    """Hundreds of health checks from one address pass, where the API's own requests get 429 past
    their burst of 200; a replica with nothing good to serve (503) is passed over for a ready one.
    The rate is one a minute, so the burst is spent by a count of requests at any speed."""
    import hashlib
    import json

    data = write_json(tmp_path / "data.json", accounts_document())
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    ports = [free_port(), free_port()]
    starting = [
        sys.executable,
        "-m",
        "waitress",
        "--listen=127.0.0.1:%d" % ports[1],
        "--call",
        "app:make_app",
    ]
    with (
        replica(data, ports[0]),
        started(starting, {"QSTASH_LISTS_DATA": str(broken)}) as not_ready,
        nginx(tmp_path, ports, rate="1r/m") as port,
    ):
        eventually(lambda: _connects(ports[1]))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        statuses = []
        for path in ["/healthz"] * 400 + ["/v2/queues"] * 400:
            conn.request("GET", path, headers={"Authorization": "Bearer " + TOKEN_A})
            response = conn.getresponse()
            body = response.read()
            statuses.append((path, response.status))
            if path == "/healthz" and response.status == 200:
                assert json.loads(body)["version"] == hashlib.sha256(data.read_bytes()).hexdigest()
        conn.close()
        # The not-ready replica's 503s passed over.
        assert statuses[:400] == [("/healthz", 200)] * 400
        # The burst (200) and the first pass, the next is refused: unless they took a minute.
        assert statuses[400:602] == [("/v2/queues", 200)] * 201 + [("/v2/queues", 429)]
        assert not_ready.poll() is None


def test_the_access_log_shows_no_query(tmp_path: Path) -> None:
    """nginx's own format would log the request line whole, with any qstash_token in it."""
    data = write_json(tmp_path / "data.json", accounts_document())
    backend = free_port()
    with replica(data, backend), nginx(tmp_path, [backend]) as port:
        status, _, _ = get(port, "/v2/queues/emails?qstash_token=" + TOKEN_A + "&x=1")
        assert status == 200
        eventually(
            lambda: (tmp_path / "access.log").exists() and (tmp_path / "access.log").read_text()
        )
    [line] = (tmp_path / "access.log").read_text().splitlines()
    assert '"GET /v2/queues/emails" 200 ' in line and TOKEN_A not in line and "?" not in line
