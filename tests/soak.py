"""Soak: hold the real server under keep-alive load while its data file changes every few seconds.

    python tests/soak.py [--seconds 60] [--connections 8] [--reload-every 3]
    python tests/soak.py --editor [--seconds 12]

Runs ``python app.py`` on 127.0.0.1 (and talks to nothing else), with client threads that
check every answer in full: the status, the JSON, and that a body is one whole version of the
account that asked.  Every few seconds the file is rewritten: a new valid version, or first a
truncated, deleted or invalid one and then a valid one.  It reports requests served, errors
(must be 0), latency, and the server's resident memory after warm-up and at the end (must
stay flat), and exits 1 if anything failed.  Bounded: it stops after ``--seconds``.

``--editor`` replays issue 59.1's hand editor instead: two ``python app.py --writable`` on one file
(on a loop-mounted ``mkfs.ext4 -I 128``, of one-second timestamps, where root; it says where),
writers through both, and an editor that saves in place right after each rename.  It counts writes
lost, failed writes landed, stale reads, edits and broken saves overwritten: 1 unless all are 0.
"""

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Counter, Dict, Iterator, List, Optional, Set

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers imports store from the checkout

from helpers import Server, serving  # noqa: E402

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


# ---- --editor: hand saves in place against two writing servers (issue 59.1) ----------------------
HAND = re.compile(rb'"hand-(\d)"')  # account b's value that the editor changes: one digit wide
BROKEN_EVERY = 10  # every tenth save is a broken one, kept on disk BROKEN_HOLD seconds
BROKEN_HOLD = 0.05
AUTH_A = {"Authorization": "Bearer " + TOKENS[0]}


