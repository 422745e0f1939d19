"""Soak: hold the real server under keep-alive load while its data file changes every few seconds.

    python tests/soak.py [--seconds 60] [--connections 8] [--reload-every 3]

Runs ``python app.py`` on 127.0.0.1 (and talks to nothing else), with client threads that
check every answer in full: the status, the JSON, and that a body is one whole version of the
account that asked.  Every few seconds the file is rewritten: a new valid version, or first a
truncated, deleted or invalid one and then a valid one.  It reports requests served, errors
(must be 0), latency, and the server's resident memory after warm-up and at the end (must
stay flat), and exits 1 if anything failed.  Bounded: it stops after ``--seconds``.
"""

import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

ROOT = Path(__file__).resolve().parent.parent
TOKENS = ["soak-a", "soak-b"]
TEMPLATE = {"createdAt": 1700000000000, "updatedAt": 1700000000000, "parallelism": 2, "lag": 0}


def size(n: int) -> int:
    """Queues of account a in version ``n``: it varies, but does not grow with the run."""
    return 2000 + n % 10


def version(n: int) -> Dict[str, Any]:
    """Account a: about 2,000 queues named for version ``n`` (over the file-wrapper size); b: 3."""
    return {
        "accounts": [
            {
                "token": TOKENS[0],
                "queues": [dict(TEMPLATE, name="v%d-%d" % (n, i)) for i in range(size(n))],
                "urlGroups": [
                    {
                        "createdAt": 1,
                        "updatedAt": 2,
                        "name": "g%d" % n,
                        "endpoints": [{"url": "https://example.com/%d" % n}],
                    }
                ],
            },
            {
                "token": TOKENS[1],
                "queues": [dict(TEMPLATE, name="b%d-%d" % (n, i)) for i in range(3)],
            },
        ]
    }


def rss_kb(pid: int) -> Optional[int]:
    try:
        with open("/proc/%d/status" % pid) as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    except OSError:
        return None


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served = 0
        self.errors: List[str] = []
        self.latencies: List[float] = []
        self.versions: Set[int] = set()

    def add(self, latency: float, error: Optional[str], n: Optional[int]) -> None:
        with self.lock:
            self.served += 1
            self.latencies.append(latency)
            if error:
                self.errors.append(error)
            if n is not None:
                self.versions.add(n)


def check(
    path: str, token: str, status: int, headers: Dict[str, str], body: bytes, method: str
) -> Any:
    """Return (error or None, version seen or None) for one answer."""
    if token == "wrong":
        good = status == 401 and (method == "HEAD" or json.loads(body).get("error"))
        return (None if good else "wrong token got %d" % status), None
    if status != 200:
        return "status %d for %s %s" % (status, method, path), None
    if method == "HEAD":
        return (None if body == b"" else "HEAD with a body"), None
    items = json.loads(body)
    if path == "/v2/topics":
        if token == TOKENS[1]:
            return (None if items == [] else "account b saw URL groups"), None
        return (None if len(items) == 1 and items[0]["endpoints"] else "bad topics"), None
    names = [q["name"] for q in items]
    prefix, n = re.match(r"([vb])(\d+)-", names[0]).groups()  # type: ignore[union-attr]
    n = int(n)
    expected = ["%s%d-%d" % (prefix, n, i) for i in range(size(n) if prefix == "v" else 3)]
    if (prefix == "v") != (token == TOKENS[0]):
        return "account %s saw the other account's queues" % token, None
    return (None if names == expected else "version %d not whole" % n), n


