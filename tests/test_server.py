"""The real thing: ``python app.py`` under waitress in a subprocess, spoken to over HTTP."""

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, List

import pytest
from helpers import ALPHA_QUEUE, ROOT, TOKEN_A, TOKEN_B, accounts_document, eventually, run, serving, write_json

import app as service

SINGLE = {"queues": [ALPHA_QUEUE]}


def test_serves_accounts_over_http_and_stops_cleanly(data_path: Path) -> None:
    with serving(data_path) as server:
        status, headers, body = server.get("/v2/queues", {"Authorization": "Bearer " + TOKEN_A})
        assert (status, json.loads(body)) == (200, [ALPHA_QUEUE])
        assert headers["Content-Type"] == "application/json"
        assert headers["Server"] == "qstash-lists"  # no version banner
        status, _, body = server.get("/v2/queues?qstash_token=" + TOKEN_B)
        assert [q["name"] for q in json.loads(body)] == ["reports"]
        status, headers, body = server.get("/v2/topics")
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="qstash"'
        status, headers, body = server.get("/v2/topics", {"Authorization": "Bearer " + TOKEN_A}, "HEAD")
        assert (status, body) == (200, b"")
        assert int(headers["Content-Length"]) > 0
        code, out, err = server.stop()
    assert code == 0
    assert server.banner[1:] == ["export QSTASH_URL=%s\n" % server.url,
                                 "# QSTASH_TOKEN: accounts from the data file; use your account's token\n"]
    assert "Traceback" not in err
    assert TOKEN_A not in err and TOKEN_B not in err
    assert '"GET /v2/queues?qstash_token=[redacted]" 200' in err


def test_default_dev_token_on_loopback_is_printed(tmp_path: Path) -> None:
    with serving(write_json(tmp_path / "one.json", SINGLE)) as server:
        assert server.banner[1] == "export QSTASH_URL=%s\n" % server.url
        assert server.banner[2].startswith("export QSTASH_TOKEN=%s  # the built-in dev token" % service.DEV_TOKEN)
        status, _, body = server.get("/v2/queues", {"Authorization": "Bearer " + service.DEV_TOKEN})
        assert (status, json.loads(body)) == (200, [ALPHA_QUEUE])
        assert server.stop()[0] == 0


def test_a_configured_token_is_used_and_never_printed(tmp_path: Path) -> None:
    data = write_json(tmp_path / "one.json", SINGLE)
    with serving(data, "--quiet", env={"QSTASH_TOKEN": "s3cret-token"}) as server:
        assert server.get("/v2/queues", {"Authorization": "Bearer s3cret-token"})[0] == 200
        assert server.get("/v2/queues", {"Authorization": "Bearer " + service.DEV_TOKEN})[0] == 401
        code, out, err = server.stop()
    out = "".join(server.banner) + out
    assert code == 0
    assert server.banner[2] == "# QSTASH_TOKEN: the one set in this server's environment (not shown)\n"
    assert "s3cret-token" not in out + err
    assert '"GET /v2/queues' not in err  # --quiet: no access log
    assert "Traceback" not in err


def test_refuses_the_dev_token_off_loopback(tmp_path: Path) -> None:
    proc = run(["--host", "0.0.0.0", "--port", "0", "--data", str(write_json(tmp_path / "one.json", SINGLE))])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert out == ""
    assert "QSTASH_TOKEN is not set" in err and "loopback" in err
    assert "Traceback" not in err


def test_a_bad_file_stops_start_up_with_the_place_of_the_fault(tmp_path: Path) -> None:
    document = accounts_document()
    document["accounts"][1]["queues"][0]["lag"] = "7"
    bad = write_json(tmp_path / "bad.json", document)
    proc = run(["--port", "0", "--data", str(bad)])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err == '%s: accounts[1].queues[0].lag: expected a non-negative integer, got "7"\n' % bad


def test_check_prints_a_summary(data_path: Path) -> None:
    proc = run(["--check", "--data", str(data_path)])
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (0, "%s: OK: 3 accounts, 1 URL group, 2 queues\n" % data_path, "")


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs SIGINT")
def test_ctrl_c_stops_cleanly(data_path: Path) -> None:
    with serving(data_path, "--quiet") as server:
        server.proc.send_signal(signal.SIGINT)
        _, err = server.proc.communicate(timeout=15)
    assert server.proc.returncode == 0
    assert "Traceback" not in err


