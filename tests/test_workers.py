"""Every worker of every server serves the data file as it is now, and each documented way to run
the server obeys the signals docs/deploying.md lists: waitress-serve, gunicorn (its own signals;
--preload forks workers while the master may be loading) and uWSGI (which forks its workers from
C, where Python's fork hooks do not run).  The servers run in subprocesses on loopback ports."""

import http.client
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

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
    started,
    write_json,
)
from test_hostile import deploy_command, get, wait_until_answered
from test_server import catches

BIN = Path(sys.executable).parent
UWSGI = shutil.which("uwsgi", path=str(BIN)) or shutil.which("uwsgi")
NO_UWSGI = "uwsgi is not installed (pip install -e '.[test]' builds it)"
needs_uwsgi = pytest.mark.skipif(UWSGI is None, reason=NO_UWSGI)


def big_document(queues: int, extra: str = "") -> Dict[str, Any]:
    """A file that takes a while to load (about a second at 150,000 queues), with one queue named
    ``extra``."""
    listed = [dict(Q_TEMPLATE, name="q%d" % i) for i in range(queues)] + [dict(ALPHA_QUEUE)]
    if extra:
        listed.append(dict(ALPHA_QUEUE, name=extra))
    return {"accounts": [{"token": TOKEN_A, "queues": listed}]}


def replace(path: Path, document: Dict[str, Any]) -> None:
    """Write a new version beside the file and rename it over, as deploy tools do."""
    write_json(path.with_suffix(".new"), document)
    os.replace(path.with_suffix(".new"), path)


def everyone_serves(port: int, name: str, tries: int = 20) -> bool:
    """Tell whether ``tries`` requests in a row (spread over the workers) all find the queue
    ``name``."""
    try:
        return all(get("127.0.0.1", port, "/v2/queues/" + name)[0] == 200 for _ in range(tries))
    except OSError:  # a connection reset while the server replaces its workers
        return False


