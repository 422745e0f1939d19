"""Shared test helpers: drive the WSGI app through wsgiref's validator, run the real server, build
data files."""

import copy
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

import store

# The checkout; pytest puts it on sys.path (pyproject.toml)
ROOT = Path(__file__).resolve().parent.parent

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


SIGNING_KEYS = {"current": "sig_alpha_current", "next": "sig_alpha_next"}  # account A's


def accounts_document() -> Dict[str, Any]:
    """Three accounts: A a group, a queue and signing keys, B one queue, C (by digest) nothing."""
    return copy.deepcopy(
        {
            "accounts": [
                {
                    "token": TOKEN_A,
                    "urlGroups": [ALPHA_GROUP],
                    "queues": [ALPHA_QUEUE],
                    "signingKeys": SIGNING_KEYS,
                },
                {"token": TOKEN_B, "queues": [BETA_QUEUE]},
                {"tokenSha256": hashlib.sha256(TOKEN_C.encode()).hexdigest()},
            ]
        }
    )


#: What the server answers for each optional queue field that a data file leaves out, where that
#: is not "nothing": the one place in the tests that a new optional field with such a default
#: touches.  Every test that checks a served item compares it through served().
QUEUE_DEFAULTS = {"paused": False}
#: A queue's keys as a fault message lists them: as store.py declares them.
QUEUE_KEYS = ", ".join("'%s'" % key for keys in store.KEYS[store.Queue] for key in keys)


def served(item: Dict[str, Any]) -> Dict[str, Any]:
    """A queue or URL group of a data file as the server answers it: each optional field left out
    filled in."""
    if "endpoints" in item:
        return dict(item, endpoints=[dict(endpoint) for endpoint in item["endpoints"]])
    return {**item, **{key: value for key, value in QUEUE_DEFAULTS.items() if key not in item}}