def client(port: int, deadline: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.monotonic() < deadline:
        token = rng.choice(TOKENS * 4 + ["wrong"])
        path = rng.choice(["/v2/queues", "/v2/queues", "/v2/topics"])
        method = rng.choice(["GET"] * 8 + ["HEAD"])
        headers = {"Authorization": "Bearer " + token}
        started = time.perf_counter()
        try:
            conn.request(method, path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            latency = time.perf_counter() - started
            error, n = check(
                path,
                token,
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                body,
                method,
            )
        except Exception as exc:
            latency, error, n = time.perf_counter() - started, repr(exc), None
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        tally.add(latency, error, n)
    conn.close()


def churn(path: Path, deadline: float, every: float, log: List[str]) -> None:
    n = 0
    while time.monotonic() + every < deadline:
        time.sleep(every)
        n += 1
        text = json.dumps(version(n))
        kind = n % 4
        if kind == 1:
            path.write_text(text[: len(text) // 2])
            log.append("v%d: truncated, then written" % n)
        elif kind == 2:
            os.remove(path)
            log.append("v%d: deleted, then restored" % n)
        elif kind == 3:
            path.write_text("{not json")
            log.append("v%d: invalid JSON, then written" % n)
        else:
            log.append("v%d: written" % n)
        if kind:
            time.sleep(min(1.5, every / 2))
        fresh = path.with_suffix(".next")
        fresh.write_text(text)
        os.replace(fresh, path)


def sample(pid: int, deadline: float, samples: List[int]) -> None:
    """Read the server's RSS every 5 seconds until the deadline."""
    while time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        kb = rss_kb(pid)
        if kb:
            samples.append(kb)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--reload-every", type=float, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.json"
        path.write_text(json.dumps(version(0)))
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", "0", "--data", str(path), "--quiet"],
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            port = int(re.search(r":(\d+)", proc.stdout.readline()).group(1))  # type: ignore[union-attr]
            warm = Tally()
            client(port, time.monotonic() + 3, warm, 0)  # warm up, then take the first reading
            rss_start = rss_kb(proc.pid)
            tally = Tally()
            log: List[str] = []
            deadline = time.monotonic() + args.seconds
            threads = [
                threading.Thread(target=client, args=(port, deadline, tally, i + 1))
                for i in range(args.connections)
            ]
            threads.append(
                threading.Thread(target=churn, args=(path, deadline, args.reload_every, log))
            )
            samples: List[int] = []
            threads.append(threading.Thread(target=sample, args=(proc.pid, deadline, samples)))
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
            rss_end = rss_kb(proc.pid)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        latencies = sorted(tally.latencies)
        changes = "; ".join(log[:4]) + (" ..." if len(log) > 4 else "")
        print(
            "soak: %.0f s, %d connections, a data-file change every %g s (%d changes: %s)"
            % (elapsed, args.connections, args.reload_every, len(log), changes)
        )
        print("requests served: %d (%.0f/s)" % (tally.served, tally.served / elapsed))
        print(
            "errors: %d%s"
            % (len(tally.errors), (" e.g. " + "; ".join(tally.errors[:3])) if tally.errors else "")
        )
        print(
            "latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms"
            % (
                statistics.median(latencies) * 1000,
                latencies[int(len(latencies) * 0.99)] * 1000,
                latencies[-1] * 1000,
            )
        )
        print("versions seen by clients: %d of %d" % (len(tally.versions), len(log) + 1))
        half = len(samples) // 2
        flat = half == 0 or max(samples[half:]) <= max(samples[:half]) * 1.1
        if rss_start and rss_end:
            print(
                "server memory (RSS): %.1f MB after warm-up, %.1f MB at the end; every 5 s: %s MB; "
                "second-half peak vs first-half peak: %+.1f%% (%s)"
                % (
                    rss_start / 1024,
                    rss_end / 1024,
                    " ".join("%.1f" % (kb / 1024) for kb in samples),
                    (max(samples[half:]) - max(samples[:half])) * 100 / max(samples[:half])
                    if half
                    else 0.0,
                    "flat" if flat else "GROWING",
                )
            )
        print(
            "server exit status after SIGTERM: %d; tracebacks in its log: %d; reloads: %d; bad "
            "versions kept out: %d"
            % (
                proc.returncode,
                err.count("Traceback"),
                err.count(": reloaded"),
                err.count("keeping the last good version"),
            )
        )
        ok = not tally.errors and proc.returncode == 0 and "Traceback" not in err and flat
        print("result: %s" % ("OK" if ok else "FAILED"))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