def answers_at_once(port: int) -> bool:
    """Tell whether the server answers within a fifth of a second (a loading one does not)."""
    try:
        return get("127.0.0.1", port, "/v2/queues/emails", timeout=0.2)[0] == 200
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used (Linux's /proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def uwsgi_command(port: int) -> List[str]:
    assert UWSGI is not None
    return [UWSGI] + deploy_command("uwsgi", port)[1:]


def test_gunicorn_preload_workers_forked_during_a_load_serve_the_new_version(
    tmp_path: Path,
) -> None:
    """An edit, then SIGHUP to the master (gunicorn's "new workers") while the master's own
    reloader is still building the new version: every new worker serves the new version."""
    data = write_json(tmp_path / "data.json", big_document(150000))
    port = free_port()
    command = [sys.executable, "-m"] + deploy_command("gunicorn", port) + ["--preload"]
    env = {"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT), "QSTASH_LISTS_INTERVAL": "0.05"}
    with started(command, env, cwd=str(tmp_path)) as master:
        log = Output(master.stderr)
        wait_until_answered(port, timeout=60)
        assert get("127.0.0.1", port, "/v2/queues/added")[0] == 404
        busy = cpu_seconds(master.pid)
        replace(data, big_document(150000, extra="added"))
        # The master's reloader is building it...
        eventually(lambda: cpu_seconds(master.pid) - busy > 0.3)
        master.send_signal(signal.SIGHUP)  # ...when gunicorn forks new workers
        eventually(lambda: everyone_serves(port, "added"), timeout=30)
        assert master.poll() is None
        master.send_signal(signal.SIGTERM)
        assert master.wait(timeout=30) == 0
    assert "Traceback" not in log.text()


# A process forked by os.fork while its parent's reloader is held inside the parse of version 2:
# its first request, with every parse in it held too, until it is answered, and then version 3.
FORK_SCRIPT = """
import os, sys, threading, time
import store
loaded, inside, gate = threading.Event(), threading.Event(), threading.Event()

def parse(*args):
    if loaded.is_set():  # a load after the first: held until the gate opens
        inside.set()
        gate.wait()
    return real(*args)

real, store.parse = store.parse, parse
data = store.DataFile(sys.argv[1], interval=0.05)
loaded.set()
print("loaded", flush=True)
inside.wait()  # the parent's reloader is inside the parse of version 2
inside.clear()
if os.fork():
    gate.set()
    os.wait()
    sys.exit(0)
data.current()  # a request: it waits for no load, though every parse here is held
print("answered", flush=True)
inside.wait()  # the child's own reloader is inside its load (a thread of its own)
gate.set()
print("ready", flush=True)
while "third" not in data.current().accounts[0].queues:
    time.sleep(0.01)
print("third", flush=True)
"""


# A process forked by os.fork with the file unchanged: its first call has its reloader look.
FIRST_LOOK_SCRIPT = """
import os, sys, time
import store
data = store.DataFile(sys.argv[1], interval=3600)
before = data._version
if os.fork():
    sys.exit(os.waitstatus_to_exitcode(os.wait()[1]))
data.current()  # the child's first call: its reloader looks now
while data._version is before:  # until it has looked (the file is new: racy, read)
    time.sleep(0.01)
print("parsed again" if data._version.store is not before.store else "kept", flush=True)
"""


def test_a_forked_childs_first_look_parses_an_unchanged_file_no_more(tmp_path: Path) -> None:
    """Each worker's first look after the fork (gunicorn --preload, uWSGI) is a look, not a
    forced reload: a file that holds the bytes in service keeps the store (a forced one parsed a
    120,000-queue file again in every worker, beside its first request)."""
    data = write_json(tmp_path / "data.json", big_document(10))
    command = [sys.executable, "-c", FIRST_LOOK_SCRIPT, str(data)]
    with started(command, {"PYTHONPATH": str(ROOT)}) as proc:
        out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "kept\n")


def _forking(fork: str, port: int, data: Path) -> List[str]:
    """The command of each way a worker is forked (see test_a_worker_forked_...)."""
    if fork == "os.fork":
        return [sys.executable, "-c", FORK_SCRIPT, str(data)]
    if fork == "uwsgi":
        return uwsgi_command(port)
    command = [sys.executable, "-m"] + deploy_command("gunicorn", port)
    return command + ["--preload"] if fork == "gunicorn --preload" else command


@pytest.mark.parametrize("fork", ["os.fork", "gunicorn --preload", "gunicorn", "uwsgi"])
def test_a_worker_forked_while_its_parent_loads_serves_the_next_version(
    tmp_path: Path, fork: str
) -> None:
    """A worker forked while its parent's reloader is inside the load of a big file (issue 60:
    a gunicorn --preload worker forked then waited on a load no thread of its own was doing, and
    served the old version) keeps nothing of that load: its requests wait for none, and the
    version written after the fork is served within its interval.  gunicorn without --preload
    (a master with no app) and uWSGI (forking from C; a killed worker forked again) alike."""
    if fork == "uwsgi" and UWSGI is None:
        pytest.skip(NO_UWSGI)
    data = write_json(tmp_path / "data.json", big_document(150000))
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT), "QSTASH_LISTS_INTERVAL": "0.05"}
    with started(_forking(fork, port, data), env) as parent:
        out, log = Output(parent.stdout), Output(parent.stderr)
        if fork == "os.fork":
            out.wait_for("loaded", timeout=60)
        else:
            wait_until_answered(port, timeout=60)
            eventually(lambda: everyone_serves(port, "emails"), timeout=30)
            workers, busy = children(parent.pid), cpu_seconds(parent.pid)
        replace(data, big_document(150000, extra="second"))
        if fork == "os.fork":
            out.wait_for("answered", timeout=30)  # forked inside the parse; answered at once
            out.wait_for("ready")
        else:
            if fork != "gunicorn":  # the master's reloader is building version 2...
                eventually(lambda: cpu_seconds(parent.pid) - busy > 0.3, timeout=30)
            if fork == "uwsgi":  # ...when a worker is forked again
                os.kill(workers[0], signal.SIGKILL)
            else:
                parent.send_signal(signal.SIGHUP)  # ...when gunicorn forks new workers
        replace(data, big_document(10, extra="third"))
        if fork == "os.fork":
            out.wait_for("third", timeout=30)
        else:
            eventually(lambda: everyone_serves(port, "third"), timeout=30)
            # uWSGI's graceful stop can miss a worker it forked again (its own race): a quick one.
            parent.send_signal(signal.SIGINT if fork == "uwsgi" else signal.SIGTERM)
        assert parent.wait(timeout=30) == 0
    assert "Traceback" not in log.text()