def test_reloads_an_edited_file_keeps_the_last_good_one_and_obeys_sighup(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", accounts_document())
    auth = {"Authorization": "Bearer " + TOKEN_A}
    with serving(path) as server:
        def queue_names() -> List[str]:
            status, _, body = server.get("/v2/queues", auth)
            assert status == 200
            return [q["name"] for q in json.loads(body)]

        document = accounts_document()
        document["accounts"][0]["queues"].append(dict(ALPHA_QUEUE, name="added"))
        write_json(path, document)
        eventually(lambda: queue_names() == ["emails", "added"])

        # An edit that keeps the inode, the size and the mtime: the reloader cannot see it...
        before = os.stat(path)
        path.write_text(path.read_text().replace('"added"', '"addex"'))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        time.sleep(2.5)  # two looks and more
        assert queue_names() == ["emails", "added"]
        server.proc.send_signal(signal.SIGHUP)  # ...until SIGHUP makes it look
        eventually(lambda: queue_names() == ["emails", "addex"])

        path.write_text('{"accounts": [{"token": "token-a", "queues": [{"name": ')  # half written
        for _ in range(30):  # 1.5 s: past the next look at the file
            assert queue_names() == ["emails", "addex"]
            time.sleep(0.05)
        code, _, err = server.stop()
    assert code == 0
    assert "%s: line 1, column 56: invalid JSON: " % path in err
    assert "%s: keeping the last good version" % path in err
    assert err.count("%s: reloaded" % path) == 2


@pytest.mark.parametrize("args, message", [
    (["--port", "abc"], "argument --port: invalid port value: 'abc'"),
    (["--port", "70000"], "argument --port: expected 0 to 65535"),
    (["--threads", "0"], "argument --threads: expected a whole number of at least 1"),
])
def test_bad_arguments_are_named(args: List[str], message: str) -> None:
    proc = run(args)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and message in err and "Traceback" not in err


def test_a_bad_qstash_token_is_refused(data_path: Path) -> None:
    proc = run(["--port", "0", "--data", str(data_path)], env={"QSTASH_TOKEN": "has space"})
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (2, "QSTASH_TOKEN: expected a token of visible ASCII characters, with no spaces\n")


def test_version_help_and_example(tmp_path: Path) -> None:
    proc = run(["--version"])
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "python app.py %s\n" % service.__version__)
    proc = run(["--help"])
    out, _ = proc.communicate(timeout=30)
    for name in ["QSTASH_TOKEN", "QSTASH_LISTS_DATA", "(default: 127.0.0.1)", "(default: 8080)", "(default: 8)"]:
        assert name in out
    proc = run(["--example"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out == (ROOT / "data.json").read_text()  # the shipped data.json is the example
    (tmp_path / "d.json").write_text(out)
    proc = run(["--check", "--data", str(tmp_path / "d.json")])
    assert proc.communicate(timeout=30)[0].endswith(": OK: 1 account, 2 URL groups, 2 queues\n")


def test_a_missing_data_file_says_how_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "data.json"
    proc = run(["--port", "0", "--data", str(missing)])
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (2, "")
    assert err == "%s: no such file; to start from the example: python app.py --example > %s\n" % (missing, missing)


def test_the_data_file_can_come_from_the_environment(data_path: Path) -> None:
    proc = run(["--check"], env={"QSTASH_LISTS_DATA": str(data_path)})
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "%s: OK: 3 accounts, 1 URL group, 2 queues\n" % data_path)


def test_log_lines_start_with_an_iso_8601_utc_timestamp(data_path: Path) -> None:
    with serving(data_path) as server:
        server.get("/v2/queues/emails", {"Authorization": "Bearer " + TOKEN_A})
        _, _, err = server.stop()
    line = next(line for line in err.splitlines() if '"GET /v2/queues/emails"' in line)
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z 127\.0\.0\.1 \"GET /v2/queues/emails\" 200 ", line), line


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make, args, reason", [
    (_fifo, [], "not a regular file but a FIFO"),
    (lambda p: (p.symlink_to("/dev/zero"), p)[1], [], "not a regular file but a character device"),
    (lambda p: (p.mkdir(), p)[1], [], "not a regular file but a directory"),
    (lambda p: (p.write_text(json.dumps(accounts_document()) + " " * 2000), p)[1], ["--max-size", "1K"],
     "bytes, over the limit of 1024"),
])
def test_check_refuses_at_once_what_cannot_be_a_data_file(tmp_path: Path, make: Any, args: List[str],
                                                          reason: str) -> None:
    path = make(tmp_path / "data.json")
    proc = run(["--check", "--data", str(path)] + args)
    out, err = proc.communicate(timeout=30)  # a FIFO nobody writes to must not hang it
    assert (proc.returncode, out) == (2, "")
    assert err.startswith("%s: cannot read: " % path) and reason in err and err.count("\n") == 1


def test_a_fifo_swapped_in_while_serving_neither_hangs_it_nor_replaces_the_data(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", accounts_document())
    auth = {"Authorization": "Bearer " + TOKEN_A}
    with serving(path) as server:
        os.remove(path)
        _fifo(path)
        server.proc.send_signal(signal.SIGHUP)  # look now: at a FIFO nobody writes to
        for _ in range(20):
            status, _, body = server.get("/v2/queues", auth)
            assert (status, json.loads(body)) == (200, [ALPHA_QUEUE])
            time.sleep(0.1)
        os.remove(path)
        document = accounts_document()
        document["accounts"][0]["queues"][0]["lag"] = 99
        write_json(path, document)
        eventually(lambda: json.loads(server.get("/v2/queues", auth)[2])[0]["lag"] == 99)
        code, _, err = server.stop()
    assert code == 0
    assert err.count("%s: cannot read: not a regular file but a FIFO" % path) == 1
    assert "Traceback" not in err


def test_a_port_in_use_is_one_line(data_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(["--port", str(port), "--data", str(data_path)])
        out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (2, "")
    assert err.startswith("cannot listen on 127.0.0.1 port %d: " % port) and err.count("\n") == 1
