"""The real thing: ``python app.py`` under waitress in a subprocess, spoken to over HTTP."""

import contextlib
import datetime
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers import (
    ALPHA_QUEUE,
    Q_TEMPLATE,
    ROOT,
    TOKEN_A,
    TOKEN_B,
    Output,
    accounts_document,
    environment,
    eventually,
    free_port,
    run,
    served,
    serving,
    started,
    write_json,
)

import app as service

SINGLE = {"queues": [ALPHA_QUEUE]}


def test_serves_accounts_over_http_and_stops_cleanly(data_path: Path) -> None:
    with serving(data_path) as server:
        status, headers, body = server.get("/v2/queues", {"Authorization": "Bearer " + TOKEN_A})
        assert (status, json.loads(body)) == (200, [served(ALPHA_QUEUE)])
        assert headers["Content-Type"] == "application/json"
        assert headers["Server"] == "qstash-lists"  # no version banner
        status, _, body = server.get("/v2/queues?qstash_token=" + TOKEN_B)
        assert [q["name"] for q in json.loads(body)] == ["reports"]
        status, headers, body = server.get("/v2/topics")
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="qstash"'
        status, headers, body = server.get(
            "/v2/topics", {"Authorization": "Bearer " + TOKEN_A}, "HEAD"
        )
        assert (status, body) == (200, b"")
        assert int(headers["Content-Length"]) > 0
        code, out, err = server.stop()
    assert code == 0
    assert server.banner[1:] == [
        "export QSTASH_URL=%s\n" % server.url,
        "# QSTASH_TOKEN: accounts from the data file, export the token of yours\n",
    ]
    assert "Traceback" not in err
    assert TOKEN_A not in err and TOKEN_B not in err
    assert '"GET /v2/queues?qstash_token=[redacted]" 200' in err


def test_default_dev_token_on_loopback_is_printed(tmp_path: Path) -> None:
    with serving(write_json(tmp_path / "one.json", SINGLE)) as server:
        assert server.banner[1] == "export QSTASH_URL=%s\n" % server.url
        assert server.banner[2].startswith("export QSTASH_TOKEN=%s\n" % service.DEV_TOKEN)
        status, _, body = server.get("/v2/queues", {"Authorization": "Bearer " + service.DEV_TOKEN})
        assert (status, json.loads(body)) == (200, [served(ALPHA_QUEUE)])
        assert server.stop()[0] == 0


def test_the_banner_says_dev_mode_misses_a_dev_token_account_with_keys_of_its_own(
    tmp_path: Path,
) -> None:
    """The JS SDK's dev mode takes only a server that answers the dev keys to the dev token."""
    keys = {"current": "sig_mine_current", "next": "sig_mine_next"}
    with serving(write_json(tmp_path / "one.json", dict(SINGLE, signingKeys=keys))) as server:
        assert server.whole_banner()[-1] == (
            "# the JS SDK dev mode, QSTASH_DEV=1: the account of the dev token has signingKeys, "
            "not the dev keys the SDK checks for\n"
        )
        assert server.stop()[0] == 0


def test_the_banner_says_dev_mode_misses_a_server_off_127_0_0_1(tmp_path: Path) -> None:
    """The JS SDK's dev mode asks 127.0.0.1 alone: another loopback address is not found."""
    with serving(write_json(tmp_path / "one.json", SINGLE), "--host", "127.0.0.2") as server:
        assert server.whole_banner()[-1] == (
            "# the JS SDK dev mode, QSTASH_DEV=1: this server does not listen on 127.0.0.1\n"
        )
        assert server.stop()[0] == 0