@needs_uwsgi
def test_uwsgi_workers_each_watch_the_file(tmp_path: Path) -> None:
    """uWSGI forks its workers from C after loading the app: no fork hook runs and the master's
    threads are not in the workers, so each worker starts its reloader at its first request."""
    data = write_json(tmp_path / "data.json", big_document(10))
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT)}
    with started(uwsgi_command(port), env, cwd=str(tmp_path)) as master:
        log = Output(master.stderr)
        wait_until_answered(port, timeout=60)
        eventually(lambda: len(children(master.pid)) >= 2)
        replace(data, big_document(10, extra="added"))
        eventually(lambda: everyone_serves(port, "added"), timeout=30)
        master.send_signal(signal.SIGHUP)  # uWSGI's own: reload the workers gracefully
        replace(data, big_document(10, extra="again"))
        eventually(lambda: everyone_serves(port, "again"), timeout=30)
        master.send_signal(signal.SIGTERM)  # with --die-on-term, a stop
        assert master.wait(timeout=30) == 0
    assert "Traceback" not in log.text()


def _waitress_serve(port: int) -> List[str]:
    return [sys.executable, "-m", "waitress"] + deploy_command("waitress-serve", port)[1:]


def _gunicorn(port: int) -> List[str]:
    return [sys.executable, "-m"] + deploy_command("gunicorn", port)


# How each documented server stops: the exit status after each stop signal (None: killed by it).
SERVERS: Dict[str, Any] = {
    "waitress-serve": (_waitress_serve, {"SIGTERM": -signal.SIGTERM, "SIGINT": 0}),
    "gunicorn": (_gunicorn, {"SIGTERM": 0, "SIGINT": 0}),
    "uwsgi": (uwsgi_command, {"SIGTERM": 0, "SIGINT": 0}),
}


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("signum", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_signals_of_each_server(tmp_path: Path, server: str, signum: str) -> None:
    """docs/deploying.md's table: SIGHUP never ends a server (it looks at the file, or reloads
    the workers); SIGTERM and SIGINT end it with no traceback."""
    if server == "uwsgi" and UWSGI is None:
        pytest.skip(NO_UWSGI)
    command, stops = SERVERS[server]
    data = write_json(tmp_path / "data.json", big_document(10))
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT), "QSTASH_LISTS_INTERVAL": "3600"}
    with started(command(port), env, cwd=str(tmp_path)) as proc:
        log = Output(proc.stderr)
        wait_until_answered(port, timeout=60)
        # Every worker up: a uWSGI worker still starting can miss the master's graceful stop, and
        # then
        # the master waits for it (uWSGI 2.0's own race, seen about once in ten runs on a loaded
        # machine).
        eventually(lambda: everyone_serves(port, "emails"), timeout=30)
        if signum == "SIGHUP":  # an edit the reloaders would see in an hour; SIGHUP has it seen now
            replace(data, big_document(10, extra="added"))
            proc.send_signal(signal.SIGHUP)
            eventually(lambda: everyone_serves(port, "added"), timeout=30)
            assert proc.poll() is None
            signum = "SIGTERM"
        proc.send_signal(getattr(signal, signum))
        status = proc.wait(timeout=30)
        ended = status == stops[signum] if stops[signum] is not None else status != 0
    assert ended and "Traceback" not in log.text(), (status, log.text())


