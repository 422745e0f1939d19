"""Benchmark qstash-lists against a bare WSGI baseline under the same waitress, in one run.

    python tests/benchmark.py [--rounds 21] [--seconds 1] [--connections 8] [--threads 8] [--noise]

Each round measures the service and the baseline back to back (the order
alternating), so both see the same machine; the figures are medians over the
rounds, and each ratio is the median of the per-round ratios.  Many short rounds
beat a few long ones here: this machine's speed drifts over seconds, and a pair of
one-second measurements mostly shares the drift.  The baseline is a WSGI callable
that returns the same bytes the fastest way waitress allows (the file wrapper for
large bodies) with no routing, auth or logging, served with the service's own
waitress settings.  The load comes from wrk where it is installed, else from a
keep-alive client in Python; either way it runs for a bounded time and talks only
to 127.0.0.1.
"""

import argparse
import functools
import hashlib
import http.client
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
import store  # noqa: E402

TOKEN = "bench-token"
AUTH = {"Authorization": "Bearer " + TOKEN}
# On two or more cores, the servers run on core 0 and the load generator on core 1,
# so they do not take turns on the same core (that alone swung the ratio by 20%).
PIN = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
SERVER_CPU = ["taskset", "-c", "0"] if PIN else []
LOAD_CPU = ["taskset", "-c", "1"] if PIN else []


def queue_items(queues: int) -> List[Dict[str, Any]]:
    """``queues`` queues as a data file holds them, named queue-000000 on."""
    return [
        {
            "createdAt": 1700000000000 + i,
            "updatedAt": 1700000000000 + i,
            "name": "queue-%06d" % i,
            "parallelism": i % 10 + 1,
            "lag": i % 1000,
            "paused": i % 7 == 0,
        }
        for i in range(queues)
    ]


def write_data(folder: Path, queues: int) -> Path:
    """A one-account file with ``queues`` queues, written as a person would (indented)."""
    document = {"queues": queue_items(queues)}
    path = folder / ("queues-%d.json" % queues)
    path.write_text(json.dumps(document, indent=2))
    return path