@pytest.mark.parametrize("shell", [["sh", "-i"], ["zsh", "-f", "-i"]], ids=["sh", "zsh"])
def test_the_banner_pasted_at_a_shells_prompt_exports_what_it_says(
    tmp_path: Path, shell: List[str]
) -> None:
    """Every line after the first, pasted at an interactive prompt: zsh's (macOS's shell) takes no
    '#' for a comment there, so no line may carry a quote, a parenthesis or a semicolon."""
    if shutil.which(shell[0]) is None:
        pytest.skip("needs %s: apt-get install %s" % (shell[0], shell[0]))
    with serving(write_json(tmp_path / "one.json", SINGLE)) as server:
        pasted = "".join(server.whole_banner()[1:])
        server.stop()
    echo = 'echo "exported $QSTASH_URL $QSTASH_TOKEN $QSTASH_NEXT_SIGNING_KEY"\n'
    done = subprocess.run(shell, input=pasted + echo, capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines()[-1:] == [
        "exported %s %s %s" % (server.url, service.DEV_TOKEN, service.DEV_SIGNING_KEYS[1])
    ]


def test_a_configured_token_is_used_and_never_printed(tmp_path: Path) -> None:
    data = write_json(tmp_path / "one.json", SINGLE)
    with serving(data, "--quiet", env={"QSTASH_TOKEN": "s3cret-token"}) as server:
        assert server.get("/v2/queues", {"Authorization": "Bearer s3cret-token"})[0] == 200
        assert server.get("/v2/queues", {"Authorization": "Bearer " + service.DEV_TOKEN})[0] == 401
        code, out, err = server.stop()
    out = "".join(server.banner) + out
    assert code == 0
    assert (
        server.banner[2]
        == "# QSTASH_TOKEN: the one set in the environment of this server, not shown\n"
    )
    assert "s3cret-token" not in out + err
    assert '"GET /v2/queues' not in err  # --quiet: no access log
    assert "Traceback" not in err


def test_refuses_the_dev_token_off_loopback(tmp_path: Path) -> None:
    one = write_json(tmp_path / "one.json", SINGLE)
    assert run(["--host", "0.0.0.0", "--port", "0", "--data", str(one)]) == (
        2,
        "",
        (
            "%s: holds a single account, and QSTASH_TOKEN is not set: set it to the token its "
            "clients send\n"
            "The built-in dev token serves only a loopback address.\n" % one
        ),
    )


def test_a_bad_file_stops_start_up_with_the_place_of_the_fault(tmp_path: Path) -> None:
    document = accounts_document()
    document["accounts"][1]["queues"][0]["lag"] = "7"
    bad = write_json(tmp_path / "bad.json", document)
    code, _, err = run(["--port", "0", "--data", str(bad)])
    assert code == 2
    expected = (
        '%s: accounts[1].queues[0].lag: expected an integer from 0 to 2**53 - 1, got "7"' % bad
    )
    assert err.splitlines()[-1] == expected
    assert "Traceback" not in err


def test_check_prints_a_summary(data_path: Path) -> None:
    summary = "%s: OK: 3 accounts, 1 URL group, 2 queues\n" % data_path
    assert run(["--check", "--data", str(data_path)]) == (0, summary, "")


def test_sighup_makes_it_look_now_and_an_edit_is_seen_at_the_next_look(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", accounts_document())
    auth = {"Authorization": "Bearer " + TOKEN_A}

    def queue_names(server: Any) -> List[str]:
        status, _, body = server.get("/v2/queues", auth)
        assert status == 200
        return [q["name"] for q in json.loads(body)]

    with serving(path, "--interval", "3600") as server:  # it would look again in an hour...
        document = accounts_document()
        document["accounts"][0]["queues"].append(dict(ALPHA_QUEUE, name="added"))
        write_json(path, document)
        server.proc.send_signal(signal.SIGHUP)  # ...but SIGHUP makes it look now
        eventually(lambda: queue_names(server) == ["emails", "added"])
        assert server.proc.poll() is None
        code, _, err = server.stop()
    assert code == 0 and err.count("%s: reloaded" % path) == 1

    with serving(path, env={"QSTASH_LISTS_INTERVAL": "0.1"}) as server:  # an edit, and a bad one
        document["accounts"][0]["queues"][1]["name"] = "addex"
        write_json(path, document)
        eventually(lambda: queue_names(server) == ["emails", "addex"])
        path.write_text('{"accounts": [{"token": "token-a", "queues": [{"name": ')  # half written
        server.err.wait_for("%s: keeping the last good version" % path)
        assert queue_names(server) == ["emails", "addex"]
        code, _, err = server.stop()
    assert code == 0
    assert "%s: line 1, column 56: invalid JSON: " % path in err


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: Any) -> Path:
    """A file whose first load takes a while (about a second here): signals arrive during it."""
    queues = [dict(Q_TEMPLATE, name="q%d" % i) for i in range(150000)]
    return write_json(
        tmp_path_factory.mktemp("big") / "big.json",
        {"accounts": [{"token": TOKEN_A, "queues": queues}]},
    )


def catches(pid: int, signum: int) -> bool:
    """Tell whether process ``pid`` has a handler for ``signum`` (Linux's /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as status:
        caught = next(line for line in status if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


ENTRY_POINTS = {
    "python app.py": [sys.executable, str(ROOT / "app.py")],
    "python -m qstash_lists.app": [sys.executable, "-m", "qstash_lists.app"],
    "qstash-lists": [str(Path(sys.executable).parent / "qstash-lists")],
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("phase", ["during the first load", "while serving"])
@pytest.mark.parametrize("signum", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_signals(big_file: Path, entry: str, phase: str, signum: str) -> None:
    """The README's signal table: SIGHUP never ends the server, SIGTERM and SIGINT end it with no
    traceback."""
    command = ENTRY_POINTS[entry]
    if not os.path.exists(command[0]):
        pytest.skip("%s is not installed (pip install -e .)" % command[0])
    # A stop during the first load is a SystemExit raised wherever the load is. Under coverage's
    # C tracer that may be inside the Python callback it calls to lock its data at each call into
    # a measured file (900,000 times in this load): the lock stays held, and the process hangs in
    # coverage's save at exit (in 2 runs of 40 here, with or without this turn's changes: a
    # coverage fault). So the loads that a stop cuts short are not measured.
    measured = phase == "while serving" or signum == "SIGHUP"
    # Not --quiet: the reload's line is what the test waits for.
    with started(command + ["--port", "0", "--data", str(big_file)], measured=measured) as proc:
        err = Output(proc.stderr)
        # Its handlers are in: it is loading.
        eventually(lambda: catches(proc.pid, signal.SIGTERM), timeout=30)
        if phase == "while serving":
            assert " on http://" in proc.stdout.readline()  # type: ignore[union-attr]
        else:
            assert not select.select([proc.stdout], [], [], 0)[0]  # no banner yet
        proc.send_signal(getattr(signal, signum))
        if signum == "SIGHUP":
            if phase == "during the first load":
                assert " on http://" in proc.stdout.readline()  # type: ignore[union-attr]
            else:
                err.wait_for("%s: reloaded" % big_file, timeout=30)
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert "Traceback" not in err.text() and "KeyboardInterrupt" not in err.text()


# A SIGTERM that lands inside each of waitress's file_wrapper constructors (the stop's pipe, the
# server's trigger): once, SystemExit left a half-made one whose finaliser printed a traceback.
SIGNAL_IN_CONSTRUCTORS = """
import os, signal, sys
from waitress import wasyncore
made = wasyncore.file_wrapper.__init__
def init(self, fd):
    os.kill(os.getpid(), signal.SIGTERM)
    made(self, fd)
wasyncore.file_wrapper.__init__ = init
import app
sys.exit(app.main(sys.argv[1:]))
"""


def test_a_stop_while_the_server_is_made_prints_nothing(data_path: Path) -> None:
    command = [sys.executable, "-c", SIGNAL_IN_CONSTRUCTORS, "--port", "0", "--quiet"]
    with started(command + ["--data", str(data_path)]) as proc:
        out, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (0, "")


@pytest.mark.parametrize("mode", ["--example", "--check"])
def test_example_and_check_into_a_pipe_nobody_reads_end_quietly(mode: str, data_path: Path) -> None:
    """`--example | head`: a reader that has what it wanted (here: gone before the first byte)."""
    read, write = os.pipe()
    os.close(read)
    try:
        code, out, err = run([mode, "--data", str(data_path)], stdout=write)
    finally:
        os.close(write)
    assert (code, err) == (0, "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full: run it on Linux")
@pytest.mark.parametrize("mode", ["--example", "--check"])
def test_example_and_check_onto_a_full_disk_say_so_in_one_line(mode: str, data_path: Path) -> None:
    with open("/dev/full", "w") as full:
        code, out, err = run([mode, "--data", str(data_path)], stdout=full)
    assert (code, err) == (2, "cannot write to stdout: No space left on device\n")


SIZE = "expected a size in bytes from 1 to 4G, such as 64M (K, M or G may follow the number)"
HOSTS = "expected host names separated by commas, such as qstash.internal,dev.example"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "abc"], "--port: expected a whole number from 0 to 65535"),
        (["--port", "70000"], "--port: expected a whole number from 0 to 65535"),
        (
            ["--port", "\u0662"],
            "--port: expected a whole number from 0 to 65535",
        ),  # an Arabic-Indic 2
        (["--threads", "0"], "--threads: expected a whole number from 1 to 1024"),
        (["--interval", "0"], "--interval: expected a number of seconds from 0.01 to 3600"),
        (["--interval", "nan"], "--interval: expected a number of seconds from 0.01 to 3600"),
        (["--max-size", "lots"], "--max-size: " + SIZE),
        (["--max-size", "0"], "--max-size: " + SIZE),
        (["--max-size", "5G"], "--max-size: " + SIZE),
        (["--threads", "1000000"], "--threads: expected a whole number from 1 to 1024"),
        (["--port", "9" * 5000], "--port: expected a whole number from 0 to 65535"),
        # A Host header is compared without its port: a name with one would never match.
        *[
            (["--allowed-hosts", hosts], "--allowed-hosts: " + HOSTS)
            for hosts in ("qstash.internal:8080", "http://dev.example", "a,,b")
        ],
    ],
)
def test_bad_arguments_are_named(args: List[str], message: str) -> None:
    assert run(args) == (2, "", message + "\n")


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"QSTASH_TOKEN": "has space"},
            "QSTASH_TOKEN: expected a non-empty token of visible ASCII characters, no spaces",
        ),
        (
            {"QSTASH_TOKEN": "Bearer abc"},
            "QSTASH_TOKEN: drop the word 'Bearer': the variable holds the token alone",
        ),
        ({"QSTASH_TOKEN": ""}, "QSTASH_TOKEN: empty; give a value, or unset it for the default"),
        (
            {"QSTASH_LISTS_MAX_SIZE": "\u00b2"},
            "QSTASH_LISTS_MAX_SIZE: expected a size in bytes from 1 to 4G, such as 64M (K, M or G "
            "may follow the number)",
        ),
        (
            {"QSTASH_LISTS_INTERVAL": "-1"},
            "QSTASH_LISTS_INTERVAL: expected a number of seconds from 0.01 to 3600",
        ),
    ],
)
def test_a_bad_setting_is_one_line_that_names_it_and_never_shows_it(
    data_path: Path, env: Dict[str, str], message: str
) -> None:
    assert run(["--port", "0", "--data", str(data_path)], env=env) == (2, "", message + "\n")


def test_the_command_line_wins_over_the_environment(tmp_path: Path, data_path: Path) -> None:
    other = tmp_path / "other.json"
    assert run(["--check", "--data", str(data_path)], env={"QSTASH_LISTS_DATA": str(other)})[0] == 0
    assert run(["--check"], env={"QSTASH_LISTS_DATA": str(data_path)})[0] == 0
    assert run(["--check"], env={"QSTASH_LISTS_DATA": str(other)})[0] == 2


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_version_and_help_name_the_program_as_it_was_run(entry: str) -> None:
    command = ENTRY_POINTS[entry]
    if not os.path.exists(command[0]):
        pytest.skip("%s is not installed (pip install -e .)" % command[0])
    with started(command + ["--version"]) as proc:
        assert proc.communicate(timeout=30) == ("%s %s\n" % (entry, service.__version__), "")
    with started(command + ["--help"]) as proc:
        out = proc.communicate(timeout=30)[0]
    assert out.startswith("usage: %s " % entry)
    for setting in service.SETTINGS.values():
        if setting.env:
            assert "\n  %s: %s" % (setting.env, setting.help) in out
        if setting.option:
            assert setting.option in out


def test_the_example_is_the_shipped_data_file(tmp_path: Path) -> None:
    code, out, _ = run(["--example"])
    assert code == 0
    assert out == (ROOT / "data.json").read_text()
    # In the writer's layout: a first write rewrites only the lines it changes.
    assert service.store.parse(out.encode(), "x", service.DEV_TOKEN).lines == out.encode()
    (tmp_path / "d.json").write_text(out)
    assert run(["--check", "--data", str(tmp_path / "d.json")])[1].endswith(
        ": OK: 1 account, 2 URL groups, 2 queues\n"
    )


def test_a_missing_data_file_says_how_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "data.json"
    code, out, err = run(
        ["--port", "0", "--data", "data.json"], env={"PWD": str(tmp_path)}, cwd=str(tmp_path)
    )
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "%s: no such file; to start from the example: python app.py --example > data.json" % missing
    )


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root, to make a folder another user may not enter: run the suite as root",
)
def test_a_data_file_in_a_folder_it_may_not_enter_is_not_called_missing(tmp_path: Path) -> None:
    """Permission denied, said as such: the missing file's advice (--example > it) would overwrite
    a file that is there."""
    top = Path(tempfile.mkdtemp())
    try:
        os.chmod(top, 0o755)
        private = top / "private"
        private.mkdir(mode=0o700)
        path = write_json(private / "data.json", {"queues": []})
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # another user: it may not enter the folder
            try:
                sys.stderr = os.fdopen(write, "w")
                os.setgid(65534)
                os.setuid(65534)
                code = service.main(["--check", "--data", str(path)])
                sys.stderr.flush()
                os._exit(code)
            finally:
                os._exit(99)
        os.close(write)
        with os.fdopen(read) as said:
            err = said.read()
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 2
        assert err == "%s: cannot read: Permission denied\n" % path
    finally:
        shutil.rmtree(top)


def test_log_lines_start_with_an_iso_8601_utc_timestamp(data_path: Path) -> None:
    # A server whose local time is not UTC.
    with serving(data_path, env={"TZ": "IST-5:30"}) as server:
        server.get("/v2/queues/emails", {"Authorization": "Bearer " + TOKEN_A})
        _, _, err = server.stop()
    line = next(line for line in err.splitlines() if '"GET /v2/queues/emails"' in line)
    match = re.match(
        r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z 127\.0\.0\.1 \"GET /v2/queues/emails\" 200 ",
        line,
    )
    assert match, line
    logged = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc
    )
    assert abs((datetime.datetime.now(datetime.timezone.utc) - logged).total_seconds()) < 60


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "make, args, reason",
    [
        (_fifo, [], "not a regular file but a FIFO"),
        (
            lambda p: (p.symlink_to("/dev/zero"), p)[1],
            [],
            "not a regular file but a character device",
        ),
        (lambda p: (p.mkdir(), p)[1], [], "not a regular file but a directory"),
        (
            lambda p: (p.write_text(json.dumps(accounts_document()) + " " * 2000), p)[1],
            ["--max-size", "1K"],
            "%d bytes, over the limit of 1024 bytes (--max-size, QSTASH_LISTS_MAX_SIZE)"
            % (len(json.dumps(accounts_document())) + 2000),
        ),
    ],
)
def test_check_refuses_at_once_what_cannot_be_a_data_file(
    tmp_path: Path, make: Any, args: List[str], reason: str
) -> None:
    path = make(tmp_path / "data.json")
    # A FIFO nobody writes to must not hang it.
    code, out, err = run(["--check", "--data", str(path)] + args)
    assert (code, out, err) == (2, "", "%s: cannot read: %s\n" % (path, reason))


def test_a_fifo_swapped_in_while_serving_neither_hangs_it_nor_replaces_the_data(
    tmp_path: Path,
) -> None:
    path = write_json(tmp_path / "d.json", accounts_document())
    auth = {"Authorization": "Bearer " + TOKEN_A}
    with serving(path) as server:
        os.remove(path)
        _fifo(path)
        server.proc.send_signal(signal.SIGHUP)  # look now: at a FIFO nobody writes to
        # The look is over: it did not hang.
        server.err.wait_for("%s: keeping the last good version" % path)
        status, _, body = server.get("/v2/queues", auth)
        assert (status, json.loads(body)) == (200, [served(ALPHA_QUEUE)])
        os.remove(path)
        document = accounts_document()
        document["accounts"][0]["queues"][0]["lag"] = 99
        write_json(path, document)
        eventually(lambda: json.loads(server.get("/v2/queues", auth)[2])[0]["lag"] == 99)
        code, _, err = server.stop()
    assert code == 0
    assert err.count("%s: cannot read: not a regular file but a FIFO" % path) == 1
    assert "Traceback" not in err


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(
    not _ipv6_loopback(), reason="needs an IPv6 loopback (::1): run it where ::1 is up"
)
def test_serving_on_a_name_of_two_addresses_yields_a_url_it_answers(
    data_path: Path, monkeypatch: Any
) -> None:
    """localhost as Debian's and macOS's /etc/hosts give it, ::1 and 127.0.0.1 (waitress listens on
    each, on ports of their own when asked for any): serving() and so --run yield the URL of one
    (on a name of one address, the same URL as ever)."""
    real = socket.getaddrinfo

    def both(host: Any, *args: Any, **keywords: Any) -> Any:
        if host != "localhost":
            return real(host, *args, **keywords)
        return real("::1", *args, **keywords) + real("127.0.0.1", *args, **keywords)

    monkeypatch.setattr(socket, "getaddrinfo", both)
    bearer = "Bearer " + TOKEN_A
    data = service.open_data(str(data_path), None, 3600)
    try:
        with service.serving(service.create_app(data, access_log=False), "localhost") as url:
            asked = urllib.request.Request(url + "/v2/queues", headers={"Authorization": bearer})
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(asked) as got:
                assert got.status == 200
        with service.serving(service.create_app(data, access_log=False)) as url:
            assert url.startswith("http://127.0.0.1:")
    finally:
        data.close()


def test_a_port_in_use_is_one_line(data_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run(["--port", str(port), "--data", str(data_path)])
    assert (code, out) == (2, "")
    last = err.splitlines()[-1]
    assert last.startswith("cannot listen on 127.0.0.1 port %d: " % port), err
    assert last.endswith("; stop what uses it, or choose another port (--port 0 picks a free one)")
    assert "Traceback" not in err


@pytest.mark.parametrize("mode", [[], ["--run", "true"]])
def test_a_host_that_is_not_this_machines_is_one_line(data_path: Path, mode: List[str]) -> None:
    code, out, err = run(["--host", "bogus.invalid", "--data", str(data_path)] + mode)
    assert (code, out, err.splitlines()[-1]) == (
        2,
        "",
        "cannot listen on bogus.invalid port %d: Invalid host/port specified.; give --host an "
        "address of this machine, such as 127.0.0.1" % (0 if mode else 8080),
    )


@pytest.mark.parametrize(
    "document, warning",
    [
        ({"accounts": []}, "no account at all: every request will get 401"),
        (
            {"queues": [dict(ALPHA_QUEUE, createdAt=1700000000, updatedAt=1700000000)]},
            "queues[0].createdAt (and 1 more) looks like seconds, not milliseconds (before 2001 as "
            "milliseconds)",
        ),
        (
            {
                "accounts": [
                    {
                        "token": TOKEN_A,
                        "urlGroups": [],
                        "queues": [dict(ALPHA_QUEUE, updatedAt=978307199999, createdAt=0)],
                    }
                ]
            },
            "accounts[0].queues[0].updatedAt looks like seconds, not milliseconds (before 2001 as "
            "milliseconds)",
        ),
    ],
)
def test_check_warns_without_failing(
    tmp_path: Path, document: Dict[str, Any], warning: str
) -> None:
    path = write_json(tmp_path / "d.json", document)
    code, out, err = run(["--check", "--data", str(path)])
    assert (code, err) == (0, "%s: warning: %s\n" % (path, warning))
    assert out.startswith("%s: OK: " % path)
    edge = write_json(
        tmp_path / "edge.json",
        {"queues": [dict(ALPHA_QUEUE, createdAt=978307200000, updatedAt=978307200000)]},
    )
    assert run(["--check", "--data", str(edge)])[2] == ""  # 2001 itself is fine


def _refused(host: str, port: int) -> bool:
    """No new connection is taken: refused, or reset when the listener closes with it queued."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    return False


def test_sigterm_finishes_the_answers_in_flight_and_refuses_new_connections(big_file: Path) -> None:
    """A client is in the middle of a 13 MB answer, more than the sockets' buffers hold, when the
    stop comes: it gets all of it (the old handler dropped what waitress had not sent yet)."""
    with serving(big_file, "--quiet") as server:
        expected = server.get("/v2/queues", {"Authorization": "Bearer " + TOKEN_A})[2]
        with socket.create_connection((server.host, server.port), timeout=30) as reader:
            reader.sendall(
                b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"
            )
            received = reader.recv(65536)  # the answer has begun, and the reader pauses...
            server.proc.send_signal(signal.SIGTERM)  # ...when the stop comes
            eventually(lambda: _refused(server.host, server.port))  # no new connection is taken
            while True:
                chunk = reader.recv(1 << 20)
                if not chunk:
                    break
                received += chunk
        assert server.proc.wait(timeout=30) == 0
    head, _, body = received.partition(b"\r\n\r\n")
    assert (
        head.startswith(b"HTTP/1.1 200 ")
        and len(body) == len(expected) > 10000000
        and body == expected
    )


def test_a_reader_that_never_reads_holds_the_stop_no_longer_than_the_stop_timeout(
    tmp_path: Path,
) -> None:
    queues = [dict(Q_TEMPLATE, name="q%06d" % i) for i in range(20000)]
    big = write_json(tmp_path / "big.json", {"accounts": [{"token": TOKEN_A, "queues": queues}]})
    with serving(big, "--quiet", "--stop-timeout", "0.5") as server:
        with socket.create_connection((server.host, server.port), timeout=10) as hog:
            hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            hog.sendall(
                b"GET /v2/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n"
            )
            hog.recv(4096)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=10) == 0  # 0.5 s and a little, not for ever