BOOT_FAILURES = {
    # what only the environment can fix, and the one line that says so
    "a pasted 'Bearer '": (
        {"QSTASH_TOKEN": "Bearer abc"},
        "QSTASH_TOKEN: drop the word 'Bearer': the variable holds the token alone",
    ),
    "no QSTASH_TOKEN for one account": (
        {},
        "{data}: holds a single account, and QSTASH_TOKEN is not set: set it to the token its "
        "clients send",
    ),
    "an empty data path": (
        {"QSTASH_TOKEN": "t", "QSTASH_LISTS_DATA": ""},
        "QSTASH_LISTS_DATA: empty; give a value, or unset it for the default",
    ),
    "an unreadable size": (
        {"QSTASH_TOKEN": "t", "QSTASH_LISTS_MAX_SIZE": "\u00b2"},
        "QSTASH_LISTS_MAX_SIZE: expected a size in bytes from 1 to 4G, such as 64M (K, M or G may "
        "follow the number)",
    ),
}


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("mistake", list(BOOT_FAILURES))
def test_a_configuration_mistake_stops_every_server_with_one_line(
    tmp_path: Path, server: str, mistake: str
) -> None:
    """Not a worker booted again and again (gunicorn, before: 261 boots in 15 s), not a 503 for
    ever."""
    if server == "uwsgi" and UWSGI is None:
        pytest.skip(NO_UWSGI)
    command, _ = SERVERS[server]
    data = write_json(tmp_path / "data.json", {"queues": [ALPHA_QUEUE]})  # one account
    env, line = BOOT_FAILURES[mistake]
    with started(
        command(free_port()),
        dict({"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT)}, **env),
        cwd=str(tmp_path),
    ) as proc:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert line.format(data=data) in err.splitlines()
    # No traceback through this project's code.
    assert '/app.py"' not in err and '/store.py"' not in err
    if server == "gunicorn":
        assert "Worker failed to boot" in err and err.count("Booting worker") <= 2
        # gunicorn's own race: when both workers fail at once, the second's SIGCHLD can reach the
        # master while it halts, which prints HaltServer's traceback and exits 1 instead of 3.
        assert proc.returncode == 3 or (
            proc.returncode == 1 and "gunicorn.errors.HaltServer" in err
        )
    else:
        assert "Traceback" not in err


@pytest.fixture(scope="module")
def slow_file(tmp_path_factory: Any) -> Path:
    """A file whose first load takes about a second here."""
    return write_json(tmp_path_factory.mktemp("slow") / "data.json", big_document(150000))


# uWSGI's master loads the app before it.
@pytest.mark.parametrize("server", ["waitress-serve", "gunicorn"])
# Handles any signal: its own affair.
@pytest.mark.parametrize("signum", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_signals_of_each_server_during_the_first_load(
    slow_file: Path, server: str, signum: str
) -> None:
    """The same table from the first instant: a signal while the app is still loading the file.
    SIGHUP never ends the server; SIGTERM and SIGINT end it with no traceback."""
    command, _ = SERVERS[server]
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(slow_file), "PYTHONPATH": str(ROOT)}
    with started(command(port), env, cwd=str(slow_file.parent)) as proc:
        log = Output(proc.stderr)
        # Its SIGHUP handler is in (the app's, or the server's own), and nothing answers yet:
        # loading.
        eventually(
            lambda: (
                catches(proc.pid, signal.SIGHUP) and (server != "gunicorn" or children(proc.pid))
            )
        )
        assert not answers_at_once(port)
        proc.send_signal(getattr(signal, signum))
        if signum == "SIGHUP":
            eventually(lambda: everyone_serves(port, "emails"), timeout=60)
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert "Traceback" not in log.text()


#: What uWSGI 2.0 logs where the stop's SIGHUP reaches the very thread that waits to write an
#: answer: it ends that answer there (docs/deploying.md says so).
UWSGI_INTERRUPTED = "uwsgi_simple_wait_write_hook()/poll(): Interrupted system call"


def _stopped_while_answering(tmp_path: Path) -> Tuple[bytes, bytes, str, int]:
    """The recipe, stopped with SIGTERM while a client is in the middle of a 10 MB answer (see
    the test below): what the client got, the whole answer, uWSGI's log and its exit status."""
    data = write_json(tmp_path / "data.json", big_document(120000))
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT)}
    with started(uwsgi_command(port), env, cwd=str(tmp_path)) as master:
        log = Output(master.stderr)
        wait_until_answered(port, timeout=60)
        # The first list of 120,000 queues is encoded now: a minute where coverage traces it.
        expected = get("127.0.0.1", port, "/v2/queues", timeout=60)[1]
        with socket.socket() as reader:
            # Before connecting: a small window.
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.settimeout(60)  # the other worker may encode the list first
            reader.connect(("127.0.0.1", port))
            reader.sendall(
                b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"
            )
            received = bytearray(reader.recv(4096))  # the answer has begun...
            master.send_signal(signal.SIGTERM)  # ...when the stop comes

            def stopping() -> bool:
                # A kilobyte at a time (20 a second at most) while uWSGI begins its stop: a reader
                # that takes nothing for 4 s (--socket-timeout) would be cut off.
                received.extend(reader.recv(1024))
                return log.count("graceful shutdown") > 0

            eventually(stopping, timeout=30)  # the stop has begun, the answer still in flight
            assert len(received) < len(expected) // 2
            while True:
                chunk = reader.recv(1 << 20)
                if not chunk:
                    break
                received += chunk
        status = master.wait(timeout=30)
    return bytes(received), expected, log.text(), status


