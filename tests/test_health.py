"""GET /healthz: whether a replica is ready, and which version of the data file it serves.

No token is needed; the body says the version (the SHA-256 of the file's bytes, so every replica
serving the same file says the same), when it was loaded, and whether the last look at the file
failed, and never anything else from the file.  Unit tests through wsgiref's validator, then the
real thing under each documented server."""

import calendar
import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
from helpers import (
    ALPHA_QUEUE,
    ROOT,
    TOKEN_A,
    Output,
    accounts_document,
    bearer,
    call,
    children,
    eventually,
    free_port,
    served,
    serving,
    started,
    write_json,
)
from test_hostile import get, wait_until_answered
from test_workers import NO_UWSGI, SERVERS, UWSGI, replace

import app as service

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
KEYS = ["status", "version", "loadedAt", "stale", "failedAt"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seconds(iso: str) -> float:
    """The Unix time of a 2026-11-25T01:44:36.186Z."""
    return calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) + int(iso[20:23]) / 1000


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_json(tmp_path / "data.json", accounts_document())


def test_ready_the_version_served_and_when(data: Path) -> None:
    before = time.time()
    app = service.create_app(service.open_data(str(data), None), access_log=False)
    response = call(app, "/healthz")  # no token
    assert response.status == 200
    body = response.json()
    assert list(body) == KEYS
    assert body["status"] == "ok" and body["version"] == sha256(data)
    assert body["stale"] is False and body["failedAt"] is None
    assert (
        ISO_UTC.fullmatch(body["loadedAt"])
        and before - 1 <= seconds(body["loadedAt"]) <= time.time() + 1
    )
    assert response.body == json.dumps(body, separators=(",", ":")).encode()  # compact
    assert response.headers == {
        "Content-Type": "application/json",
        "Content-Length": str(len(response.body)),
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }


@pytest.mark.parametrize(
    "how",
    [
        {"method": "HEAD"},
        {"headers": bearer("not-a-token")},  # a token, right or wrong, changes nothing
        {"headers": bearer(TOKEN_A)},
        {"query": "qstash_token=x&y"},
        {"SCRIPT_NAME": "/qstash"},  # mounted under a prefix
    ],
)
def test_every_way_of_asking_gets_the_same_answer(data: Path, how: Dict[str, Any]) -> None:
    app = service.create_app(service.open_data(str(data), None), access_log=False)
    plain = call(app, "/healthz")
    response = call(app, "/healthz", **how)
    assert (response.status, response.headers) == (200, plain.headers)
    assert response.body == (b"" if how.get("method") == "HEAD" else plain.body)


@pytest.mark.parametrize("writable", [False, True])
def test_other_methods_and_paths(data: Path, writable: bool) -> None:
    app = service.create_app(
        service.open_data(str(data), None, writable=writable), access_log=False
    )
    for method in ("POST", "DELETE", "PUT"):  # read-only or not: it is no write
        response = call(app, "/healthz", method=method)
        assert (response.status, response.headers["Allow"]) == (405, "GET, HEAD")
        assert response.json() == {"error": "method not allowed: this path answers GET, HEAD"}
    for path in ("/healthz//", "/v2/healthz", "/healthz/x"):
        assert call(app, path).status == 404
    # A trailing slash, as on every path.
    assert call(app, "/healthz/").body == call(app, "/healthz").body
    assert call(app, "/v2/queues").status == 401  # the API still needs its token


def test_a_bad_edit_says_stale_and_the_last_good_version_is_served(data: Path) -> None:
    source = service.open_data(str(data), None, interval=3600)
    app = service.create_app(source, access_log=False)
    good = call(app, "/healthz").json()
    data.write_text('{"accounts": [{"token": "%s", "queues": [{"name": "secret-name"' % TOKEN_A)
    assert not source.refresh()
    failed_after = time.time()
    stale = call(app, "/healthz")
    assert stale.status == 200
    body = stale.json()
    assert (body["status"], body["version"], body["loadedAt"], body["stale"]) == (
        "ok",
        good["version"],
        good["loadedAt"],
        True,
    )
    assert ISO_UTC.fullmatch(body["failedAt"]) and seconds(body["failedAt"]) <= failed_after + 1
    # No fault text.
    assert list(body) == KEYS and b"secret" not in stale.body and b"line" not in stale.body
    # Still served.
    assert call(app, "/v2/queues", headers=bearer(TOKEN_A)).json() == [served(ALPHA_QUEUE)]
    write_json(data, dict(accounts_document(), accounts=accounts_document()["accounts"][:1]))
    assert source.refresh()
    fixed = call(app, "/healthz").json()
    assert (fixed["version"], fixed["stale"], fixed["failedAt"]) == (sha256(data), False, None)
    assert fixed["version"] != good["version"]