def test_every_request_answered_is_in_the_log_once_the_server_has_stopped(data_path: Path) -> None:
    """The access log is written in batches off the request path; none is lost at the stop."""
    with serving(data_path) as server:
        for _ in range(50):
            assert server.get("/v2/queues/emails", {"Authorization": "Bearer " + TOKEN_A})[0] == 200
        code, _, err = server.stop()  # at once: the last batch is not due yet
    size = len(json.dumps(served(ALPHA_QUEUE), separators=(",", ":")))
    assert code == 0 and err.count('127.0.0.1 "GET /v2/queues/emails" 200 %d ' % size) == 50


def test_sigterm_ends_it_within_the_stop_timeout_whatever_its_stderr_does(data_path: Path) -> None:
    """stderr a pipe that nobody reads: the access log's lines fill it, and the stop still takes at
    most --stop-timeout and one second (lines that cannot be written are dropped, never waited
    for)."""
    command = [
        sys.executable,
        str(ROOT / "app.py"),
        "--port",
        "0",
        "--data",
        str(data_path),
        "--stop-timeout",
        "1",
    ]
    with started(command) as proc:  # stderr piped, never read
        assert proc.stdout is not None
        url = re.search(r" on http://127\.0\.0\.1:(\d+)", proc.stdout.readline())
        assert url is not None
        # Long lines, 401s.
        request = b"GET /v2/queues/" + b"x" * 2000 + b" HTTP/1.1\r\nHost: t\r\n\r\n"
        with socket.create_connection(("127.0.0.1", int(url.group(1)))) as sock:
            for _ in range(200):  # 400 KB of log lines: far past a pipe's 64 KB
                sock.sendall(request * 10)
                sock.recv(1 << 16)
        proc.send_signal(signal.SIGTERM)
        # A stop that waited for the unread stderr would never end.
        assert proc.wait(timeout=10) == 0