@needs_uwsgi
def test_the_throughput_recipe_finishes_the_answers_in_flight_on_sigterm(tmp_path: Path) -> None:
    """docs/deploying.md's uWSGI line, SIGTERM while a client is in the middle of a 10 MB answer,
    more than the sockets' buffers hold: it gets all of it, and uWSGI exits 0.  (With
    --die-on-term alone, uWSGI kills its workers a second later, cutting the answer short.)
    The test sets the pace: the client reads a kilobyte at a time until uWSGI has begun its stop
    (the answer stays in flight, the buffers full), then the rest as fast as it can, so what is
    shown is that the stop finishes the answer, not how fast this machine reads 10 MB against the
    recipe's 10 s mercy.  Where the stop's signal reaches the thread that waits to write (1 run
    in 7 to 14 here), uWSGI itself ends the answer and says so (UWSGI_INTERRUPTED; documented): that
    run is made again, up to four runs; any other cut fails at once."""
    for attempt in range(1, 5):
        (tmp_path / str(attempt)).mkdir()
        received, expected, log, status = _stopped_while_answering(tmp_path / str(attempt))
        head, _, body = received.partition(b"\r\n\r\n")
        assert status == 0 and "Traceback" not in log, log
        assert head.startswith(b"HTTP/1.1 200 ") and len(expected) > 10000000
        if body == expected or UWSGI_INTERRUPTED not in log:
            break
    assert (len(body), body == expected) == (len(expected), True), log


@needs_uwsgi
def test_uwsgi_workers_say_stale_while_the_file_differs_and_serve_an_edit_within_an_interval(
    tmp_path: Path,
) -> None:
    """uWSGI forks its workers from C: uWSGI's own post-fork hook marks each, whose first call
    starts its reloader and looks at once.  An edit then reaches every worker within the
    interval, and until a worker has it, its /healthz says stale (the file on disk differs from
    what it serves)."""
    import hashlib
    import json

    data = write_json(tmp_path / "data.json", big_document(10))
    port = free_port()
    for interval in ("3600", "0.5"):
        env = {
            "QSTASH_LISTS_DATA": str(data),
            "PYTHONPATH": str(ROOT),
            "QSTASH_LISTS_INTERVAL": interval,
        }
        with started(uwsgi_command(port), env, cwd=str(tmp_path)) as master:
            Output(master.stderr)
            wait_until_answered(port, timeout=60)
            replace(data, big_document(10, extra="edited-" + interval))
            # No look for an hour: a worker says so, or serves the edit (its first look)
            if interval == "3600":
                edited = hashlib.sha256(data.read_bytes()).hexdigest()
                healths = [
                    json.loads(get("127.0.0.1", port, "/healthz", token=None)[1]) for _ in range(20)
                ]
                assert all(health["stale"] or health["version"] == edited for health in healths), (
                    healths
                )
            else:
                eventually(lambda: everyone_serves(port, "edited-0.5"), timeout=5)
                eventually(
                    lambda: (
                        not any(
                            json.loads(get("127.0.0.1", port, "/healthz", token=None)[1])["stale"]
                            for _ in range(10)
                        )
                    ),
                    timeout=5,
                )
            master.terminate()
            master.wait(timeout=30)


