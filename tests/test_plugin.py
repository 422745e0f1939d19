"""qstash-lists in the user's own test suite: the qstash_server fixture (one server a run, fresh
state per test, with and without pytest-xdist), serve() without the plugin, the reset a JS or Go
suite calls, and the runner, run as the README prints them (the SDKs' own runs of the README's
examples are in tests/test_sdks.py)."""

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from helpers import (
    ALPHA_QUEUE,
    ROOT,
    TOKEN_A,
    TOKEN_B,
    accounts_document,
    bearer,
    eventually,
    readme_section_block,
    started,
    write_json,
)
from test_server import catches

import app as service
import testing

#: A user's suite with the standard library's HTTP client: each test upserts a queue of its own
#: and sees only that one, on a server whose URL stays for the run.
USERS_SUITE = """
import json, os, urllib.request
import pytest

URLS = set()

def call(method, path, body=None):
    request = urllib.request.Request(os.environ["QSTASH_URL"] + path,
                                     json.dumps(body).encode() if body else None,
                                     {"Authorization": "Bearer " + os.environ["QSTASH_TOKEN"]},
                                     method=method)
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"null")

@pytest.mark.parametrize("n", range(20))
def test_each_starts_from_qstash_data(qstash_server, n):
    call("POST", "/v2/queues", {"queueName": "q%d" % n})
    assert [queue["name"] for queue in call("GET", "/v2/queues")] == ["q%d" % n]
    URLS.add(qstash_server.url)
    assert len(URLS) == 1 and qstash_server.url == os.environ["QSTASH_URL"]
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_one_server_a_run_gives_each_test_fresh_state(pytester: Any, workers: str) -> None:
    pytester.makepyfile(test_users=USERS_SUITE)
    result = pytester.runpytest_subprocess("-n", workers, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=20)


def test_qstash_data_in_either_form_and_its_token(pytester: Any) -> None:
    """A module's qstash_data: several accounts (QSTASH_TOKEN is the first one's token), then the
    one-account form in another module (the run's own token again)."""
    several = accounts_document()
    pytester.makepyfile(
        test_several="""
import json, os, pytest, urllib.request

@pytest.fixture
def qstash_data():
    return %s

def test_it(qstash_server):
    assert os.environ["QSTASH_TOKEN"] == qstash_server.token == %r
    request = urllib.request.Request(qstash_server.url + "/v2/queues",
                                     headers={"Authorization": "Bearer " + qstash_server.token})
    assert [q["name"] for q in json.load(urllib.request.urlopen(request))] == ["emails"]
"""
        % (repr(several), TOKEN_A),
        test_one="""
import json, os, pytest

@pytest.fixture
def qstash_data():
    return {"queues": [{"createdAt": 1, "updatedAt": 1, "name": "fixture", "parallelism": 1,
                        "lag": 0}]}

def test_it(qstash_server):
    assert os.environ["QSTASH_TOKEN"] == qstash_server.token != %r
    assert json.load(open(qstash_server.path))["queues"][0]["name"] == "fixture"
"""
        % TOKEN_A,
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_the_ini_setting_starts_the_server_before_the_tests_are_imported(pytester: Any) -> None:
    """An app that reads QSTASH_URL once, at import: the README's ini line gives it the run's
    server, which every test then finds as it was in qstash_data."""
    pytester.makeini(readme_section_block("In your tests", "ini"))
    pytester.makepyfile(
        test_app="""
import os, urllib.request
URL, TOKEN = os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"]  # at import

def test_it(qstash_server):
    assert (URL, TOKEN) == (qstash_server.url, qstash_server.token)
    request = urllib.request.Request(URL + "/v2/queues",
                                     headers={"Authorization": "Bearer " + TOKEN})
    assert urllib.request.urlopen(request).read() == b"[]"
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_serve_without_the_plugin_sets_nothing_in_the_process_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    """No pytest, no plugin: the README's import line, a document or a path (a copy is served:
    the file is left as it was), a free port; no environment variable, no signal handler, no
    exit, and every thread gone after it."""
    script = """
import json, os, signal, sys, threading, urllib.request
from qstash_lists.testing import serve

handlers = [signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)]
before = set(threading.enumerate())
for data in ({"urlGroups": [], "queues": []}, sys.argv[1]):
    with serve(data, "tok-1") as server:
        for name in ("a", "b"):
            urllib.request.urlopen(urllib.request.Request(server.url + "/v2/queues", json.dumps(
                {"queueName": name}).encode(), {"Authorization": "Bearer tok-1"}))
        listed = json.load(urllib.request.urlopen(urllib.request.Request(
            server.url + "/v2/queues", headers={"Authorization": "Bearer tok-1"})))
        assert [q["name"] for q in listed][-2:] == ["a", "b"], listed
        assert server.path != sys.argv[1] and "QSTASH_URL" not in os.environ
assert [signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)] == handlers
assert set(threading.enumerate()) <= before, threading.enumerate()
print("ok")
"""
    path = write_json(tmp_path / "one.json", {"queues": []})
    before = path.read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "QSTASH_URL"}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=env,
    )
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    # Nothing on stderr but waitress's own warning for a request that waited for a thread.
    assert all(line.startswith("Task queue depth is ") for line in done.stderr.splitlines())
    assert path.read_bytes() == before


#: A test that hangs until CI's timeout ends the run; it says when the server is up.
HANGING = """
import os, pathlib, time

