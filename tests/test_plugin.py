"""qstash-lists in the user's own test suite: the qstash_server fixture (with and without
pytest-xdist), the in-process serve() without the plugin, and the README's recipe for suites in
other languages, run as written."""

import http.client
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TOKEN_A,
    Server,
    accounts_document,
    bearer,
    free_port,
    readme_section_block,
    started,
    write_json,
)

import testing

#: A user's suite, as the README's section on tests has it, but with the standard library's HTTP
# client (the SDK's
#: own run is in tests/test_sdks.py): three tests each upsert the same queue and see only that one.
USERS_SUITE = """
import json, os, urllib.request

def upsert_emails():
    url, token = os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"]
    def call(method, path, body=None):
        request = urllib.request.Request(url + path, json.dumps(body).encode() if body else None,
                                         {"Authorization": "Bearer " + token}, method=method)
        with urllib.request.urlopen(request) as response:
            return json.load(response)
    call("POST", "/v2/queues", {"queueName": "emails", "parallelism": 2})
    return [queue["name"] for queue in call("GET", "/v2/queues")]

def test_first(qstash_server):
    assert upsert_emails() == ["emails"]

def test_second(qstash_server):
    assert upsert_emails() == ["emails"]

def test_third(qstash_server):
    assert upsert_emails() == ["emails"] and qstash_server.url == os.environ["QSTASH_URL"]
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_fixture_gives_each_test_a_fresh_server_of_its_own(pytester: Any, workers: str) -> None:
    pytester.makepyfile(test_users=USERS_SUITE)
    result = pytester.runpytest_subprocess("-n", workers, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_a_test_module_gives_its_own_data_by_overriding_qstash_data(pytester: Any) -> None:
    pytester.makepyfile(
        test_own="""
import json, os, urllib.request
import pytest

@pytest.fixture
def qstash_data():
    queue = {"createdAt": 1, "updatedAt": 1, "name": "fixture", "parallelism": 1, "lag": 0}
    return {"queues": [queue]}

def test_it(qstash_server):
    request = urllib.request.Request(qstash_server.url + "/v2/queues",
                                     headers={"Authorization": "Bearer " + qstash_server.token})
    assert [q["name"] for q in json.load(urllib.request.urlopen(request))] == ["fixture"]
    assert json.load(open(qstash_server.path))["queues"][0]["name"] == "fixture"
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_serve_without_the_plugin_sets_nothing_in_the_process_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    """No pytest, no plugin: a with block, a document or a path, a free port; no signal handler, no
    exit, and every thread and socket gone after it."""
    script = """
import json, signal, sys, threading, urllib.request
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
assert [signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)] == handlers
assert set(threading.enumerate()) <= before, threading.enumerate()
print("ok")
"""
    path = write_json(tmp_path / "one.json", {"queues": []})
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    # Nothing on stderr but waitress's own warning for a request that waited a moment for a thread
    # (its logging).
    assert all(line.startswith("Task queue depth is ") for line in done.stderr.splitlines()), (
        done.stderr
    )
    assert [q["name"] for q in json.loads(path.read_text())["queues"]] == ["a", "b"]


def test_the_recipe_for_other_languages_gives_each_test_the_fixture_again(tmp_path: Path) -> None:
    """One server for a JS or Go suite, started as the README's first line says (on a free port
    here); before each test, its second line puts the fixture back, and the next request is
    answered from it (a writable server looks at the file before each request)."""
    start, reset = [
        line.split("  #")[0].strip()
        for line in readme_section_block("In your tests", "sh").splitlines()
    ]
    port = free_port()
    start = start.replace("8081", str(port)).rstrip("&").strip()
    write_json(tmp_path / "fixture.json", accounts_document())
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    with started(["bash", "-c", start.replace("&& ", "&& exec ")], env, cwd=str(tmp_path)) as proc:
        assert (
            proc.stdout is not None and " on http://127.0.0.1:%d" % port in proc.stdout.readline()
        )
        server = Server(proc, "http://127.0.0.1:%d" % port, [])
        for test in range(3):
            subprocess.run(["bash", "-c", reset], cwd=str(tmp_path), check=True)
            status, _, body = server.get("/v2/queues", bearer(TOKEN_A))
            assert [q["name"] for q in json.loads(body)] == ["emails"], test
            conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
            conn.request(
                "POST", "/v2/queues", json.dumps({"queueName": "t%d" % test}), bearer(TOKEN_A)
            )
            assert conn.getresponse().status == 200
            conn.close()


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