class Counts:
    """What the editor soak counts: the writers' under ``lock``, the editor's by it alone."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: Set[str] = set()
        self.failed: Set[str] = set()
        self.refused: Counter[int] = Counter()
        self.errors: List[str] = []
        self.stale = self.stale_while_broken = 0
        self.saves = self.landed = self.same_second = self.broken = 0
        self.edits_overwritten = self.broken_overwritten = 0
        self.broken_on_disk = 0  # odd while a broken save is (or may be) on disk


@contextlib.contextmanager
def coarse_folder(folder: Path) -> Iterator[str]:
    """Mount an ext4 of 128-byte inodes (one-second timestamps) on ``folder`` from an image beside
    it, where this machine can; unmounted on every way out.  Yield what ``folder`` is."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        yield "the normal filesystem (not root, or no mkfs.ext4)"
        return
    image = folder.with_suffix(".img")
    with image.open("wb") as file:
        file.truncate(64 << 20)
    for command in (
        ["mkfs.ext4", "-q", "-F", "-I", "128", str(image)],
        ["mount", "-o", "loop", str(image), str(folder)],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            yield "the normal filesystem (%s failed: %s)" % (command[0], done.stderr.strip())
            return
    try:
        yield "a loop-mounted ext4 made with -I 128 (one-second timestamps)"
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def writer(servers: List[Server], deadline: float, counts: Counts, i: int) -> None:
    """Upsert queues w<i>-<k> of account a through each server in turn; read each acknowledged
    one back at once through the other."""
    k = 0
    while time.monotonic() < deadline:
        k += 1
        name, one, other = "w%d-%d" % (i, k), servers[k % 2], servers[1 - k % 2]
        body = json.dumps({"queueName": name, "parallelism": 1}).encode()
        try:
            status = one.get("/v2/queues", AUTH_A, "POST", body)[0]
            if status != 200:
                with counts.lock:
                    counts.failed.add(name)
                    counts.refused[status] += 1
                continue
            counts.acked.add(name)
            broken = counts.broken_on_disk
            status = other.get("/v2/queues/" + name, AUTH_A)[0]
        except (OSError, http.client.HTTPException) as exc:
            counts.errors.append("%s: %r" % (name, exc))
            continue
        if status != 200:  # a server that finds a broken save serves its last good version
            with counts.lock:
                if broken % 2 or broken != counts.broken_on_disk:
                    counts.stale_while_broken += 1
                else:
                    counts.stale += 1


def landed(file: Any, path: Path, data: bytes) -> bool:
    """Save ``data`` over the open ``file`` in place, as vim (backupcopy=yes) and `cat >` do: did
    it land (does the path still name that file)?"""
    file.seek(0)
    file.write(data)
    file.flush()
    st = os.fstat(file.fileno())
    return st.st_nlink > 0 and os.stat(path).st_ino == st.st_ino


def editor(path: Path, deadline: float, counts: Counts) -> None:
    """Right after each rename, change account b's digit in place; every BROKEN_EVERY saves, first
    a broken version of the same size (no write may rename over it), then the valid one.  Writers
    touch account a only, so a version without the last landed digit is one renamed over that
    save, and no later version brings the digit back: each save's read finds every loss before
    it (the caller checks the last)."""
    last, seen = 0, os.stat(path).st_ino
    while time.monotonic() < deadline:
        st = os.stat(path)
        if st.st_ino == seen:
            time.sleep(0.0002)
            continue
        seen = st.st_ino
        with open(path, "r+b") as file:
            raw = file.read()
            match = HAND.search(raw)
            if match is None:
                counts.errors.append("account b's queue is gone: %r" % raw[:200])
                return
            found = int(match.group(1))
            counts.edits_overwritten += found != last
            last, value = found, (found + 1) % 10
            saved = raw[: match.start(1)] + b"%d" % value + raw[match.end(1) :]
            counts.saves += 1
            counts.same_second += int(time.time()) == int(st.st_mtime)
            if counts.saves % BROKEN_EVERY == 0:
                counts.broken += 1
                counts.broken_on_disk += 1
                broken = saved[: match.start()] + b"'" + saved[match.start() + 1 :]  # 'hand-1"
                if landed(file, path, broken):
                    time.sleep(BROKEN_HOLD)  # the writes meanwhile must be refused (409)
                    file.seek(0)
                    same = os.stat(path).st_ino == os.fstat(file.fileno()).st_ino
                    kept = same and file.read() == broken
                    counts.broken_overwritten += not kept
                    if kept and landed(file, path, saved):
                        last = value
                        counts.landed += 1
                counts.broken_on_disk += 1
            elif landed(file, path, saved):
                last = value
                counts.landed += 1
    final = HAND.search(path.read_bytes())
    counts.edits_overwritten += final is None or int(final.group(1)) != last


def editor_soak(seconds: float) -> int:
    """The --editor soak, for ``seconds``: print its figures; 0 if each is as it must be."""
    # This script owns its process: SIGTERM unwinds it too (servers stopped, the mount unmounted).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    counts = Counts()
    with tempfile.TemporaryDirectory() as top, contextlib.ExitStack() as stack:
        folder = Path(top) / "data"
        folder.mkdir()
        where = stack.enter_context(coarse_folder(folder))
        path = folder / "data.json"
        b = {"token": TOKENS[1], "queues": [dict(TEMPLATE, name="hand-0")]}
        path.write_text(json.dumps({"accounts": [{"token": TOKENS[0], "queues": []}, b]}))
        servers = [stack.enter_context(serving(path, "--writable", "--quiet")) for _ in "ab"]
        deadline = time.monotonic() + seconds
        threads = [
            threading.Thread(target=writer, args=(servers, deadline, counts, i), daemon=True)
            for i in range(4)
        ]
        threads.append(threading.Thread(target=editor, args=(path, deadline, counts), daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        accounts = json.loads(path.read_bytes())["accounts"]
        a = next(account for account in accounts if account["token"] == TOKENS[0])
        names = {queue["name"] for queue in a["queues"]}
        stopped = [server.stop() for server in servers]
    figures = {
        "acknowledged writes lost": len(counts.acked - names),
        "failed writes landed": len(counts.failed & names),
        "stale reads through the other server": counts.stale,
        "hand edits overwritten": counts.edits_overwritten,
        "broken saves overwritten": counts.broken_overwritten,
    }
    print("editor soak: %g s on %s; two writing servers, 4 writers" % (seconds, where))
    refused = ", ".join("%d: %d" % pair for pair in sorted(counts.refused.items()))
    print(
        "writes: %d acknowledged, %d refused (%s); reads while a broken save was on disk, answered "
        "from the last good version (not counted): %d"
        % (len(counts.acked), len(counts.failed), refused, counts.stale_while_broken)
    )
    print(
        "editor: %d saves in place, %d in the same second as the rename before; %d valid ones "
        "landed; %d broken ones" % (counts.saves, counts.same_second, counts.landed, counts.broken)
    )
    for name, count in figures.items():
        print("%s: %d" % (name, count))
    statuses = [status for status, _, _ in stopped]
    tracebacks = sum(err.count("Traceback") for _, _, err in stopped)
    print("errors: %d %s" % (len(counts.errors), counts.errors[:3] or ""))
    print("servers' exit statuses after SIGTERM: %s; tracebacks: %d" % (statuses, tracebacks))
    ok = not any(figures.values()) and not counts.errors and statuses == [0, 0] and not tracebacks
    print("result: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--reload-every", type=float, default=3)
    parser.add_argument("--editor", action="store_true", help="issue 59.1's hand editor instead")
    args = parser.parse_args(argv)
    if args.editor:
        return editor_soak(args.seconds)

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