def test_hangs(qstash_server):
    pathlib.Path(os.environ["READY"], str(os.getpid())).touch()
    time.sleep(300)
"""


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_run_leaves_no_process_or_folder(
    tmp_path: Path, workers: int, signum: int
) -> None:
    """A timeout's SIGTERM or SIGKILL (or a SIGINT) sent to pytest alone, with and without xdist's
    workers: no process of the run is left (its workers, their servers' sweepers), nor a folder
    of the served copy."""
    marker = "QSTASH_LISTS_TEST_MARKER=%s" % tmp_path
    for folder in ("tmp", "ready"):
        (tmp_path / folder).mkdir()
    (tmp_path / "test_hangs.py").write_text(HANGING)
    env = {"QSTASH_LISTS_TEST_MARKER": str(tmp_path), "TMPDIR": str(tmp_path / "tmp")}
    env["READY"] = str(tmp_path / "ready")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(workers)]
    with started(command + ["--dist", "each"], env, cwd=str(tmp_path)) as proc:
        eventually(lambda: len(list((tmp_path / "ready").iterdir())) == max(workers, 1), 60)
        assert len(list((tmp_path / "tmp").glob("qstash-lists-*"))) == max(workers, 1)
        proc.send_signal(signum)
        proc.wait(timeout=60)
        eventually(lambda: _alive(marker, proc.pid) == [], timeout=60)  # before started()'s kill
        assert list((tmp_path / "tmp").glob("qstash-lists-*")) == []


def test_serve_is_writable_on_a_free_port_and_stops_while_a_client_is_connected() -> None:
    with (
        testing.serve({"urlGroups": [], "queues": []}) as first,
        testing.serve(accounts_document()) as second,
    ):
        assert first.url != second.url and first.token != second.token
        host, port = second.url[7:].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/v2/queues", headers=bearer(TOKEN_A))
        assert conn.getresponse().status == 200  # kept open while the server stops
    assert not [t for t in threading.enumerate() if t.name == "qstash-lists server"]
    conn.close()


def _pipe_of(argument: str) -> int:
    """The inode of the standard input (a pipe) of the process whose command line has
    ``argument``."""
    for pid in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if pid.isdigit() and argument.encode() in (
                (Path("/proc") / pid / "cmdline").read_bytes().split(b"\0")
            ):
                return os.stat("/proc/%s/fd/0" % pid).st_ino
    raise LookupError(argument)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc: run it on Linux")
def test_a_child_forked_inside_serve_lets_its_block_end_while_it_lives() -> None:
    """A process that forks inside serve() (the app's multiprocessing pool, say): the child holds
    no end of the pipe whose end lets the sweeper go, so the block ends (the folder removed) while
    the child lives on; the sweeper still removes it if this process ends first."""
    release_r, release_w = os.pipe()
    result_r, result_w = os.pipe()
    pid = 0
    try:
        with testing.serve({"urlGroups": [], "queues": []}) as server:
            folder = os.path.dirname(server.path)
            pipe = _pipe_of(folder)
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(release_w)
                    held = False
                    for name in os.listdir("/proc/self/fd"):
                        with contextlib.suppress(OSError):
                            held = held or os.fstat(int(name)).st_ino == pipe
                    os.write(result_w, b"1" if held else b"0")
                    os.read(release_r, 1)  # it lives on past the block
                finally:
                    os._exit(0)
            held = os.read(result_r, 1) == b"1"
            if held:  # let it go: the block's end would wait for it
                os.close(release_w)
                release_w = -1
        assert not held and not os.path.exists(folder)
    finally:
        for fd in (release_w, release_r, result_r, result_w):
            if fd >= 0:
                os.close(fd)
        if pid:
            os.waitpid(pid, 0)


# ---- The reset and the runner ----------------------------------------------------------------
def ask(
    url: str, method: str, path: str, token: str, headers: Optional[Dict[str, str]] = None
) -> Tuple[int, Any]:
    host, port = url[len("http://") :].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = None
    if (method, path) == ("POST", "/v2/queues"):
        body = json.dumps({"queueName": "added"})
    conn.request(method, path, body, dict(bearer(token), **(headers or {})))
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, json.loads(raw) if raw else None


def names(url: str, token: str) -> Any:
    return [queue["name"] for queue in ask(url, "GET", "/v2/queues", token)[1]]


def test_the_reset_puts_back_the_tokens_account_alone(data_path: Path) -> None:
    """POST /qstash-lists/reset, with --reset: the token's account as the server started, the
    others as they are; a web page cannot ask it; without --reset it is not there."""
    source = service.open_data(str(data_path), None, 3600, writable=True)
    with service.serving(service.TestDouble(service.create_app(source, access_log=False))) as url:
        for token in (TOKEN_A, TOKEN_B):
            assert ask(url, "POST", "/v2/queues", token)[0] == 200
        assert ask(url, "POST", "/qstash-lists/reset", TOKEN_A) == (200, None)
        assert (names(url, TOKEN_A), names(url, TOKEN_B)) == (["emails"], ["reports", "added"])
        page = {"Origin": "https://evil.example"}
        assert ask(url, "POST", "/qstash-lists/reset", TOKEN_B, page)[0] == 403
        assert ask(url, "POST", "/qstash-lists/reset", "nobody")[0] == 401
    with service.serving(service.create_app(source, access_log=False)) as url:
        assert ask(url, "POST", "/qstash-lists/reset", TOKEN_B)[0] == 404
    source.close()


RUN_SCRIPT = """
import json, os, sys, urllib.request
url, token = os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"]
def call(method, path, body=None):
    request = urllib.request.Request(url + path, json.dumps(body).encode() if body else None,
                                     {"Authorization": "Bearer " + token}, method=method)
    return json.loads(urllib.request.urlopen(request).read() or b"null")
for n in range(30):  # a test each: the reset, a write, a check
    call("POST", "/qstash-lists/reset")
    call("POST", "/v2/queues", {"queueName": "q%d" % n})
    assert [q["name"] for q in call("GET", "/v2/queues")] == ["emails", "q%d" % n]
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_the_runner_as_printed_serves_a_copy_and_exits_with_the_commands_status(
    tmp_path: Path, status: int
) -> None:
    """The README's command line, with a command that resets, writes and checks 30 times: it
    finds the server at once, the fixture is left as it was, nothing but problems is printed
    (--quiet), and the exit status is the command's."""
    command = readme_section_block("In your tests", "sh", "--run").strip()
    assert command.endswith(" --run node --test --test-concurrency=2")
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    before = fixture.read_bytes()
    (tmp_path / "suite.py").write_text(RUN_SCRIPT)
    args = command.split()[1:-3] + [sys.executable, "suite.py", str(status)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py")] + args,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (status, "", "")
    assert fixture.read_bytes() == before


@pytest.mark.parametrize(
    "document, args, line",
    [
        (
            {"accounts": [{"tokenSha256": "a" * 64}]},
            ["--run", "true"],
            "{path}: its clients are given the first account's 'token', and none has one: give "
            "one account its token in clear",
        ),
        (
            {"queues": []},
            ["--run"],
            "--run: give the command after it, such as: python app.py --run npm test",
        ),
    ],
)
def test_the_runner_says_what_it_needs(tmp_path: Path, document: Any, args: Any, line: str) -> None:
    fixture = write_json(tmp_path / "fixture.json", document)
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture)] + args,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (2, line.format(path=fixture) + "\n")


def _alive(marker: str, runner: int) -> List[int]:
    """The processes but ``runner`` whose environment holds ``marker`` (the runner's children, and
    theirs, inherit it)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != runner:
            try:
                environ = (Path("/proc") / pid / "environ").read_bytes()
            except OSError:
                continue
            if marker.encode() in environ.split(b"\0"):
                found.append(int(pid))
    return found


@pytest.mark.parametrize("how", ["sh -c", "npm test"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_runner_leaves_no_process_it_started(
    tmp_path: Path, how: str, signum: int
) -> None:
    """SIGTERM, SIGINT or SIGHUP (a closed terminal) sent to the runner alone ends the command's
    whole process group (a shell or npm, and what they started), then the server: nothing is
    left, and the exit status is the command's, 128 + the signal's number as a shell gives it."""
    marker = "QSTASH_LISTS_TEST_MARKER=%s" % tmp_path  # this test's own, whatever else runs
    script = "sleep 300 & sleep 301 & echo started; wait"
    if how == "npm test":
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed (apt-get install npm)")
        (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": script}}))
        command = ["npm", "test", "--silent"]
    else:
        command = ["sh", "-c", script]
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    with started(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--quiet", "--run"]
        + command,
        env=dict([marker.split("=")]),
        cwd=str(tmp_path),
    ) as proc:
        assert proc.stdout is not None and "started" in proc.stdout.readline()
        assert len(_alive(marker, proc.pid)) >= 3  # the shell (npm: and its shell), two sleeps
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 128 + signum
        eventually(lambda: _alive(marker, proc.pid) == [])


def _told(marker: str, runner: int) -> bool:
    """Whether --run's watcher (of this run: ``marker``) has read the command's group from its
    pipe: the bytes it has read since it was forked (/proc's count; it reads nothing else)."""
    for pid in _alive(marker, runner):
        if os.getsid(pid) != os.getsid(runner) and os.readlink(
            "/proc/%d/exe" % pid
        ) == os.path.realpath(sys.executable):  # the watcher: this Python, a session of its own
            counts = dict(
                line.split(": ")
                for line in Path("/proc/%d/io" % pid).read_text().split("\n")
                if line
            )
            return int(counts["rchar"]) > 0
    return False


def test_the_runner_killed_leaves_neither_the_command_nor_the_copy(tmp_path: Path) -> None:
    """SIGKILL of the runner, which can clean nothing up itself: its watcher ends the command's
    group and removes the served copy."""
    marker = "QSTASH_LISTS_TEST_MARKER=%s" % tmp_path
    (tmp_path / "tmp").mkdir()
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    command = ["sh", "-c", "sleep 300 & sleep 301 & echo started; wait"]
    with started(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--quiet", "--run"]
        + command,
        env={"QSTASH_LISTS_TEST_MARKER": str(tmp_path), "TMPDIR": str(tmp_path / "tmp")},
    ) as proc:
        assert proc.stdout is not None and "started" in proc.stdout.readline()
        assert len(list((tmp_path / "tmp").iterdir())) == 1  # the copy's folder
        eventually(lambda: _told(marker, proc.pid))  # a kill before that leaves the group
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        eventually(lambda: _alive(marker, proc.pid) == [])
        eventually(lambda: list((tmp_path / "tmp").iterdir()) == [])


def test_the_runner_signalled_before_its_command_starts_does_not_pass(tmp_path: Path) -> None:
    """A stop while the fixture loads: the command never ran, so the exit status is not 0."""
    big = {"queues": [dict(ALPHA_QUEUE, name="q%d" % i) for i in range(200000)]}
    fixture = write_json(tmp_path / "fixture.json", big)
    with started(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--run", "true"],
        measured=False,
    ) as proc:
        eventually(lambda: catches(proc.pid, signal.SIGTERM), timeout=30)  # its handler is in
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM


@pytest.mark.parametrize("command, status", [(["no-such-command-here"], 127), (["/"], 126)])
def test_a_command_that_cannot_run_exits_as_a_shell_says(
    tmp_path: Path, command: List[str], status: int
) -> None:
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--quiet", "--run"]
        + command,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == status and done.stderr.startswith("python app.py --run: cannot run")


def test_a_test_that_breaks_the_file_leaves_the_next_passing(pytester: Any) -> None:
    """A test writes a file that does not load into qstash_server.path (to see its code get a
    409): the put-back is the plugin's own, so the next test starts from qstash_data."""
    pytester.makepyfile(
        test_break="""
import json, os, urllib.error, urllib.request

def upsert(server):
    request = urllib.request.Request(server.url + "/v2/queues", b'{"queueName": "q"}',
                                     {"Authorization": "Bearer " + server.token}, method="POST")
    return urllib.request.urlopen(request).status

def test_breaks_it(qstash_server):
    with open(qstash_server.path, "w") as file:
        file.write("{not json")
    try:
        upsert(qstash_server)
    except urllib.error.HTTPError as exc:
        assert exc.code == 409

def test_after(qstash_server):
    assert upsert(qstash_server) == 200
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly").assert_outcomes(
        passed=2
    )


def test_the_ini_line_with_several_accounts_keeps_each_accounts_token(pytester: Any) -> None:
    """The README's two recipes at once: the ini line and qstash_data in the several-accounts form.
    Every account answers its own token, QSTASH_TOKEN is the first's, and the run's token (a client
    built at import holds it) is the first account's too."""
    pytester.makeini(readme_section_block("In your tests", "ini"))
    pytester.makepyfile(
        test_app="""
import json, os, pytest, urllib.request
URL, TOKEN = os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"]  # at import

@pytest.fixture
def qstash_data():
    return %r

def names(token):
    request = urllib.request.Request(URL + "/v2/queues",
                                     headers={"Authorization": "Bearer " + token})
    return [q["name"] for q in json.load(urllib.request.urlopen(request))]

def test_it(qstash_server):
    assert os.environ["QSTASH_TOKEN"] == qstash_server.token == %r
    assert names(%r) == names(TOKEN) == ["emails"] and names(%r) == ["reports"]
"""
        % (accounts_document(), TOKEN_A, TOKEN_A, TOKEN_B)
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_reset_in_a_test_puts_back_that_tests_qstash_data(pytester: Any) -> None:
    """POST /qstash-lists/reset from a test of the fixture: its own qstash_data, not the run's
    empty start (a test that resets between its steps)."""
    pytester.makepyfile(
        test_reset="""
import json, pytest, urllib.request

def call(server, method, path, body=None):
    request = urllib.request.Request(server.url + path, json.dumps(body).encode() if body else None,
                                     {"Authorization": "Bearer " + server.token}, method=method)
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"null")

@pytest.fixture
def qstash_data():
    queue = {"createdAt": 1, "updatedAt": 1, "name": "mine", "parallelism": 1, "lag": 0}
    return {"urlGroups": [], "queues": [queue]}

def test_it(qstash_server):
    call(qstash_server, "POST", "/v2/queues", {"queueName": "added"})
    call(qstash_server, "POST", "/qstash-lists/reset")
    assert [queue["name"] for queue in call(qstash_server, "GET", "/v2/queues")] == ["mine"]
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_bad_day_from_python_is_the_tests_alone(pytester: Any) -> None:
    """qstash_server.fault() and .requests(): the next request meets the fault; a test's faults
    and log are gone at the next test, even those it left unused."""
    pytester.makepyfile(
        test_days="""
import json, pytest, urllib.error, urllib.request

def queues(server):
    request = urllib.request.Request(server.url + "/v2/queues",
                                     headers={"Authorization": "Bearer " + server.token})
    return urllib.request.urlopen(request).status

def test_meets_it(qstash_server):
    qstash_server.fault(status=503, times=2)
    with pytest.raises(urllib.error.HTTPError) as info:
        queues(qstash_server)
    assert info.value.code == 503
    assert [entry["status"] for entry in qstash_server.requests()] == [503]
    with pytest.raises(ValueError, match="^bad request: status: expected an HTTP error status"):
        qstash_server.fault(status=200)

def test_after(qstash_server):
    assert qstash_server.requests() == [] and queues(qstash_server) == 200
    qstash_server.fault(status=429)
    qstash_server.clear_faults()
    assert queues(qstash_server) == 200

@pytest.fixture
def qstash_data():
    return {"accounts": [{"token": "a"}, {"token": "b"}]}

def test_another_account(qstash_server):
    qstash_server.fault(status=503, token="b")
    b = qstash_server._replace(token="b")
    assert queues(qstash_server) == 200
    with pytest.raises(urllib.error.HTTPError):
        queues(b)
    assert qstash_server.requests(token="b") == b.requests() and len(b.requests()) == 1
    qstash_server.fault(status=503, token="b")
    qstash_server.clear_faults(token="b")
    assert queues(b) == 200
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly").assert_outcomes(
        passed=3
    )


def test_serve_with_several_accounts_gives_the_first_accounts_token() -> None:
    with testing.serve(accounts_document()) as server:
        assert server.token == TOKEN_A


@pytest.mark.parametrize("ini, url", [(True, True), (False, True), (False, False)])
def test_a_qstash_in_the_environment_is_never_reached_by_accident(
    pytester: Any, monkeypatch: Any, ini: bool, url: bool
) -> None:
    """A developer of a QStash app has QSTASH_URL (here a local listener standing in for QStash),
    or QSTASH_TOKEN alone (whose SDK default is QStash itself), in the shell: with the ini line, a
    client built at import sends it nothing; without it, each test that asks for the server fails
    at once, saying why and what to do."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    real = "http://127.0.0.1:%d" % listener.getsockname()[1]
    if ini:
        pytester.makeini(readme_section_block("In your tests", "ini"))
    pytester.makepyfile(
        test_app="""
import os, urllib.request
CLIENT = os.environ.get("QSTASH_URL", %r)  # at import; the default stands for QStash's own

def test_it(qstash_server):
    urllib.request.urlopen(urllib.request.Request(CLIENT + "/v2/queues",
        headers={"Authorization": "Bearer " + qstash_server.token}), timeout=5)

def test_not_asking():
    pass
"""
        % real
    )
    if url:
        monkeypatch.setenv("QSTASH_URL", real)
    else:
        monkeypatch.delenv("QSTASH_URL", raising=False)
    monkeypatch.setenv("QSTASH_TOKEN", "a-real-token")
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
        try:
            listener.accept()
            reached = True
        except BlockingIOError:
            reached = False
    finally:
        listener.close()
    assert not reached
    if ini:
        result.assert_outcomes(passed=2)
        return
    result.assert_outcomes(passed=1, errors=1)
    why = "QSTASH_URL is %s" % real if url else "QSTASH_TOKEN is set without QSTASH_URL (so an SDK"
    said = (
        " where pytest started: a client built from it would not reach this test's server; add "
        "'qstash_lists_environ = true' to pytest.ini, or unset it for the run"
    )
    out = result.stdout.str()
    assert "qstash-lists: " + why in out and said in out and "Traceback" not in out


def test_a_qstash_set_in_the_environment_at_import_is_never_reached_by_accident(
    pytester: Any, monkeypatch: Any
) -> None:
    """The app's settings load a .env at import, after pytest started: a test that asks for the
    server fails at once, saying so, before a client built from it could reach QStash."""
    monkeypatch.delenv("QSTASH_URL", raising=False)
    monkeypatch.delenv("QSTASH_TOKEN", raising=False)
    pytester.makepyfile(
        test_app="""
import os
os.environ["QSTASH_URL"] = "https://qstash.example"  # load_dotenv(), say
os.environ["QSTASH_TOKEN"] = "a-real-token"

def test_it(qstash_server):
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*qstash-lists: QSTASH_URL is https://qstash.example since pytest started (a .env loaded*"]
    )


def test_a_fault_names_the_file_or_fixture_given_not_a_copy(tmp_path: Path) -> None:
    bad = write_json(tmp_path / "mine.json", {"queues": [{"name": "q", "paralelism": 1}]})
    with pytest.raises(service.store.DataError) as info:
        with testing.serve(str(bad)):
            pass
    assert all(line.startswith(str(bad) + ": ") for line in info.value.problems)
    session = testing._Session()
    try:
        with pytest.raises(service.store.DataError) as info:
            session.reset({"queues": [{"name": "q"}]})
        assert all(line.startswith(testing.FIXTURE + ": ") for line in info.value.problems)
    finally:
        session.close()
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--data", str(bad), "--run", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith(str(bad) + ": ")


def test_the_readmes_autouse_line_gives_every_test_fresh_state(pytester: Any) -> None:
    pytester.makeconftest(readme_section_block("In your tests", "python", "autouse"))
    pytester.makepyfile(
        test_it="""
import json, os, urllib.request

def call(method, path, body=None):
    request = urllib.request.Request(os.environ["QSTASH_URL"] + path,
                                     json.dumps(body).encode() if body else None,
                                     {"Authorization": "Bearer " + os.environ["QSTASH_TOKEN"]},
                                     method=method)
    return urllib.request.urlopen(request).read()

def test_one():  # asks for no server
    call("POST", "/v2/queues", {"queueName": "one"})

def test_two():
    assert call("GET", "/v2/queues") == b"[]"
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly").assert_outcomes(
        passed=2
    )


def test_an_option_of_the_runners_after_the_command_is_named(tmp_path: Path) -> None:
    """What follows --run is the command's: an option of the runner's there goes to the command,
    and the runner says so (here `true` ignores it)."""
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--run", "true", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = "python app.py --run: --quiet goes to the command; put it before --run\n"
    assert done.returncode == 0 and done.stderr.startswith(said)


#: Put into the runner (a sitecustomize.py on its PYTHONPATH): at the audit event or import named
#: by QSTASH_LISTS_TEST_AT, a Ctrl-C (SIGINT, or QSTASH_LISTS_TEST_SIGNAL) to itself, once; with
#: QSTASH_LISTS_TEST_HANDOVER,
#: its death (SIGKILL) just before it writes a number to a pipe (the old hand-over of the
#: command's group to the watcher, after the command started).
INJECTED = """
import os, signal, sys
if sys.argv[0].endswith("app.py"):
    at, fired = os.environ.get("QSTASH_LISTS_TEST_AT"), []

    def hook(event, args):
        if not fired and at in (event, "import " + str(args[0] if args else "")):
            sent = os.environ.get("QSTASH_LISTS_TEST_SIGNAL", "SIGINT")
            fired.append(os.kill(os.getpid(), getattr(signal, sent)))

    sys.addaudithook(hook)
    if os.environ.get("QSTASH_LISTS_TEST_HANDOVER"):
        write = os.write
        def handing_over(fd, data):
            if data.strip().isdigit():
                os.kill(os.getpid(), signal.SIGKILL)
            return write(fd, data)
        os.write = handing_over
"""


def _runner(tmp_path: Path, *args: str, env: Optional[Dict[str, str]] = None) -> Any:
    """The runner on the fixture, with INJECTED, this test's marker and a TMPDIR of its own."""
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(INJECTED)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    env = dict(env or {}, QSTASH_LISTS_TEST_MARKER=str(tmp_path), TMPDIR=str(tmp_path / "tmp"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--quiet"]
    return started(command + list(args), env, cwd=str(tmp_path))


@pytest.mark.parametrize("run", [False, True], ids=["serving", "--run"])
def test_a_sighup_while_it_imports_never_ends_the_server_and_stops_the_runner(
    tmp_path: Path, run: bool
) -> None:
    """A closed terminal's SIGHUP (or a log rotation's) while app.py imports: the server serves
    (a SIGHUP never ends it); the runner stops, quietly, 128 + 1, its command never run."""
    env = {"QSTASH_LISTS_TEST_AT": "import store", "QSTASH_LISTS_TEST_SIGNAL": "SIGHUP"}
    args = ["--run", "touch", "ran"] if run else ["--port", "0"]
    with _runner(tmp_path, *args, env=env) as proc:
        if run:
            out, err = proc.communicate(timeout=60)
            assert (proc.returncode, err, (tmp_path / "ran").exists()) == (129, "", False)
        else:
            assert " on http://" in proc.stdout.readline()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("at", ["import store", "os.fork", "import waitress", "subprocess.Popen"])
def test_ctrl_c_while_the_runner_starts_is_a_quiet_130(tmp_path: Path, at: str) -> None:
    """Ctrl-C at each step of the runner's start (its imports, the watcher's fork, the server's
    start, the command's launch): exit 130, no traceback, the command never run, nothing left."""
    marker = "QSTASH_LISTS_TEST_MARKER=%s" % tmp_path
    with _runner(tmp_path, "--run", "touch", "ran", env={"QSTASH_LISTS_TEST_AT": at}) as proc:
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, err) == (130, "")
        assert not (tmp_path / "ran").exists()
        eventually(lambda: _alive(marker, proc.pid) == [])
        assert list((tmp_path / "tmp").iterdir()) == []


def test_the_runner_killed_as_its_command_starts_leaves_nothing(tmp_path: Path) -> None:
    """SIGKILL of the runner just after the command started: the watcher knew its group before
    it ran (the runner never hands it over), and ends it."""
    marker = "QSTASH_LISTS_TEST_MARKER=%s" % tmp_path
    command = ["sh", "-c", "echo started; sleep 300"]
    env = {"QSTASH_LISTS_TEST_HANDOVER": "1"}
    with _runner(tmp_path, "--run", *command, env=env) as proc:
        assert proc.stdout is not None and "started" in proc.stdout.readline()
        proc.kill()
        proc.wait(timeout=30)
        eventually(lambda: _alive(marker, proc.pid) == [])
        eventually(lambda: list((tmp_path / "tmp").iterdir()) == [])


@pytest.mark.parametrize("killed", [False, True])
def test_a_command_that_ignores_sigterm_is_killed_after_the_stop_timeout(
    tmp_path: Path, killed: bool
) -> None:
    """A command that ignores SIGTERM (and its child): after --stop-timeout, SIGKILL to its group,
    from the runner (sent SIGTERM) or its watcher (the runner SIGKILLed), said in one line."""
    marker = "QSTASH_LISTS_TEST_MARKER=%s" % tmp_path
    command = ["sh", "-c", "trap '' TERM; sleep 300 & echo started; wait"]
    with _runner(tmp_path, "--stop-timeout", "1", "--run", *command) as proc:
        assert proc.stdout is not None and "started" in proc.stdout.readline()
        eventually(lambda: _told(marker, proc.pid))
        proc.send_signal(signal.SIGKILL if killed else signal.SIGTERM)
        err = proc.stderr.read()  # to its end: the watcher's too
        assert proc.wait(timeout=30) == (-signal.SIGKILL if killed else 128 + signal.SIGKILL)
        said = "python app.py --run: the command's processes outlived SIGTERM by 1 s "
        assert err == said + "(--stop-timeout): SIGKILL\n"
        eventually(lambda: _alive(marker, proc.pid) == [])


def test_the_command_has_the_terminal_in_the_foreground(tmp_path: Path) -> None:
    """Run from a terminal (a pty here), the command's group is its foreground one: /dev/tty
    opens, as jest --watch and vitest need; the terminal is the runner's again after it."""
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    check = "import os; t = os.open('/dev/tty', os.O_RDWR); "
    check += "print('fg', os.tcgetpgrp(t) == os.getpgrp())"
    runner = [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--quiet", "--run"]
    script = "import os, pty, sys; status = pty.spawn(sys.argv[1:]); print('status', status >> 8)"
    done = subprocess.run(
        [sys.executable, "-c", script] + runner + [sys.executable, "-c", check],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "fg True" in done.stdout and "status 0" in done.stdout, (done.stdout, done.stderr)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc: run it on Linux")
def test_the_runners_command_starts_as_from_a_shell(tmp_path: Path) -> None:
    """No signal ignored that a shell's command would not ignore (the launcher is a Python, which
    ignores SIGPIPE and SIGXFSZ: `cmd | head` under pipefail failed), and no QSTASH_DEV, which
    would send the JS SDK to its own dev server, past QSTASH_URL."""
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    shell = 'grep SigIgn /proc/self/status; echo "QSTASH_DEV=${QSTASH_DEV-unset}"'
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--quiet"]
        + ["--run", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, QSTASH_DEV="1"),
    )
    ignored = int(done.stdout.split()[1], 16)
    assert (ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)), done.returncode) == (
        0,
        0,
    ), done.stderr
    assert done.stdout.splitlines()[-1] == "QSTASH_DEV=unset"


def test_the_runner_says_the_port_it_cannot_listen_on(tmp_path: Path) -> None:
    import socket

    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--port", str(port)]
            + ["--run", "true"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    said = "cannot listen on 127.0.0.1 port %d: " % port
    assert done.returncode == 2 and done.stderr.startswith(said), done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("args, env", [(["--reset"], {}), ([], {"QSTASH_LISTS_RESET": "1"})])
def test_reset_without_writes_is_refused_at_start(
    tmp_path: Path, args: List[str], env: Dict[str, str]
) -> None:
    fixture = write_json(tmp_path / "fixture.json", accounts_document())
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--data", str(fixture), "--port", "0"] + args,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, **env),
    )
    said = (
        "--reset (QSTASH_LISTS_RESET) needs writes: add --writable (or QSTASH_LISTS_WRITABLE=1)\n"
    )
    assert (done.returncode, done.stderr) == (2, said)


def test_an_invalid_qstash_data_is_one_error_naming_its_place_and_the_fix(pytester: Any) -> None:
    pytester.makepyfile(
        test_typo="""
import pytest

@pytest.fixture
def qstash_data():
    return {"queues": [{"name": "emails", "paralelism": 2}]}

def test_uses_it(qstash_server):
    pass
"""
    )
    # -rN: pytest's own short summary repeats the message, in full where CI is set.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the qstash_data fixture: queues[[]0].paralelism: unknown key*",
            "*correct the qstash_data fixture*",
        ]
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "store.py" not in out and out.count("lag: missing") == 1, out


def test_a_qstash_data_json_cannot_hold_is_one_error_and_the_fix(pytester: Any) -> None:
    pytester.makepyfile(
        test_dates="""
import datetime, pytest

@pytest.fixture
def qstash_data():
    return {"queues": [{"name": "emails", "createdAt": datetime.datetime(2026, 1, 1)}]}

def test_uses_it(qstash_server):
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the qstash_data fixture: not JSON: Object of type datetime is not JSON serializable",
            "*correct the qstash_data fixture*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    with pytest.raises(service.store.DataError) as raised:
        with testing.serve({"queues": {1, 2}}):
            pass
    assert raised.value.problems == [
        "serve()'s document: not JSON: Object of type set is not JSON serializable"
    ]


@pytest.mark.parametrize("before", [None, "http://elsewhere.example"])
def test_the_ini_line_leaves_the_environment_as_the_run_found_it(
    monkeypatch: pytest.MonkeyPatch, before: Optional[str]
) -> None:
    """QSTASH_URL and QSTASH_TOKEN are the server's during the run, and as they were after it."""

    class Config:
        def getini(self, name: str) -> bool:
            return name == testing.ENVIRON_SETTING

    for key in ("QSTASH_URL", "QSTASH_TOKEN"):
        if before is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, before)
    config: Any = Config()
    testing.pytest_configure(config)
    try:
        assert os.environ["QSTASH_URL"] == testing._sessions[0].server.url
    finally:
        testing.pytest_unconfigure(config)
    assert [os.environ.get(key) for key in ("QSTASH_URL", "QSTASH_TOKEN")] == [before, before]