def test_a_stdout_that_takes_nothing_holds_back_neither_serving_nor_the_stop(
    data_path: Path,
) -> None:
    """stdout a pipe that is full (a log pipe nobody drains): the banner waits in a thread of its
    own; the server answers, and SIGTERM stops it."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write, b"x" * 65536)
    os.set_blocking(write, True)
    port = free_port()
    command = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--data", str(data_path)]
    try:
        with started(command, stdout=write) as proc:
            health = "http://127.0.0.1:%d%s" % (port, service.HEALTH_PATH)
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

            def answered() -> bool:
                with contextlib.suppress(OSError):
                    with opener.open(health, timeout=10) as got:
                        return bool(got.status == 200)
                return False

            eventually(answered, timeout=30)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    finally:
        os.close(read)
        os.close(write)


def test_the_modes_exclude_each_other() -> None:
    for modes in (["--check", "--run", "true"], ["--example", "--check"]):
        code, out, err = run(modes)
        assert (code, out) == (2, "") and "not allowed with argument" in err


def test_the_copy_of_a_real_account_recipe_copies_one(data_path: Path, tmp_path: Path) -> None:
    """docs/deploying.md's two reads, against this server as the API: --check passes and the copy
    serves the same lists."""
    text = (ROOT / "docs" / "deploying.md").read_text()
    section = text[text.index("## A copy of a real account") :]
    recipe = re.search(r"```sh\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    for name in ("app.py", "store.py"):
        (tmp_path / name).symlink_to(ROOT / name)
    with serving(data_path) as server:
        env = dict(environment(), REAL_QSTASH_TOKEN=TOKEN_A)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
        recipe = recipe.replace("https://qstash.upstash.io", server.url)
        done = subprocess.run(
            ["bash", "-euc", recipe], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("copy.json: OK: 1 account, ")
        copy = service.store.load(str(tmp_path / "copy.json"), TOKEN_A)
        original = service.store.load(str(data_path), None).find(TOKEN_A.encode())
        assert copy.accounts[0].queues == original.queues  # type: ignore[union-attr]
        assert copy.accounts[0].url_groups == original.url_groups  # type: ignore[union-attr]
        server.stop()


def test_the_stops_reading_of_waitress_channels_holds_on_the_waitress_installed(
    data_path: Path,
) -> None:
    """app._close_idle, the one function that reads waitress's channels beyond its documented
    interface, on the waitress installed (.ci/run: the oldest release setup.cfg allows, too): a
    connection between requests is told to close, one with a request half sent is not."""
    import waitress
    from waitress import wasyncore
    from waitress.channel import HTTPChannel

    data = service.open_data(str(data_path), None)
    socket_map: Dict[int, Any] = {}
    server = waitress.create_server(
        service.create_app(data, access_log=False), map=socket_map, host="127.0.0.1", port=0
    )
    idle = socket.create_connection(("127.0.0.1", server.effective_port))
    busy = socket.create_connection(("127.0.0.1", server.effective_port))
    busy.sendall(b"GET /v2/queues HTTP/1.1\r\nHost: x\r\n")  # the headers not ended
    try:

        def channels() -> List[Any]:
            return [d for d in socket_map.values() if isinstance(d, HTTPChannel)]

        while len(channels()) < 2 or not any(c.request for c in channels()):
            wasyncore.loop(timeout=0.05, map=socket_map, use_poll=True, count=1)
        assert service._close_idle(socket_map) is True
        assert sorted(bool(c.will_close) for c in channels()) == [False, True]
        assert [c.will_close for c in channels() if c.request] == [False]
    finally:
        idle.close()
        busy.close()
        server.task_dispatcher.shutdown()
        for dispatcher in list(socket_map.values()):
            dispatcher.close()
        data.close()
    assert service._close_idle({}) is False


def test_the_logs_example_is_what_a_write_logs(data_path: Path) -> None:
    """docs/deploying.md's log lines, the time's and the client's aside: a refusal, then a write."""
    text = (ROOT / "docs" / "deploying.md").read_text()
    shown = text[text.index("## Logs") :].split("```\n")[1].splitlines()
    with serving(data_path, "--writable") as server:
        server.get("/v2/queues?qstash_token=nobody")
        server.get(
            "/v2/queues", {"Authorization": "Bearer " + TOKEN_A}, "POST", b'{"queueName": "q"}'
        )
        _, _, err = server.stop()
    logged = [line for line in err.splitlines() if '"' in line]

    def shape(line: str) -> str:
        return re.sub(r"^\S+ \S+ | \d+\.\d+ms", " ", line)

    assert [shape(line) for line in logged] == [shape(line) for line in shown]