class Response(NamedTuple):
    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    app: Any,
    path: str = "/v2/queues",
    method: str = "GET",
    query: str = "",
    headers: Optional[Dict[str, str]] = None,
    **environ: Any,
) -> Response:
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
    """A server started by ``serving``: its process, URL, banner, and stderr as it comes."""

    def __init__(self, proc: "subprocess.Popen[str]", url: str, banner: List[str]) -> None:
        self.proc = proc
        self.url = url
        self.banner = banner
        self.err = Output(proc.stderr)
        match = re.fullmatch(r"http://([^:]+):(\d+)", url)
        assert match, url
        self.host, self.port = match.group(1), int(match.group(2))

    def get(
        self,
        path: str,
        headers: Optional[Dict[str, str]] = None,
        method: str = "GET",
        body: Optional[bytes] = None,
    ) -> Tuple[int, "http.client.HTTPMessage", bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def whole_banner(self) -> List[str]:
        """The banner's lines, read on to its last: the JS SDK's dev mode's."""
        while not self.banner[-1].startswith("# the JS SDK"):
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "the banner ended early: %r" % self.banner
            self.banner.append(line)
        return self.banner

    def stop(self) -> Tuple[int, str, str]:
        """SIGTERM the server; return its exit status and the rest of its stdout, and all its
        stderr."""
        self.proc.send_signal(signal.SIGTERM)
        out = self.proc.stdout.read()  # type: ignore[union-attr]
        return self.proc.wait(timeout=15), out, self.err.text()


def environment(env: Optional[Dict[str, str]] = None, measured: bool = True) -> Dict[str, str]:
    """This process's environment without QSTASH_TOKEN, and ``env``; not ``measured``: without
    coverage's variables either, so that a process the tests start is not measured (CI's
    coverage run measures every one it can)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if k != "QSTASH_TOKEN" and (measured or not k.startswith("COVERAGE"))
    }
    environ.update(env or {})
    return environ


@contextmanager
def started(
    command: List[str], env: Optional[Dict[str, str]] = None, measured: bool = True, **popen: Any
) -> Iterator["subprocess.Popen[str]"]:
    """Start ``command`` (in the checkout, with ``environment(env, measured)``, in a session of its
    own); on every way out it is killed with every process it started.  A server's workers outlive
    a killed master and hold its pipes, and closing a pipe that an ``Output`` thread reads waits for
    its last writer: one left behind hung CI's whole run after a failed test."""
    options: Dict[str, Any] = dict(
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        start_new_session=True,
    )
    options.update(popen)
    proc = subprocess.Popen(command, env=environment(env, measured), **options)
    try:
        yield proc
    finally:
        # Its group (whose id no new process takes while a member lives), and while it lives (its
        # pid its own), what it started, in groups of their own too (--run's command).
        family = descendants(proc.pid) if proc.poll() is None else []
        for pid, group in [(proc.pid, True)] + [(pid, False) for pid in family]:
            try:
                (os.killpg if group else os.kill)(pid, signal.SIGKILL)
            except OSError:  # gone already (or the group was never its own)
                pass
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def children(pid: int) -> List[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:  # gone
                pass
    return found


def descendants(pid: int) -> List[int]:
    """The processes ``pid`` started, and theirs, while ``pid`` lives."""
    found, pending = [], [pid]
    while pending:
        below = children(pending.pop())
        found += below
        pending += below
    return found


def run(
    args: List[str], env: Optional[Dict[str, str]] = None, timeout: float = 30, **popen: Any
) -> Tuple[int, str, str]:
    """Run ``python app.py ARGS`` to its end (killed after ``timeout``): its exit status, stdout and
    stderr."""
    with started([sys.executable, str(ROOT / "app.py")] + args, env, **popen) as proc:
        out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


class Output:
    """A pipe's lines, read by a thread of its own: a test waits for the line it means."""

    def __init__(self, pipe: Any) -> None:
        self.lines: List[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        try:
            for line in pipe:
                self.lines.append(line)
        except (OSError, ValueError):  # closed under it: the process is gone
            pass

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, text: str, count: int = 1, timeout: float = 10) -> None:
        eventually(lambda: self.count(text) >= count, timeout)

    def text(self) -> str:
        """Everything, once the pipe is closed (the process has ended)."""
        self._thread.join(30)
        return "".join(self.lines)


@contextmanager
def serving(
    data: Path, *args: str, env: Optional[Dict[str, str]] = None, **popen: Any
) -> Iterator[Server]:
    command = [sys.executable, str(ROOT / "app.py"), "--port", "0", "--data", str(data)] + list(
        args
    )
    with started(command, env, **popen) as proc:
        # Never hang the suite on a server that does not come up: kill it after 30 s.
        watchdog = threading.Timer(30, proc.kill)
        watchdog.start()
        try:
            first = proc.stdout.readline()  # type: ignore[union-attr]
        finally:
            watchdog.cancel()
        match = re.search(r" on (http://\S+)", first)
        if not match:
            raise AssertionError(
                "server did not start: %r %r" % (first, proc.communicate(timeout=10))
            )
        banner = [first, proc.stdout.readline(), proc.stdout.readline()]  # type: ignore[union-attr]
        yield Server(proc, match.group(1), banner)


def readme_section_block(title: str, language: str, containing: str = "") -> str:
    """The first code block in ``language`` of the README's section ``title`` (that has
    ``containing``)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## " + title) :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else None]
    for match in re.finditer(r"```%s\n(.*?)```" % language, section, re.S):
        if containing in match.group(1):
            return match.group(1)
    raise AssertionError("no %s block with %r in %s" % (language, containing, title))


def free_port() -> int:
    """A loopback port that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def eventually(check: Any, timeout: float = 10.0) -> Any:
    """Poll ``check`` until it returns something true, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, "still false after %.0f s" % timeout
            return result
        time.sleep(0.05)


def lock_awaited(monkeypatch: Any) -> threading.Event:
    """An Event set once a writer has tried the flock while another held it (it waits for it)."""
    import fcntl

    real, awaited = fcntl.flock, threading.Event()

    def flock(fd: int, how: int) -> None:
        try:
            real(fd, how)
        except BlockingIOError:
            awaited.set()
            raise

    monkeypatch.setattr(fcntl, "flock", flock)
    return awaited


def upsert(
    data: store.DataFile,
    digest: bytes,
    name: str,
    parallelism: Optional[int] = None,
    paused: Optional[bool] = None,
) -> str:
    """A queue's upsert as POST /v2/queues makes it, straight to ``data``: what it did."""
    return data.update(
        digest, lambda account, now: store.upsert_queue(account, now, name, parallelism, paused)
    )
