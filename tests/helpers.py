"""Shared test helpers: drive the WSGI app through wsgiref's validator, run the real server, build data files."""

import copy
import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

ROOT = Path(__file__).resolve().parent.parent  # the checkout; pytest puts it on sys.path (pyproject.toml)

TOKEN_A = "token-a"
TOKEN_B = "token-b"
TOKEN_C = "token-c"  # stored only as its SHA-256 digest

ALPHA_GROUP = {
    "createdAt": 1700000000000,
    "updatedAt": 1700000500000,
    "name": "orders",
    "endpoints": [
        {"name": "billing", "url": "https://billing.example.com/hook"},
        {"url": "http://crm.example.com/hook"},
    ],
}
ALPHA_QUEUE = {
    "createdAt": 1700000000000,
    "updatedAt": 1700000000000,
    "name": "emails",
    "parallelism": 2,
    "lag": 0,
    "paused": False,
}
Q_TEMPLATE = {"createdAt": 1, "updatedAt": 2, "name": "q", "parallelism": 1, "lag": 0}
BETA_QUEUE = {
    "createdAt": 1700000001000,
    "updatedAt": 1700000002000,
    "name": "reports",
    "parallelism": 1,
    "lag": 7,
}


def accounts_document() -> Dict[str, Any]:
    """Three accounts: A has a group and a queue, B one queue, C (by digest) nothing."""
    return copy.deepcopy({
        "accounts": [
            {"token": TOKEN_A, "urlGroups": [ALPHA_GROUP], "queues": [ALPHA_QUEUE]},
            {"token": TOKEN_B, "queues": [BETA_QUEUE]},
            {"tokenSha256": hashlib.sha256(TOKEN_C.encode()).hexdigest()},
        ]
    })


class Response(NamedTuple):
    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(app: Any, path: str = "/v2/queues", method: str = "GET", query: str = "",
         headers: Optional[Dict[str, str]] = None, **environ: Any) -> Response:
    """Call ``app`` once, wrapped in wsgiref's validator, and collect the response."""
    env: Dict[str, Any] = {}
    setup_testing_defaults(env)
    env.update(REQUEST_METHOD=method, PATH_INFO=path, QUERY_STRING=query, SCRIPT_NAME="")
    for name, value in (headers or {}).items():
        env["HTTP_" + name.upper().replace("-", "_")] = value
    env.update(environ)
    started: List[Any] = []

    def start_response(status: str, response_headers: List[Any], exc_info: Any = None) -> Any:
        started[:] = [status, response_headers]
        return lambda data: None

    body = validator(app)(env, start_response)  # an iterator with close(), as PEP 3333 asks
    try:
        data = b"".join(body)
    finally:
        body.close()  # type: ignore[attr-defined]
    status, response_headers = started
    names = [name.lower() for name, _ in response_headers]
    assert len(names) == len(set(names)), "repeated header: %r" % response_headers
    return Response(int(status[:3]), {name: value for name, value in response_headers}, data)


def bearer(token: str) -> Dict[str, str]:
    return {"Authorization": "Bearer " + token}


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


class Server:
    def __init__(self, proc: "subprocess.Popen[str]", url: str, banner: List[str]) -> None:
        self.proc = proc
        self.url = url
        self.banner = banner
        match = re.fullmatch(r"http://([^:]+):(\d+)", url)
        assert match, url
        self.host, self.port = match.group(1), int(match.group(2))

    def get(self, path: str, headers: Optional[Dict[str, str]] = None,
            method: str = "GET") -> Tuple[int, "http.client.HTTPMessage", bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def stop(self) -> Tuple[int, str, str]:
        """SIGTERM the server; return its exit status and the rest of its stdout and stderr."""
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=15)
        return self.proc.returncode, out, err


def run(args: List[str], env: Optional[Dict[str, str]] = None, **kwargs: Any) -> "subprocess.Popen[str]":
    environ = {k: v for k, v in os.environ.items() if k != "QSTASH_TOKEN"}
    environ.update(env or {})
    return subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")] + args,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=str(ROOT), **kwargs,
    )


@contextmanager
def serving(data: Path, *args: str, env: Optional[Dict[str, str]] = None, **popen: Any) -> Iterator[Server]:
    proc = run(["--port", "0", "--data", str(data)] + list(args), env, **popen)
    # Never hang the suite on a server that does not come up: kill it after 30 s.
    watchdog = threading.Timer(30, proc.kill)
    watchdog.start()
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r" on (http://\S+)", first)
        if not match:
            proc.kill()
            raise AssertionError("server did not start: %r %r" % (first, proc.communicate()))
        banner = [first, proc.stdout.readline(), proc.stdout.readline()]  # type: ignore[union-attr]
        server = Server(proc, match.group(1), banner)
        yield server
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def eventually(check: Any, timeout: float = 10.0) -> Any:
    """Poll ``check`` until it returns something true, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, "still false after %.0f s" % timeout
            return result
        time.sleep(0.05)