class Server:
    """A server in a subprocess that prints its port on its first line."""

    def __init__(
        self, args: List[str], pin: bool = True, env: Optional[Dict[str, str]] = None
    ) -> None:
        env = dict(os.environ, QSTASH_TOKEN=TOKEN, **(env or {}))
        self.proc = subprocess.Popen(
            (SERVER_CPU if pin else []) + args,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=str(ROOT),
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not match:
            self.proc.kill()
            raise SystemExit("server did not start: %r (%s)" % (line, " ".join(args)))
        self.port = int(match.group(1))
        self.url = "http://127.0.0.1:%d" % self.port

    def cpu_seconds(self) -> Optional[float]:
        """The server's user + system CPU time so far (Linux), or None."""
        try:
            with open("/proc/%d/stat" % self.proc.pid) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def service(data: Path, threads: int, quiet: bool = True) -> Server:
    args = [sys.executable, "app.py", "--port", "0", "--data", str(data), "--threads", str(threads)]
    return Server(args + (["--quiet"] if quiet else []))


def baseline(response: Path, threads: int) -> Server:
    return Server(
        [sys.executable, __file__, "--serve-baseline", str(response), "--threads", str(threads)]
    )


def save_response(path: Path, headers: List[Tuple[str, str]], body: bytes) -> None:
    """Keep a response for the baseline to replay: its headers (less waitress's own) and body."""
    kept = [[k, v] for k, v in headers if k.lower() not in ("date", "server", "connection")]
    path.write_bytes(json.dumps(kept).encode() + b"\n" + body)


def serve_baseline(response_path: str, threads: int) -> None:
    """The baseline: replay one saved response, with no routing, no auth, no logging."""
    from waitress import create_server

    saved_headers, body = Path(response_path).read_bytes().split(b"\n", 1)
    headers = [(k, v) for k, v in json.loads(saved_headers)]

    def bare(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", list(headers))
        wrapper = environ.get("wsgi.file_wrapper")
        if wrapper is not None:
            wrapped: Iterable[bytes] = wrapper(io.BytesIO(body))
            return wrapped
        return [body]

    server = create_server(bare, host="127.0.0.1", port=0, threads=threads, **app.WAITRESS_SETTINGS)
    print("baseline on http://127.0.0.1:%s" % server.effective_port, flush=True)
    server.run()


class Result:
    def __init__(self, rps: float, p50: float, p99: float, requests: int) -> None:
        self.rps, self.p50, self.p99, self.requests = rps, p50, p99, requests
        self.cpu_us: Optional[float] = None  # the server's CPU time per request


def measure(
    server: Server,
    path: str,
    headers: Dict[str, str],
    seconds: float,
    connections: int,
    refused: bool = False,
) -> Result:
    """Load ``server`` and note its CPU time per request: steadier than requests/s on a busy
    machine.

    With ``refused``, every answer must be an error status (a 4xx), not a 2xx.
    """
    before = server.cpu_seconds()
    result = load(server.url + path, headers, seconds, connections, refused=refused)
    after = server.cpu_seconds()
    if before is not None and after is not None and result.requests:
        result.cpu_us = (after - before) / result.requests * 1e6
    return result


def load(
    url: str,
    headers: Dict[str, str],
    seconds: float,
    connections: int,
    pin: bool = True,
    refused: bool = False,
) -> Result:
    """Drive ``url`` for ``seconds`` over ``connections`` keep-alive connections."""
    if shutil.which("wrk"):
        return _wrk(url, headers, seconds, connections, pin, refused)
    return _python_load(url, headers, seconds, connections, refused)


def _wrk(
    url: str,
    headers: Dict[str, str],
    seconds: float,
    connections: int,
    pin: bool = True,
    refused: bool = False,
    closing: bool = False,
) -> Result:
    """wrk's figures; with ``closing``, a server may close each connection after an answer without
    saying so (uWSGI's router): wrk counts that as a read error, opens another, and goes on."""
    args = (LOAD_CPU if pin else []) + [
        "wrk",
        "-t1",
        "-c%d" % connections,
        "-d%ds" % max(1, round(seconds)),
        "--latency",
        "--timeout",
        "10s",
    ]
    for name, value in headers.items():
        args += ["-H", "%s: %s" % (name, value)]
    out = subprocess.run(args + [url], capture_output=True, text=True, timeout=seconds + 30).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sockets = re.search(r"Socket errors: connect (\d+), read \d+, write (\d+), timeout (\d+)", out)
    if (sockets and (not closing or sockets.groups() != ("0", "0", "0"))) or (
        int(errors.group(1)) if errors else 0
    ) != (requests if refused else 0):
        raise SystemExit("wrk saw unexpected answers:\n" + out)

    def latency(percent: str) -> float:
        number, unit = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % percent, out, re.M).groups()  # type: ignore
        return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return Result(rps, latency("50"), latency("99"), requests)


def _python_load(
    url: str, headers: Dict[str, str], seconds: float, connections: int, refused: bool = False
) -> Result:
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    path = "/" + url.split("/", 3)[3] if url.count("/") > 2 else "/"
    deadline = time.monotonic() + seconds
    latencies: List[float] = []
    failures: List[str] = []

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine = []
        while time.monotonic() < deadline:
            started = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            if (response.status >= 400) != refused:
                failures.append(str(response.status))
            mine.append(time.perf_counter() - started)
        conn.close()
        latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit("load saw failures: %s" % failures[:5])
    latencies.sort()
    return Result(
        len(latencies) / seconds,
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
        len(latencies),
    )


def fetch(
    url: str, headers: Dict[str, str], timeout: float = 10
) -> Tuple[int, List[Tuple[str, str]], bytes]:
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", "/" + url.split("/", 3)[3], headers=headers)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, response.getheaders(), body


def header(headers: List[Tuple[str, str]], name: str) -> Optional[str]:
    return next((v for k, v in headers if k.lower() == name), None)


def compare(
    name: str,
    a: Callable[[], Result],
    b: Callable[[], Result],
    rounds: int,
    rows: List[str],
    a_name: str,
    b_name: str,
) -> Tuple[float, Optional[float]]:
    """Measure ``a`` and ``b`` in each round, alternating which goes first; add table rows.

    Return the median ratio of requests/s (a / b) and of CPU time per request (b / a).
    """
    results: List[Tuple[Result, Result]] = []
    for i in range(rounds):
        if i % 2 == 0:
            ra = a()
            rb = b()
        else:
            rb = b()
            ra = a()
        results.append((ra, rb))
    ratio = statistics.median(ra.rps / rb.rps for ra, rb in results)
    for label, pick in ((a_name, 0), (b_name, 1)):
        rs = [r[pick] for r in results]
        cpu = [r.cpu_us for r in rs if r.cpu_us is not None]
        rows.append(
            "| %s | %s | %.0f | %.2f | %.2f | %s |"
            % (
                name,
                label,
                statistics.median(r.rps for r in rs),
                statistics.median(r.p50 for r in rs),
                statistics.median(r.p99 for r in rs),
                "%.1f" % statistics.median(cpu) if cpu else "-",
            )
        )
    each = " ".join("%.2f" % (ra.rps / rb.rps) for ra, rb in results)
    costs = [rb.cpu_us / ra.cpu_us for ra, rb in results if ra.cpu_us and rb.cpu_us]
    cost = statistics.median(costs) if costs else None
    note = " (CPU per request %s / %s: **%.2f**)" % (b_name, a_name, cost) if cost else ""
    rows.append(
        "| %s | **ratio %s / %s** | **%.2f** | rounds: %s%s | | |"
        % (name, a_name, b_name, ratio, each, note)
    )
    return ratio, cost


def peak_memory_mb(code: str) -> float:
    """Run ``code`` in a fresh interpreter; return its peak resident memory in MB."""
    # VmHWM belongs to the new address space; ru_maxrss would inherit ours across exec on Linux.
    probe = (
        code
        + """
try:
    with open("/proc/self/status") as status:
        print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")))
except OSError:
    import resource
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=str(ROOT)
    ).stdout
    return int(out.split()[-1]) / 1024


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=int(app.SETTINGS["threads"].default or 8))
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=[100, 10000],
        help="queue counts to serve (default: 100 10000; 10000 adds 304)",
    )
    parser.add_argument(
        "--noise",
        action="store_true",
        help="first, the baseline against an identical copy of itself: this machine's noise",
    )
    parser.add_argument(
        "--no-access-log",
        dest="access_log",
        action="store_false",
        help="skip the access log's cost",
    )
    parser.add_argument(
        "--load-queues",
        type=int,
        default=100000,
        help="queues in the file timed against json.load (0: skip)",
    )
    parser.add_argument(
        "--item-queues",
        type=int,
        default=100000,
        help="queues in the file for the per-item body memory (0: skip items)",
    )
    parser.add_argument(
        "--only",
        choices=[
            "table",
            "servers",
            "items",
            "load",
            "accounts",
            "reload",
            "check",
            "junk",
            "hostile",
            "gunicorn",
            "writes",
            "memory",
            "loop",
        ],
        help="run only this part",
    )
    parser.add_argument(
        "--reloads", type=int, default=7, help="reloads timed for each kind (default: 7)"
    )
    parser.add_argument("--serve-baseline", metavar="RESPONSE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_baseline:
        serve_baseline(args.serve_baseline, args.threads)
        return 0

    print(
        "machine: %d cores, Python %s, waitress %s, load from %s%s; %d rounds of %gs, %d "
        "connections, %d threads"
        % (
            os.cpu_count() or 0,
            sys.version.split()[0],
            _waitress_version(),
            "wrk" if shutil.which("wrk") else "a Python client",
            " (servers pinned to core 0, load to core 1)" if PIN else "",
            args.rounds,
            args.seconds,
            args.connections,
            args.threads,
        )
    )

    def drive(server: Server, headers: Dict[str, str]) -> Callable[[], Result]:
        return lambda: measure(server, "/v2/queues", headers, args.seconds, args.connections)

    rows = [
        "| case | server | requests/s | p50 ms | p99 ms | server CPU µs/request |",
        "|---|---|---|---|---|---|",
    ]
    summary: List[str] = []
    first: List[str] = []  # in-process tables, printed before the table of servers
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.item_queues and args.only in (None, "items"):
            item_rows(tmp, args.rounds, args.item_queues, first, summary)
        if args.only in (None, "accounts"):
            account_rows(tmp, args.rounds, first, summary)
        if args.only in (None, "check"):
            check_rows(write_data(tmp, 100000), args.rounds, first, summary)
        if args.only in (None, "reload"):
            reload_rows(tmp, args.reloads, first, summary)
        if args.only in (None, "junk"):
            junk_rows(tmp, args.rounds, args.seconds, args.connections, first, summary)
        if args.only in (None, "hostile"):
            hostile_rows(tmp, first, summary)
        if args.only in (None, "gunicorn"):
            gunicorn_rows(tmp, args.rounds, args.seconds, args.connections, first, summary)
        if args.only in (None, "writes"):
            write_rows(tmp, args.sizes, args.rounds, args.seconds, args.connections, first, summary)
        if args.only in (None, "memory"):
            memory_rows(tmp, first, summary)
        if args.only in (None, "loop"):
            loop_rows(tmp, args.sizes, args.rounds, max(args.seconds, 2.0), first, summary)
        if args.only in (None, "table"):
            table_rows(tmp, args.sizes, args.rounds, args.seconds, args.connections, first, summary)
        for size in args.sizes if args.only in (None, "servers") else []:
            data = write_data(tmp, size)
            svc = service(data, args.threads)
            try:
                url = svc.url + "/v2/queues"
                _, headers, body = fetch(url, AUTH)
                save_response(tmp / "response", headers, body)
                base = baseline(tmp / "response", args.threads)
                try:
                    if args.noise and size == args.sizes[0]:
                        twin = baseline(tmp / "response", args.threads)
                        try:
                            ratio, _ = compare(
                                "%d queues, A/A" % size,
                                drive(twin, AUTH),
                                drive(base, AUTH),
                                args.rounds,
                                rows,
                                "baseline copy",
                                "baseline",
                            )
                            summary.append(
                                "noise: an identical copy of the baseline / the baseline at %d "
                                "queues: %.2f" % (size, ratio)
                            )
                        finally:
                            twin.close()
                    ratio, cost = compare(
                        "%d queues (%d bytes)" % (size, len(body)),
                        drive(svc, AUTH),
                        drive(base, AUTH),
                        args.rounds,
                        rows,
                        "service",
                        "baseline",
                    )
                    summary.append(
                        "service/baseline at %d queues: requests/s %.2f (target >= 0.95); CPU per "
                        "request, baseline/service %s"
                        % (size, ratio, "%.2f" % cost if cost else "-")
                    )
                    # More connections than threads: requests wait for a thread.
                    many = 4 * args.threads
                    ratio, cost = compare(
                        "%d queues, %d connections" % (size, many),
                        functools.partial(measure, svc, "/v2/queues", AUTH, args.seconds, many),
                        functools.partial(measure, base, "/v2/queues", AUTH, args.seconds, many),
                        args.rounds,
                        rows,
                        "service",
                        "baseline",
                    )
                    summary.append(
                        "service/baseline at %d queues, %d connections: requests/s %.2f (target >= "
                        "0.95)" % (size, many, ratio)
                    )
                finally:
                    base.close()
                if size == 10000:
                    cond = dict(AUTH, **{"If-None-Match": header(headers, "etag") or ""})
                    assert fetch(url, cond)[0] == 304
                    ratio, _ = compare(
                        "10000 queues, If-None-Match",
                        drive(svc, cond),
                        drive(svc, AUTH),
                        args.rounds,
                        rows,
                        "304",
                        "200",
                    )
                    summary.append("revalidation: requests/s 304/200 %.2f" % ratio)
            finally:
                svc.close()
        if args.access_log and args.only in (None, "servers"):
            data = write_data(tmp, 100)
            quiet, loud = service(data, args.threads), service(data, args.threads, quiet=False)
            try:
                ratio, _ = compare(
                    "100 queues, access log",
                    drive(loud, AUTH),
                    drive(quiet, AUTH),
                    args.rounds,
                    rows,
                    "log on",
                    "--quiet",
                )
                summary.append("access log on/--quiet: %.2f" % ratio)
            finally:
                quiet.close()
                loud.close()

        if args.load_queues and args.only in (None, "load"):
            load_rows(write_data(tmp, args.load_queues), args.rounds, rows, summary)
    print("\n".join(first + (rows if len(rows) > 2 else [])))
    print()
    print("\n".join(summary))
    return 0


def wsgi_timer(wsgi: Any, path: str, token: str, n: int = 2000) -> Callable[[], float]:
    """Return a function that calls ``wsgi`` n times in-process and gives µs per request."""
    from wsgiref.util import setup_testing_defaults

    environ: Dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, QUERY_STRING="", HTTP_AUTHORIZATION="Bearer " + token)

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        return None

    def once() -> float:
        started = time.perf_counter()
        for _ in range(n):
            for _chunk in wsgi(dict(environ), start_response):
                pass
        return (time.perf_counter() - started) / n * 1e6

    return once


def account_rows(tmp: Path, rounds: int, rows: List[str], summary: List[str]) -> None:
    """Per-request cost of an authorised list and of an unknown token, by number of accounts."""
    import hashlib

    rows.append(
        "| accounts in the file | authorised list, µs | ratio to 1 account | unknown token, µs | "
        "ratio to 1 account |"
    )
    rows.append("|---|---|---|---|---|")
    first: Optional[Tuple[float, float]] = None
    for count in (1, 100, 10000, 100000):
        document = {
            "accounts": [
                {
                    "token": TOKEN,
                    "queues": [
                        {"createdAt": 1, "updatedAt": 1, "name": "q", "parallelism": 1, "lag": 0}
                    ],
                }
            ]
            + [
                {"tokenSha256": hashlib.sha256(b"other-%d" % i).hexdigest()}
                for i in range(count - 1)
            ]
        }
        path = tmp / ("accounts-%d.json" % count)
        path.write_text(json.dumps(document))
        wsgi = app.create_app(app.open_data(str(path), None), access_log=False)
        known, unknown = (
            wsgi_timer(wsgi, "/v2/queues", TOKEN),
            wsgi_timer(wsgi, "/v2/queues", "nobody"),
        )
        samples = [(known(), unknown()) for _ in range(rounds)]
        k = statistics.median(t[0] for t in samples)
        u = statistics.median(t[1] for t in samples)
        first = first or (k, u)
        rows.append(
            "| %d | %.2f | %.2f | %.2f | %.2f |" % (count, k, k / first[0], u, u / first[1])
        )
        if count == 10000:
            summary.append(
                "lookup at 10,000 accounts / 1 account: authorised %.2f, unknown token %.2f "
                "(target <= 1.3)" % (k / first[0], u / first[1])
            )
    rows.append("")


def check_rows(big: Path, rounds: int, rows: List[str], summary: List[str]) -> None:
    """--check of a one-account file against a whole process that only json.loads it: CPU and peak
    memory."""

    def child(args: List[str]) -> Tuple[float, float]:
        code = "import resource, runpy, sys; sys.argv = %r; exec(%r)" % (
            args,
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    "
            "pass\n",
        )
        # VmHWM belongs to this process's own address space; ru_maxrss would inherit ours on Linux.
        probe = code + (
            "\nu = resource.getrusage(resource.RUSAGE_SELF)\nhwm = next(l.split()[1] for l in "
            "open('/proc/self/status') if l.startswith('VmHWM:'))\nprint(u.ru_utime + u.ru_stime, "
            "hwm)"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            check=True,
            cwd=str(ROOT),
            env=dict(os.environ, QSTASH_TOKEN=TOKEN),
        ).stdout.split()
        return float(out[-2]), int(out[-1]) / 1024

    loader = big.with_name("json_load.py")
    loader.write_text("import json, sys\nwith open(sys.argv[1], 'rb') as f:\n    json.load(f)\n")
    pairs = []
    for _ in range(max(5, rounds // 2)):
        pairs.append(
            (
                child([str(loader), str(big)]),
                child([str(ROOT / "app.py"), "--check", "--data", str(big)]),
            )
        )
    cpu = statistics.median(c[0] / j[0] for j, c in pairs)
    mem = statistics.median(c[1] / j[1] for j, c in pairs)
    rows.append(
        "| %s (%.1f MB), whole process | CPU s | peak RSS MB |"
        % (big.name, big.stat().st_size / 1e6)
    )
    rows.append("|---|---|---|")
    rows.append(
        "| python: json.load only | %.3f | %.0f |"
        % (statistics.median(j[0] for j, _ in pairs), statistics.median(j[1] for j, _ in pairs))
    )
    rows.append(
        "| python app.py --check | %.3f | %.0f |"
        % (statistics.median(c[0] for _, c in pairs), statistics.median(c[1] for _, c in pairs))
    )
    rows.append("| ratio | %.2f | %.2f |" % (cpu, mem))
    rows.append("")
    summary.append(
        "--check of 100,000 queues / json.load, whole process: CPU %.2f, peak memory %.2f "
        "(target <= 3)" % (cpu, mem)
    )


OTHER = {"Authorization": "Bearer other-token"}  # the account that only reads during a write storm


def write_file(folder: Path, queues: int, accounts: int = 1) -> Path:
    """A file of ``accounts`` accounts of ``queues`` queues (the writes' token has the first), and
    one more small account that only reads."""
    items = queue_items(queues)
    document = {
        "accounts": [
            {"token": TOKEN if a == 0 else "tok-%d" % a, "queues": items} for a in range(accounts)
        ]
        + [{"token": "other-token", "queues": items[:100]}]
    }
    path = folder / ("writes-%d-%d.json" % (accounts, queues))
    path.write_text(json.dumps(document, indent=2))
    return path


def _writes(
    url: str,
    seconds: float,
    stop: Optional[threading.Event] = None,
    json_server: bool = False,
    client: int = 0,
) -> List[float]:
    """Upsert 8 queues in turn over one keep-alive connection as fast as answers come, for
    ``seconds`` (or until ``stop``); json-server: PUT the same items.  Return each write's time
    in seconds."""
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times: List[float] = []
    deadline = time.monotonic() + seconds
    while (stop is None and time.monotonic() < deadline) or (
        stop is not None and not stop.is_set()
    ):
        name = "queue-%06d" % (client * 8 + len(times) % 8 + 1)  # 8 queues in turn, as an app's
        body = {"queueName": name, "parallelism": len(times) % 9 + 1, "paused": False}
        if json_server:
            body = {
                "id": name,
                "createdAt": 1700000000000,
                "updatedAt": 1700000000000 + len(times),
                "name": name,
                "parallelism": len(times) % 9 + 1,
                "lag": 0,
                "paused": False,
            }
        started = time.perf_counter()
        conn.request(
            "PUT" if json_server else "POST",
            "/queues/" + name if json_server else "/v2/queues",
            json.dumps(body),
            dict(AUTH, **{"Content-Type": "application/json"}),
        )
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit("a write answered %d" % response.status)
        times.append(time.perf_counter() - started)
    conn.close()
    return times


def _clients(url: str, seconds: float, clients: int, json_server: bool = False) -> Result:
    """``clients`` writers at once for ``seconds``: writes a second, and each write's p50 and p99
    (ms)."""
    found: List[List[float]] = [[] for _ in range(clients)]
    threads = [
        threading.Thread(
            target=lambda i=i: found[i].extend(_writes(url, seconds, None, json_server, i))
        )
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    times = sorted(t for each in found for t in each)
    return Result(
        len(times) / seconds,
        times[len(times) // 2] * 1000,
        times[int(len(times) * 0.99)] * 1000,
        len(times),
    )


def cpu_a_write(data: Path, rounds: int) -> float:
    """Server CPU a write (ms) as an app's client spends it: 200 sequential upserts of 8 queues in
    turn, one client; the median of ``rounds``."""
    writer = Server(
        [sys.executable, "app.py", "--port", "0", "--data", str(data), "--quiet", "--writable"]
    )
    try:
        _writes(writer.url, 0.5)  # the first write after a load encodes every line once
        found = []
        for _ in range(rounds):
            before = writer.cpu_seconds()
            conn = http.client.HTTPConnection("127.0.0.1", writer.port, timeout=30)
            for i in range(200):
                body = {"queueName": "queue-%06d" % (i % 8 + 1), "parallelism": i % 9 + 1}
                conn.request("POST", "/v2/queues", json.dumps(body), AUTH)
                conn.getresponse().read()
            conn.close()
            after = writer.cpu_seconds()
            if before is not None and after is not None:
                found.append((after - before) / 200 * 1000)
        return statistics.median(found)
    finally:
        writer.close()


class JsonServer:
    """json-server 0.17 (npm; installed once in .ci-sdk/json-server) on a db.json of the same
    queues: what a user would pick instead.  It rewrites its file after each write, without fsync
    or validation."""

    def __init__(self, folder: Path, queues: int) -> None:
        home = ROOT / ".ci-sdk" / "json-server"
        cli = home / "node_modules" / "json-server" / "lib" / "cli" / "bin.js"
        if not cli.exists():
            home.mkdir(parents=True, exist_ok=True)
            # Its own: npm would install into a package above.
            (home / "package.json").write_text("{}")
            subprocess.run(
                ["npm", "install", "--silent", "--no-audit", "--no-fund", "json-server@0.17.4"],
                cwd=str(home),
                check=True,
                capture_output=True,
            )
        db = folder / ("db-%d.json" % queues)
        db.write_text(
            json.dumps(
                {
                    "queues": [
                        {
                            "id": "queue-%06d" % i,
                            "createdAt": 1700000000000,
                            "updatedAt": 1700000000000,
                            "name": "queue-%06d" % i,
                            "parallelism": 1,
                            "lag": 0,
                            "paused": False,
                        }
                        for i in range(queues)
                    ]
                },
                indent=2,
            )
        )
        with __import__("socket").socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.proc = subprocess.Popen(
            SERVER_CPU + ["node", str(cli), "--port", str(self.port), "--quiet", str(db)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = "http://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 30
        while True:
            try:
                fetch(self.url + "/queues/queue-000001", {})
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def write_rows(
    tmp: Path,
    sizes: List[int],
    rounds: int,
    seconds: float,
    connections: int,
    rows: List[str],
    summary: List[str],
) -> None:
    """--writable: server CPU a write at each size, writes a second (1 and 8 clients) against
    json-server doing the same upserts, and reads of another account during a write storm, on the
    writing process and on a second process serving the same file, against reads without it."""
    node = shutil.which("node") and shutil.which("npm")
    rows += [
        "| file | server CPU ms a write (200 in turn) | writes/s, 1 client | 8 clients | "
        "json-server 1 / 8 | "
        "ratio 1 / 8 | p50 / p99 ms, 1 client | 8 clients | json-server 8 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cases = [(size, 1) for size in sizes] + [(100, 1000)]
    cpu_at: Dict[Tuple[int, int], float] = {}
    for size, accounts in cases:
        data = write_file(tmp, size, accounts)
        label = (
            "%d accounts x %d queues (%s)" % (accounts, size, store.megabytes(data.stat().st_size))
            if accounts > 1
            else "%d queues (%s)" % (size, store.megabytes(data.stat().st_size))
        )
        writer = Server(
            [sys.executable, "app.py", "--port", "0", "--data", str(data), "--quiet", "--writable"]
        )
        rival = JsonServer(tmp, size * accounts) if node and accounts == 1 else None
        try:
            _writes(writer.url, 0.5)  # the first write after a load encodes every line once
            ours, theirs = {1: [], 8: []}, {1: [], 8: []}  # type: ignore[var-annotated]
            for i in range(max(3, rounds // 3)):
                for clients in (1, 8):
                    pair: List[Callable[[], Result]] = [
                        functools.partial(_clients, writer.url, seconds, clients)
                    ]
                    if rival is not None:
                        pair.append(
                            functools.partial(
                                _clients, rival.url, seconds, clients, json_server=True
                            )
                        )
                    for k in range(len(pair)) if i % 2 == 0 else reversed(range(len(pair))):
                        (ours if k == 0 else theirs)[clients].append(pair[k]())
            med = statistics.median
            # In the README's one-account form where there is one account.
            cpu_at[size, accounts] = cpu_a_write(
                write_data(tmp, size) if accounts == 1 else data, max(3, rounds // 3)
            )
            rival_cells = (
                (
                    "%.0f / %.0f" % (med(r.rps for r in theirs[1]), med(r.rps for r in theirs[8])),
                    "**%.2f / %.2f**"
                    % tuple(med(a.rps / b.rps for a, b in zip(ours[c], theirs[c])) for c in (1, 8)),
                    "%.1f / %.1f" % (med(r.p50 for r in theirs[8]), med(r.p99 for r in theirs[8])),
                )
                if theirs[1]
                else ("-", "-", "-")
            )
            rows.append(
                "| %s | %.2f | %.0f | %.0f | %s | %s | %.1f / %.1f | %.1f / %.1f | %s |"
                % (
                    label,
                    cpu_at[size, accounts],
                    med(r.rps for r in ours[1]),
                    med(r.rps for r in ours[8]),
                    rival_cells[0],
                    rival_cells[1],
                    med(r.p50 for r in ours[1]),
                    med(r.p99 for r in ours[1]),
                    med(r.p50 for r in ours[8]),
                    med(r.p99 for r in ours[8]),
                    rival_cells[2],
                )
            )
            if accounts == 1 and size == max(sizes):
                storm_rows(writer, data, rounds, seconds, connections, summary)
            summary.append(
                "%s: another process's reload after one write %.1f ms, a whole parse %.1f ms (CPU, "
                "median "
                "of %d)" % ((label,) + reload_after_write(data, rounds))
            )
        finally:
            writer.close()
            if rival is not None:
                rival.close()
    base = cpu_at[min(sizes), 1]
    summary.append(
        "server CPU a write: "
        + ", ".join(
            "%s %.2f ms (%.1fx)" % ("%dx%d" % (a, s) if a > 1 else "%d queues" % s, cpu, cpu / base)
            for (s, a), cpu in cpu_at.items()
        )
        + "; json-server: %s"
        % ("measured beside ours" if node else "skipped: no node and npm here")
    )
    rows.append("")


def reload_after_write(data: Path, rounds: int) -> Tuple[float, float, int]:
    """CPU ms of a second DataFile's reload after one write through the first (what another process
    pays), against a whole parse of the same file; in this process, as two servers would."""
    digest = hashlib.sha256(TOKEN.encode()).digest()
    writer, reader = (store.DataFile(str(data), None, 3600, writable=True) for _ in range(2))
    reloads, parses = [], []
    for i in range(rounds):
        edit: store.Edit = functools.partial(
            store.upsert_queue, name="queue-000001", parallelism=i % 9 + 1, paused=None
        )
        writer.update(digest, edit)
        started = time.process_time()
        assert reader.refresh()
        reloads.append((time.process_time() - started) * 1000)
        started = time.process_time()
        store.load(str(data), None)
        parses.append((time.process_time() - started) * 1000)
    writer.close()
    reader.close()
    return statistics.median(reloads), statistics.median(parses), rounds


def storm_rows(
    writer: Server, data: Path, rounds: int, seconds: float, connections: int, summary: List[str]
) -> None:
    """Reads of another account while one client writes without pause, on the writing process and
    on a second writable process serving the same file, each against the floor in the same rounds:
    a read-only process that never reloads (--interval 3600), beside the same writer on the same
    core, read during the same storm."""
    second = Server(
        [sys.executable, "app.py", "--port", "0", "--data", str(data), "--quiet", "--writable"]
    )
    floor = Server(
        [sys.executable, "app.py", "--port", "0", "--data", str(data), "--quiet"]
        + ["--interval", "3600"]
    )
    try:
        for where, reader in (("the writing process", writer), ("a second process", second)):

            def storm(reader: Server) -> Result:
                stop = threading.Event()
                thread = threading.Thread(target=_writes, args=(writer.url, seconds, stop))
                thread.start()
                try:
                    return measure(reader, "/v2/queues", OTHER, seconds, connections)
                finally:
                    stop.set()
                    thread.join()

            table: List[str] = []
            ratio, _ = compare(
                "reads on %s during a write storm" % where,
                functools.partial(storm, reader),
                functools.partial(storm, floor),
                rounds,
                table,
                where,
                "floor",
            )
            p99 = [float(row.split("|")[5]) for row in table[:2]]
            summary.append(
                "another account's reads on %s during a write storm / the floor (a read-only "
                "process that never reloads, same storm): requests/s %.2f (target >= 0.9), p99 "
                "%.2f / %.2f ms (%.1fx, target <= 3)"
                % (where, ratio, p99[0], p99[1], p99[0] / p99[1])
            )
    finally:
        second.close()
        floor.close()


def memory_rows(
    tmp: Path, rows: List[str], summary: List[str], accounts: int = 50000, reloads: int = 20
) -> None:
    """A process's resident memory at start and after ``reloads`` reloads of a file of many small
    accounts: the reloader thread builds each snapshot, and glibc gives that thread an arena of
    its own, which keeps what it freed.  MALLOC_ARENA_MAX=2 is measured beside the default
    (docs/performance.md)."""
    document = {
        "accounts": [
            {
                "token": "t%d" % i,
                "queues": [
                    {"createdAt": 1, "updatedAt": 1, "name": "q", "parallelism": 1, "lag": 0}
                ],
            }
            for i in range(accounts)
        ]
    }
    path = tmp / "accounts.json"
    path.write_text(json.dumps(document))
    code = (
        "import app, sys, time\ndef rss():\n    return next(int(l.split()[1]) for l in "
        "open('/proc/self/status') if l.startswith('VmRSS')) // 1024\ndata = "
        "app.open_data(sys.argv[1], None, interval=3600)\nseen = [rss()]\nfor n in range(1, %d + "
        "1):\n    before = data.status().loaded_at\n    data.wake()\n    while "
        "data.status().loaded_at == before:\n        time.sleep(0.01)\n    if n in (1, 5, %d):\n   "
        "     seen.append(rss())\n"
        "print(*seen)\n" % (reloads, reloads)
    )
    rows += [
        "| %d accounts (%d MB file) | RSS at start, MB | after 1 reload | after 5 | after %d |"
        % (accounts, path.stat().st_size >> 20, reloads),
        "|---|---|---|---|---|",
    ]
    for label, env in (
        ("default", {}),
        ("MALLOC_ARENA_MAX=2", {"MALLOC_ARENA_MAX": "2"}),
        ("PYTHONMALLOC=malloc", {"PYTHONMALLOC": "malloc"}),
    ):
        out = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            cwd=str(ROOT),
            env=dict(os.environ, **env),
            timeout=600,
        ).stdout.split()
        rows.append("| %s | %s |" % (label, " | ".join(out)))
        summary.append(
            "memory, %d accounts, %s: %s MB at start, %s MB after %d reloads"
            % (accounts, label, out[0], out[-1], reloads)
        )
    rows.append("")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    with open("/proc/%d/status" % pid) as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":")) / 1024


def junk_rows(
    tmp: Path, rounds: int, seconds: float, connections: int, rows: List[str], summary: List[str]
) -> None:
    """What a query of 500 fields costs the server, against one with one such field."""
    data = write_data(tmp, 100)
    item = "/v2/queues/queue-000050?"
    cases = [  # name, junk path, plain path, whether both are refused (401)
        (
            "500 x qstash_token=x",
            item + "&".join(["qstash_token=x"] * 500),
            item + "qstash_token=x",
            True,
        ),
        (
            "500 x the right qstash_token",
            item + "&".join(["qstash_token=" + TOKEN] * 500),
            item + "qstash_token=" + TOKEN,
            False,
        ),
        (
            "500 unknown fields",
            item + "&".join("x%d=%d" % (i, i) for i in range(500)) + "&qstash_token=" + TOKEN,
            item + "qstash_token=" + TOKEN,
            False,
        ),
    ]
    for quiet in (True, False):
        server = service(data, int(app.SETTINGS["threads"].default or 8), quiet=quiet)
        try:

            def drive(path: str, refused: bool, server: Server = server) -> Callable[[], Result]:
                return lambda: measure(server, path, {}, seconds, connections, refused)

            for name, junk, plain, refused in cases:
                _, cost = compare(
                    "junk query, log %s: %s" % ("off" if quiet else "on", name),
                    drive(junk, refused),
                    drive(plain, refused),
                    rounds,
                    rows,
                    "junk",
                    "plain",
                )
                summary.append(
                    "server CPU per request, %s / one such field (log %s): %.2f (target <= 2)"
                    % (name, "off" if quiet else "on", 1 / cost if cost else float("nan"))
                )
        finally:
            server.close()
    rows.append("")


def hostile_rows(tmp: Path, rows: List[str], summary: List[str]) -> None:
    """What never-reading and idle clients do to the server."""
    import socket

    data = write_data(tmp, 100)
    big = write_data(tmp, 2500)  # a 285 KB list
    request = (
        b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n" % TOKEN.encode()
    )
    server = service(big, int(app.SETTINGS["threads"].default or 8))
    try:
        before = rss_mb(server.proc.pid)
        cpu = server.cpu_seconds() or 0.0
        hogs = []
        for _ in range(900):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(request * 200)
            hogs.append(sock)
        started = time.perf_counter()
        status = fetch(server.url + "/v2/queues/queue-000001", AUTH, timeout=120)[0]
        fresh = (time.perf_counter() - started) * 1000
        time.sleep(3)
        started = time.perf_counter()
        later = fetch(server.url + "/v2/queues/queue-000001", AUTH, timeout=120)[0]
        after = (time.perf_counter() - started) * 1000
        cpu = (server.cpu_seconds() or 0.0) - cpu
        peak = rss_mb(server.proc.pid, "VmHWM")
        for sock in hogs:
            sock.close()
    finally:
        server.close()
    rows.append(
        "| 900 connections, each pipelining 200 requests for a 285 KB list and never reading | "
        "value |"
    )
    rows.append("|---|---|")
    rows.append("| server RSS before | %.0f MB |" % before)
    rows.append("| server peak RSS with them connected | %.0f MB |" % peak)
    rows.append(
        "| a fresh client's request sent with theirs | %d in %.0f ms (behind the %.1f s of CPU "
        "their requests "
        "cost) |" % (status, fresh, cpu)
    )
    rows.append("| a fresh client's request 3 s later | %d in %.0f ms |" % (later, after))
    rows.append("")
    summary.append(
        "900 never-reading pipeliners: peak RSS %.0f MB (target < 300); a fresh client answered %d "
        "in %.0f ms while their requests were served, %d in %.0f ms after"
        % (peak, status, fresh, later, after)
    )

    server = service(data, int(app.SETTINGS["threads"].default or 8))
    try:
        limit = app.WAITRESS_SETTINGS["connection_limit"]
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(limit)]
        started = time.perf_counter()
        status = fetch(server.url + "/v2/queues/queue-000001", AUTH, timeout=120)[0]
        waited = time.perf_counter() - started
        for sock in idle:
            sock.close()
    finally:
        server.close()
    rows.append("| idle and trickling connections | value |")
    rows.append("|---|---|")
    rows.append(
        "| %d idle ones (the connection limit): a fresh client waits for the server to close them "
        "| %d after %.1f s (channel_timeout %d s, cleanup_interval %d s) |"
        % (
            limit,
            status,
            waited,
            app.WAITRESS_SETTINGS["channel_timeout"],
            app.WAITRESS_SETTINGS["cleanup_interval"],
        )
    )
    summary.append("%d idle connections: a fresh client answered after %.1f s" % (limit, waited))

    server = service(data, int(app.SETTINGS["threads"].default or 8))
    try:  # one byte every second: never idle, so never closed by channel_timeout
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.settimeout(0.01)
        trickle = b"GET /v2/queues HTTP/1.1\r\nX-Slow: " + b"a" * 60
        open_for = 0
        for i, byte in enumerate(trickle[:40]):
            sock.sendall(bytes([byte]))
            time.sleep(1)
            try:
                if sock.recv(1) == b"":
                    break
            except socket.timeout:
                open_for = i + 1
        sock.close()
    finally:
        server.close()
    rows.append(
        "| a client sending one byte a second | still connected after %d s (channel_timeout %d s) |"
        % (open_for, app.WAITRESS_SETTINGS["channel_timeout"])
    )
    rows.append("")
    summary.append("a trickling client: still connected after %d s" % open_for)


def tree_cpu_seconds(pid: int) -> float:
    """The CPU time of process ``pid`` and its children (gunicorn's master and workers)."""
    pids = [pid]
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and open("/proc/%s/stat" % entry).read().rsplit(")", 1)[1].split()[
                1
            ] == str(pid):
                pids.append(int(entry))
        except OSError:
            pass
    total = 0.0
    for each in pids:
        try:
            with open("/proc/%d/stat" % each) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def gunicorn_rows(
    tmp: Path, rounds: int, seconds: float, connections: int, rows: List[str], summary: List[str]
) -> None:
    """The documented gunicorn recipe (docs/deploying.md; two workers) against one waitress process,
    with CPU per request over each process tree: both on core 0 with the load on core 1, then
    unpinned."""
    import socket

    data = write_data(tmp, 100)
    env = dict(os.environ, QSTASH_TOKEN=TOKEN, QSTASH_LISTS_DATA=str(data), PYTHONPATH=str(ROOT))
    for placement, pin in (("server core 0, load core 1", True), ("unpinned, 2 cores", False)):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen(
            (SERVER_CPU if pin else []) + documented("gunicorn", port),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=str(tmp),
        )
        single = Server(
            [sys.executable, "app.py", "--port", "0", "--data", str(data), "--quiet"], pin=pin
        )
        try:
            url = "http://127.0.0.1:%d" % port
            for _ in range(100):
                try:
                    if fetch(url + "/v2/queues", AUTH)[0] == 200:
                        break
                except OSError:
                    time.sleep(0.1)

            def drive(target: str, pid: int, pin: bool = pin) -> Callable[[], Result]:
                def run() -> Result:
                    before = tree_cpu_seconds(pid)
                    result = load(target + "/v2/queues", AUTH, seconds, connections, pin=pin)
                    if result.requests:
                        result.cpu_us = (tree_cpu_seconds(pid) - before) / result.requests * 1e6
                    return result

                return run

            ratio, cost = compare(
                "100 queues, " + placement,
                drive(url, proc.pid),
                drive(single.url, single.proc.pid),
                rounds,
                rows,
                "gunicorn recipe",
                "one waitress process",
            )
            summary.append(
                "gunicorn recipe / one waitress process, %s: requests/s %.2f, CPU per request "
                "(waitress / gunicorn) %s" % (placement, ratio, "%.2f" % cost if cost else "-")
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            single.close()
    rows.append("")


#: The table's rows: each documented way to serve (docs/deploying.md's command lines, as the tests
#: run them), and nginx serving the same bytes as a static file: this machine's limit.
TABLE = [
    ("`python app.py` (waitress, access log on)", None),
    ("`waitress-serve` (docs/deploying.md)", "waitress-serve"),
    ("gunicorn gthread, 2 workers × 4 threads (docs/deploying.md)", "gunicorn"),
    ("uWSGI `--http` router, 2 processes (not recommended: deploying.md)", "uwsgi router"),
    (
        "**uWSGI `--http11-socket`, 2 processes × 32 threads (docs/deploying.md: the throughput "
        "recipe)**",
        "uwsgi",
    ),
    ("nginx, the same bytes as a static file (the ceiling)", "nginx"),
]
#: The uWSGI line docs/deploying.md gave before the throughput recipe, for comparison.
UWSGI_ROUTER = (
    "uwsgi --http 127.0.0.1:8080 --master --processes 2 --enable-threads --die-on-term --need-app "
    "--module app:make_app()"
)
STATIC = """daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile off;                 # on loopback, a copy from nginx's buffer beats sendfile(2)
    output_buffers 1 2m;
    open_file_cache max=16;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/static;
        default_type application/json;
    }}
}}
"""


def documented(program: str, port: int) -> List[str]:
    """docs/deploying.md's ``QSTASH_TOKEN=... program ...`` line, on ``port``, runnable from this
    venv."""
    import shlex

    if program == "uwsgi router":
        line = UWSGI_ROUTER
    else:
        match = re.search(
            r"^QSTASH_TOKEN=\.\.\. (?:\.venv/bin/)?(%s .*)$" % re.escape(program),
            (ROOT / "docs" / "deploying.md").read_text(),
            re.M,
        )
        assert match, "no %r line in docs/deploying.md" % program
        line = match.group(1)
    args = shlex.split(re.sub(r"127\.0\.0\.1:80\d\d", "127.0.0.1:%d" % port, line))
    if args[0] == "uwsgi":
        return [str(Path(sys.executable).parent / "uwsgi")] + args[1:]
    return [sys.executable, "-m", "waitress" if args[0] == "waitress-serve" else args[0]] + args[1:]


def start_server(
    program: Optional[str], data: Path, body: Optional[bytes], tmp: Path
) -> Tuple[Any, str]:
    """Start one of TABLE's servers on core 0 (``python app.py`` for None); return its process and
    URL once it answers (``body``, where given: the nginx ceiling serves those bytes)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, QSTASH_TOKEN=TOKEN, QSTASH_LISTS_DATA=str(data), PYTHONPATH=str(ROOT))
    if program is None:
        command = [sys.executable, "app.py", "--port", str(port), "--data", str(data)]
    elif program == "nginx":
        static = tmp / "nginx"
        (static / "static" / "v2").mkdir(parents=True, exist_ok=True)
        (static / "static" / "v2" / "queues").write_bytes(body or b"")
        for folder in (tmp, static, static / "static", static / "static" / "v2"):
            folder.chmod(0o755)  # nginx's worker may run as another user
        (static / "nginx.conf").write_text(STATIC.format(tmp=static, port=port))
        command = [
            shutil.which("nginx") or "/usr/sbin/nginx",
            "-p",
            str(static),
            "-c",
            str(static / "nginx.conf"),
        ]
    else:
        command = documented(program, port)
    proc = subprocess.Popen(
        SERVER_CPU + command,
        env=env,
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = "http://127.0.0.1:%d" % port
    deadline = time.monotonic() + 60
    while True:
        try:
            status, _, answer = fetch(url + "/v2/queues", AUTH)
            if status == 200 and body in (None, answer):
                return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("%s did not start" % (program or "python app.py"))
        time.sleep(0.1)


def table_rows(
    tmp: Path,
    sizes: List[int],
    rounds: int,
    seconds: float,
    connections: int,
    rows: List[str],
    summary: List[str],
) -> None:
    """Every documented server and the nginx ceiling, each round measuring all of them in a rotating
    order: requests/s and CPU per request over each process tree, as ratios to python app.py and to
    the ceiling in the same round."""
    if not shutil.which("wrk") or not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        summary.append("server table: skipped (needs wrk and nginx)")
        return
    for size in sizes:
        data = write_data(tmp, size)
        servers: List[Tuple[str, Any, str]] = []
        try:
            body: Optional[bytes] = None  # python app.py's answer, which every other row must give
            for name, program in TABLE:
                proc, url = start_server(program, data, body, tmp)
                body = body or fetch(url + "/v2/queues", AUTH)[2]
                servers.append((name, proc, url))
            results: List[List[Result]] = [[] for _ in servers]
            for i in range(rounds):
                order = list(range(len(servers)))
                order = order[i % len(order) :] + order[: i % len(order)]
                for j in order:
                    _, proc, url = servers[j]
                    before = tree_cpu_seconds(proc.pid)
                    result = _wrk(url + "/v2/queues", AUTH, seconds, connections, closing=True)
                    result.cpu_us = (
                        (tree_cpu_seconds(proc.pid) - before) / max(1, result.requests) * 1e6
                    )
                    results[j].append(result)
        finally:
            for _, proc, _ in servers:
                proc.terminate()
                proc.wait(timeout=30)
        rows.append(
            "| %d queues (%d bytes), %d rounds | requests/s | server CPU µs/request | requests/s ÷ "
            "python app.py | CPU/request ÷ python app.py | requests/s ÷ ceiling |"
            % (size, len(body or b""), rounds)
        )
        rows.append("|---|---|---|---|---|---|")
        for (name, _, _), mine in zip(servers, results):
            speed = statistics.median(a.rps / b.rps for a, b in zip(mine, results[0]))
            cost = statistics.median(
                (a.cpu_us or 0) / (b.cpu_us or 1) for a, b in zip(mine, results[0])
            )
            ceiling = statistics.median(a.rps / b.rps for a, b in zip(mine, results[-1]))
            rows.append(
                "| %s | %.0f | %.1f | %.2f | %.2f | %.2f |"
                % (
                    name,
                    statistics.median(r.rps for r in mine),
                    statistics.median(r.cpu_us or 0 for r in mine),
                    speed,
                    cost,
                    ceiling,
                )
            )
            summary.append(
                "%d queues, %s: requests/s %.2f of python app.py's, CPU per request %.2f of its, "
                "%.2f of the ceiling" % (size, name, speed, cost, ceiling)
            )
        rows.append("")


def loop_rows(
    tmp: Path, sizes: List[int], rounds: int, seconds: float, rows: List[str], summary: List[str]
) -> None:
    """The serving loop: python app.py, waitress-serve of the same callable (waitress's own loop)
    and the bare app that sends the same bytes with the same headers under waitress (the fair
    floor), pinned (servers on core 0, wrk on core 1) and not pinned, in alternated rounds: the
    median and the slowest round, so that a collapse in one round shows."""
    rows += [
        "| file, connections, pinned | server | requests/s median (slowest round) | slowest/median "
        "| ÷ waitress-serve | ÷ bare app |",
        "|---|---|---|---|---|---|",
    ]
    for size in sizes:
        data = write_data(tmp, size)
        for connections, pin in ((8, True), (32, True), (256, True), (32, False)):
            servers = _loop_servers(tmp, data, pin)
            try:
                results: Dict[str, List[Result]] = {name: [] for name, _ in servers}
                for i in range(max(7, rounds)):
                    order = servers[i % 3 :] + servers[: i % 3]
                    for name, server in order:
                        url = server.url + "/v2/queues"
                        results[name].append(_wrk(url, AUTH, seconds, connections, pin=pin))
            finally:
                for _, server in servers:
                    server.close()
            _loop_table(
                results,
                "%d queues, %d, %s" % (size, connections, "pinned" if pin else "not pinned"),
                rows,
                summary,
            )


def _loop_servers(tmp: Path, data: Path, pin: bool) -> List[Tuple[str, Server]]:
    """python app.py, waitress-serve --call app:make_app and the bare app, on one file."""
    ours = Server(
        [sys.executable, "app.py", "--port", "0", "--data", str(data), "--quiet"], pin=pin
    )
    _, headers, body = fetch(ours.url + "/v2/queues", AUTH)
    save_response(tmp / "loop-response", headers, body)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # waitress-serve as documented; a line first with its port, as Server reads it.
    announce = (
        "import runpy, sys; print('on http://127.0.0.1:%d', flush=True); "
        "sys.argv = ['waitress-serve'] + sys.argv[1:]; runpy.run_module('waitress', "
        "run_name='__main__')" % port
    )
    theirs = Server(
        [sys.executable, "-c", announce] + documented("waitress-serve", port)[3:],
        pin=pin,
        env={"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT)},
    )
    bare = Server(
        [
            sys.executable,
            __file__,
            "--serve-baseline",
            str(tmp / "loop-response"),
            "--threads",
            "8",
        ],
        pin=pin,
    )
    for server in (theirs, bare):
        _answered(server.url)
    return [("python app.py", ours), ("waitress-serve", theirs), ("bare app", bare)]


def _answered(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if fetch(url + "/v2/queues", AUTH)[0] == 200:
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _loop_table(
    results: Dict[str, List[Result]], case: str, rows: List[str], summary: List[str]
) -> None:
    ours, theirs, bare = (results[name] for name in ("python app.py", "waitress-serve", "bare app"))
    for name, mine in results.items():
        median = statistics.median(r.rps for r in mine)
        slowest = min(r.rps for r in mine)
        rows.append(
            "| %s | %s | %.0f (%.0f) | %.2f | %.2f | %.2f |"
            % (
                case,
                name,
                median,
                slowest,
                slowest / median,
                statistics.median(a.rps / b.rps for a, b in zip(mine, theirs)),
                statistics.median(a.rps / b.rps for a, b in zip(mine, bare)),
            )
        )
    median = statistics.median(r.rps for r in ours)
    summary.append(
        "loop, %s: python app.py / waitress-serve %.2f, / bare app %.2f; its slowest round / "
        "median %.2f (waitress-serve's %.2f)"
        % (
            case,
            statistics.median(a.rps / b.rps for a, b in zip(ours, theirs)),
            statistics.median(a.rps / b.rps for a, b in zip(ours, bare)),
            min(r.rps for r in ours) / median,
            min(r.rps for r in theirs) / statistics.median(r.rps for r in theirs),
        )
    )


def reload_rows(tmp: Path, reloads: int, rows: List[str], summary: List[str]) -> None:
    """The longest wait of a small account's keep-alive requests while a 100,000-queue account
    reloads."""
    import signal as signals

    big = [
        {
            "createdAt": 1700000000000 + i,
            "updatedAt": 1700000000000 + i,
            "name": "queue-%06d" % i,
            "parallelism": 1,
            "lag": i % 1000,
        }
        for i in range(100000)
    ]

    def write(n: int) -> bytes:
        small = {
            "token": "small",
            "queues": [
                {"createdAt": 1, "updatedAt": 1, "name": "v%d" % n, "parallelism": 1, "lag": 0}
            ],
        }
        raw = json.dumps({"accounts": [small, {"token": TOKEN, "queues": big}]}).encode()
        (tmp / "reload.tmp").write_bytes(raw)
        os.replace(tmp / "reload.tmp", tmp / "reload.json")
        return raw

    raw = write(0)
    parses = []
    for _ in range(5):
        started = time.perf_counter()
        json.loads(raw)
        parses.append(time.perf_counter() - started)
    parse = statistics.median(parses)
    server = service(tmp / "reload.json", int(app.SETTINGS["threads"].default or 8))
    try:
        results: Dict[str, List[float]] = {"noticed": [], "SIGHUP": []}
        for n in range(1, 2 * reloads + 1):
            kind = "noticed" if n % 2 else "SIGHUP"
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            if kind == "noticed":
                write(n)
            else:
                # A new version, and SIGHUP at once: the reloader need not wait for its look.
                write(n)
                server.proc.send_signal(signals.SIGHUP)
            longest = 0.0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                started = time.perf_counter()
                conn.request("GET", "/v2/queues", headers={"Authorization": "Bearer small"})
                body = conn.getresponse().read()
                longest = max(longest, time.perf_counter() - started)
                if b'"v%d"' % n in body:
                    break
            for _ in range(200):  # and a little after the swap
                started = time.perf_counter()
                conn.request("GET", "/v2/queues", headers={"Authorization": "Bearer small"})
                conn.getresponse().read()
                longest = max(longest, time.perf_counter() - started)
            conn.close()
            results[kind].append(longest)
    finally:
        server.close()
    rows.append(
        "| reload of a 100,000-queue account (%.1f MB) | json.loads of it, ms | longest wait of a "
        "small account's request, ms (median of %d) | ratio |" % (len(raw) / 1e6, reloads)
    )
    rows.append("|---|---|---|---|")
    for kind, waits in results.items():
        wait = statistics.median(waits)
        rows.append(
            "| %s | %.0f | %.0f (each: %s) | %.2f |"
            % (
                "change noticed by the reloader" if kind == "noticed" else "SIGHUP",
                parse * 1000,
                wait * 1000,
                " ".join("%.0f" % (w * 1000) for w in waits),
                wait / parse,
            )
        )
        summary.append(
            "reload (%s): longest wait %.0f ms / json.loads %.0f ms = %.2f (target <= 1.5)"
            % (kind, wait * 1000, parse * 1000, wait / parse)
        )
    rows.append("")


def item_rows(tmp: Path, rounds: int, big: int, rows: List[str], summary: List[str]) -> None:
    """Time one GET of an item against one of the list, in-process, at 10 and 10,000 queues;
    then the memory that per-item bodies add at ``big`` queues."""
    rows.append(
        "| in-process, µs per request (median of %d rounds of 2,000) | list | get one item | "
        "get / list |" % rounds
    )
    rows.append("|---|---|---|---|")
    gets = {}
    for size in (10, 10000):
        wsgi = app.create_app(app.open_data(str(write_data(tmp, size)), TOKEN), access_log=False)
        name = "/v2/queues/queue-%06d" % (size // 2)
        timers = (wsgi_timer(wsgi, "/v2/queues", TOKEN), wsgi_timer(wsgi, name, TOKEN))
        samples: List[Tuple[float, float]] = [(timers[0](), timers[1]()) for _ in range(rounds)]
        listed = statistics.median(t[0] for t in samples)
        gets[size] = statistics.median(t[1] for t in samples)
        rows.append(
            "| %d queues | %.2f | %.2f | %.3f |" % (size, listed, gets[size], gets[size] / listed)
        )
    summary.append(
        "get one item: %.2f µs at 10 queues, %.2f µs at 10,000 (ratio %.2f)"
        % (gets[10], gets[10000], gets[10000] / gets[10])
    )
    path = write_data(tmp, big)
    code = """
import gc, app
from wsgiref.util import setup_testing_defaults
data = app.open_data(%r, 'x')
wsgi = app.create_app(data, access_log=False)
account = data.current().accounts[0]
def get(path):
    environ = {"PATH_INFO": path, "HTTP_AUTHORIZATION": "Bearer x"}
    setup_testing_defaults(environ)
    return b"".join(wsgi(environ, lambda *args: None))
def rss():
    gc.collect()
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
get("/v2/queues")
before = rss()
for name in account.queues:
    get("/v2/queues/" + name)
print(before, rss(), len(account.cache) - 1)
""" % str(path)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=str(ROOT)
    ).stdout.split()
    before, after, count = float(out[0]), float(out[1]), int(out[2])
    rows.append("")
    rows.append("| %d queues, server memory (RSS, MB) | value |" % big)
    rows.append("|---|---|")
    rows.append("| loaded, lists encoded, no item body yet | %.0f |" % before)
    rows.append(
        "| after every one of the %d items was asked for once | %.0f (+%.0f, %.0f bytes an item) |"
        % (count, after, after - before, (after - before) * 1024 * 1024 / count)
    )
    summary.append(
        "per-item bodies at %d queues: RSS %.0f MB before, %.0f MB with every item's body"
        % (big, before, after)
    )


def load_rows(big: Path, rounds: int, rows: List[str], summary: List[str]) -> None:
    """Time json.load, store.load, the whole snapshot and its first answer on one big file,
    interleaved."""
    times: List[Tuple[float, float, float, float]] = []
    for _ in range(max(5, rounds)):
        started = time.perf_counter()
        with open(big, "rb") as file:
            json.load(file)
        bare = time.perf_counter() - started
        started = time.perf_counter()
        store.load(str(big), TOKEN)
        validated = time.perf_counter() - started
        started = time.perf_counter()
        # What the service does: the above, its digest, no body yet.
        data = app.open_data(str(big), TOKEN)
        ready = time.perf_counter() - started
        # Encodes the list.
        wsgi_timer(app.create_app(data, access_log=False), "/v2/queues", TOKEN, n=1)()
        first = time.perf_counter() - started
        data.close()
        times.append((bare, validated, ready, first))
    bare_mb = peak_memory_mb("import json; json.load(open(%r, 'rb'))" % str(big))
    ready_mb = peak_memory_mb("import app; app.open_data(%r, 'x')" % str(big))
    rows.append("")
    queues = len(json.loads(big.read_bytes())["queues"])
    rows.append(
        "| %d-queue file (%.1f MB) | time, ms | ratio to json.load | peak RSS, MB |"
        % (queues, big.stat().st_size / 1e6)
    )
    rows.append("|---|---|---|---|")
    rows.append(
        "| json.load | %.0f | 1.00 | %.0f |"
        % (statistics.median(t[0] for t in times) * 1000, bare_mb)
    )
    for label, i, mb in (
        ("store.load (parse, validate, dataclasses)", 1, ""),
        ("app.open_data: ready to serve", 2, "%.0f" % ready_mb),
        ("... and its first answer of the list (encoded on demand)", 3, ""),
    ):
        rows.append(
            "| %s | %.0f | %.2f | %s |"
            % (
                label,
                statistics.median(t[i] for t in times) * 1000,
                statistics.median(t[i] / t[0] for t in times),
                mb,
            )
        )
    summary.append(
        "load %d queues: store.load/json.load %.2f, ready-to-serve/json.load %.2f (target <= 5), "
        "with the first list answer %.2f"
        % (queues, *(statistics.median(t[i] / t[0] for t in times) for i in (1, 2, 3)))
    )


def _waitress_version() -> str:
    try:
        from importlib.metadata import version

        return version("waitress")
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