def test_gunicorn_preload_resets_to_the_servers_start_in_a_recycled_worker(
    tmp_path: Path,
) -> None:
    """docs/deploying.md's reset under gunicorn: with --preload, one worker recycled every 3
    requests (--max-requests 3), a reset after the recycling puts the account back as the server
    started, not as the new worker found the file."""
    data = write_json(tmp_path / "data.json", accounts_document())
    port = free_port()
    command = [sys.executable, "-m"] + deploy_command("gunicorn", port)
    at = command.index("--workers")
    command[at : at + 2] = ["--workers", "1", "--preload", "--max-requests", "3"]
    env = {
        "QSTASH_LISTS_DATA": str(data),
        "PYTHONPATH": str(ROOT),
        "QSTASH_LISTS_WRITABLE": "1",
        "QSTASH_LISTS_RESET": "1",
    }
    with started(command, env, cwd=str(tmp_path)) as master:
        wait_until_answered(port, timeout=60)
        first = children(master.pid)
        auth = {"Authorization": "Bearer " + TOKEN_A}
        made = b'{"queueName": "made"}'
        eventually(lambda: request(port, "POST", "/v2/queues", auth, made) == 200)
        # Requests until a recycled worker answers (one that loaded the new file itself).
        eventually(lambda: answered(port) == 200 and children(master.pid) != first, timeout=30)
        # A request that meets a worker's exit is closed unanswered: asked again.
        eventually(lambda: request(port, "POST", "/qstash-lists/reset", auth, b"") == 200)
        eventually(lambda: answered(port) == 404)
        master.send_signal(signal.SIGTERM)
        assert master.wait(timeout=30) == 0


LAZY = {  # each server that loads the app in each worker, and the line it stops with
    "gunicorn": (
        _gunicorn,
        "QSTASH_LISTS_RESET: gunicorn without --preload loads the app in each worker, each with a "
        "start of its own: add --preload",
    ),
    "uwsgi --lazy-apps": (
        lambda port: uwsgi_command(port) + ["--lazy-apps"],
        "QSTASH_LISTS_RESET: uWSGI's --lazy-apps loads the app in each worker, each with a start "
        "of its own: drop it",
    ),
}


@pytest.mark.parametrize("server", list(LAZY))
def test_a_reset_is_refused_at_start_where_each_worker_loads_the_app(
    tmp_path: Path, server: str
) -> None:
    """docs/deploying.md's reset: one start for all workers.  Where each worker loads the app
    after the fork, a recycled one would reset to the file as it found it: the server stops at
    start with one line that names the fix."""
    if server.startswith("uwsgi") and UWSGI is None:
        pytest.skip(NO_UWSGI)
    command, line = LAZY[server]
    data = write_json(tmp_path / "data.json", accounts_document())
    env = {
        "QSTASH_LISTS_DATA": str(data),
        "PYTHONPATH": str(ROOT),
        "QSTASH_LISTS_WRITABLE": "1",
        "QSTASH_LISTS_RESET": "1",
    }
    with started(command(free_port()), env, cwd=str(tmp_path)) as proc:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and line in err.splitlines(), err
    assert '/app.py"' not in err


def answered(port: int) -> int:
    """GET /v2/queues/made's status (0: closed unanswered)."""
    return request(port, "GET", "/v2/queues/made", {"Authorization": "Bearer " + TOKEN_A}, b"")


def request(port: int, method: str, path: str, headers: Dict[str, str], body: bytes) -> int:
    """One request to 127.0.0.1:``port``: its status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        response.read()
        return response.status
    except (ConnectionError, http.client.HTTPException):
        return 0  # closed unanswered: a worker recycled
    finally:
        conn.close()