def test_503_with_retry_after_until_a_good_version_is_in_service(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text("{")
    source = service.open_data(str(path), None, interval=3600, required=False)
    app = service.create_app(source, access_log=False)
    response = call(app, "/healthz")
    assert (
        response.status,
        response.headers["Retry-After"],
        response.headers["Cache-Control"],
    ) == (503, "1", "no-store")
    body = response.json()
    assert (body["status"], body["version"], body["loadedAt"], body["stale"]) == (
        "unavailable",
        None,
        None,
        True,
    )
    assert ISO_UTC.fullmatch(body["failedAt"])
    write_json(path, accounts_document())
    assert source.refresh()
    assert call(app, "/healthz").json()["status"] == "ok"


def test_it_is_in_the_access_log_like_any_request(data: Path, caplog: Any) -> None:
    app = service.create_app(service.open_data(str(data), None))
    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        response = call(app, "/healthz", REMOTE_ADDR="10.0.0.7")
    [line] = [record.getMessage() for record in caplog.records]
    assert re.fullmatch(r'10\.0\.0\.7 "GET /healthz" 200 %d \d+\.\d\dms' % len(response.body), line)


# The real thing: python app.py and each documented server, as curl would ask.


def _app_py(port: int) -> List[str]:
    return [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--quiet"]


COMMANDS: Dict[str, Callable[[int], List[str]]] = {"python app.py": _app_py}
COMMANDS.update({name: command for name, (command, _) in SERVERS.items()})


def threads(pid: int) -> int:
    try:
        return len(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return 0


def healthz(port: int) -> Dict[str, Any]:
    status, body = get("127.0.0.1", port, "/healthz", token=None)
    assert status == 200, body
    document: Dict[str, Any] = json.loads(body)
    return document


@pytest.mark.parametrize("server", list(COMMANDS))
def test_each_server_answers_and_says_stale_after_a_bad_edit(tmp_path: Path, server: str) -> None:
    if server == "uwsgi" and UWSGI is None:
        pytest.skip(NO_UWSGI)
    data = write_json(tmp_path / "data.json", accounts_document())
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data), "PYTHONPATH": str(ROOT), "QSTASH_LISTS_INTERVAL": "0.1"}
    with started(COMMANDS[server](port), env, cwd=str(tmp_path)) as proc:
        log = Output(proc.stderr)
        wait_until_answered(port, timeout=60)
        # Each worker loads the file itself: both have (their reloader threads run)
        if server == "gunicorn":
            eventually(
                lambda: (
                    len(children(proc.pid)) == 2
                    and all(threads(c) >= 2 for c in children(proc.pid))
                )
            )
        # Every process (uWSGI's and gunicorn's workers each watch the file) serves this version.
        good = sha256(data)
        assert {
            (h["status"], h["version"], h["stale"], h["failedAt"])
            for h in [healthz(port) for _ in range(8)]
        } == {("ok", good, False, None)}
        replace(data, {"accounts": [{"token": TOKEN_A, "queues": "not a list"}]})
        eventually(lambda: all(healthz(port)["stale"] for _ in range(8)), timeout=30)
        assert {(h["status"], h["version"]) for h in [healthz(port) for _ in range(8)]} == {
            ("ok", good)
        }
        # The last good one.
        assert all(get("127.0.0.1", port, "/v2/queues/emails")[0] == 200 for _ in range(8))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert "Traceback" not in log.text()


def test_two_replicas_of_one_file_give_the_same_version(data: Path) -> None:
    with serving(data, "--quiet") as one, serving(data, "--quiet") as two:
        first, second = healthz(one.port), healthz(two.port)
        # Each its own load, the same digest.
        assert first["version"] == second["version"] == sha256(data)


def test_the_documented_probes_ask_this_path() -> None:
    """docs/deploying.md's Kubernetes probes, read as YAML, and its example answer, as JSON."""
    import yaml

    text = (ROOT / "docs" / "deploying.md").read_text()
    probes = yaml.safe_load(re.search(r"```yaml\n(readinessProbe:.*?)```", text, re.S).group(1))  # type: ignore
    assert {name: probe["httpGet"] for name, probe in probes.items()} == {
        "readinessProbe": {"path": service.HEALTH_PATH, "port": 8080},
        "livenessProbe": {"path": service.HEALTH_PATH, "port": 8080},
    }
    shown = re.search(r"\$ curl -s http://127\.0\.0\.1:8081/healthz\n(.*)\n", text).group(1)  # type: ignore
    assert list(json.loads(shown)) == KEYS


def test_the_health_checks_times_are_utc_whatever_the_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """loadedAt and failedAt end in Z: UTC, in a process whose zone is not (TZ)."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert service._utc(0.25) == "1970-01-01T00:00:00.250Z"
    finally:
        monkeypatch.undo()
        time.tzset()
