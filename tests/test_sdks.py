"""The official SDKs against the real server: list() and get() of both kinds, as their users call
them.

The SDKs are not the project's dependencies: ``bash tests/sdk/install.sh`` installs them in .ci-sdk/
(as .ci/run does), where these tests find them; QSTASH_LISTS_SDK_PYTHON (an interpreter with
``qstash``) and QSTASH_LISTS_SDK_JS (a node_modules folder with ``@upstash/qstash``) name others.
Without them these tests are skipped, saying how to run them.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers import (
    ALPHA_GROUP,
    ALPHA_QUEUE,
    BETA_QUEUE,
    ROOT,
    SIGNING_KEYS,
    TOKEN_A,
    TOKEN_B,
    Server,
    bearer,
    free_port,
    readme_section_block,
    served,
    serving,
    started,
    write_json,
)

HERE = Path(__file__).resolve().parent
SCRATCH = ROOT / ".ci-sdk"
SDK_PYTHON = os.environ.get("QSTASH_LISTS_SDK_PYTHON") or str(SCRATCH / "py" / "bin" / "python")
SDK_JS = os.environ.get("QSTASH_LISTS_SDK_JS") or str(SCRATCH / "node_modules")
HOW = "to run it: bash tests/sdk/install.sh && .venv/bin/python -m pytest tests/test_sdks.py"
needs_python_sdk = pytest.mark.skipif(
    not os.path.exists(SDK_PYTHON), reason="no Python SDK; " + HOW
)
needs_js_sdk = pytest.mark.skipif(
    not os.path.isdir(os.path.join(SDK_JS, "@upstash", "qstash")), reason="no JS SDK; " + HOW
)
MISSING = 'not found: no %s named \\"%s\\"'


@pytest.fixture(scope="module")
def server(tmp_path_factory: Any) -> Any:
    document = {
        "accounts": [
            {
                "token": TOKEN_A,
                "urlGroups": [ALPHA_GROUP],
                "queues": [ALPHA_QUEUE],
                "signingKeys": SIGNING_KEYS,
            },
            {
                "token": TOKEN_B,
                "urlGroups": [dict(ALPHA_GROUP, name="invoices")],
                "queues": [BETA_QUEUE],
            },
        ]
    }
    with serving(
        write_json(tmp_path_factory.mktemp("sdk") / "data.json", document), "--quiet"
    ) as running:
        yield running


def sdk(command: List[str], server: Server, token: str, group: str, queue: str) -> Dict[str, Any]:
    env = dict(os.environ, QSTASH_URL=server.url, QSTASH_TOKEN=token, QSTASH_LISTS_SDK_JS=SDK_JS)
    done = subprocess.run(
        command + [group, queue], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout)
    return result


def snake(item: Dict[str, Any]) -> Dict[str, Any]:
    """What the Python SDK's dataclasses hold for an API object."""
    names = {"createdAt": "created_at", "updatedAt": "updated_at"}
    out = {names.get(key, key): value for key, value in item.items()}
    if "endpoints" in out:
        out["endpoints"] = [{"url": e["url"], "name": e.get("name")} for e in out["endpoints"]]
    return out


@needs_python_sdk
def test_python_sdk(server: Server) -> None:
    command = [SDK_PYTHON, str(HERE / "sdk" / "sdk_check.py")]
    mine = sdk(command, server, TOKEN_A, "orders", "emails")
    assert mine == {
        "url_groups": [snake(ALPHA_GROUP)],
        "queues": [snake(ALPHA_QUEUE)],
        "url_group": snake(ALPHA_GROUP),
        "queue": snake(ALPHA_QUEUE),
        "signing_key": SIGNING_KEYS,
    }
    # Nowhere; only in account B.
    for group, queue in [("nothere", "nothere"), ("invoices", "reports")]:
        result = sdk(command, server, TOKEN_A, group, queue)
        assert result["url_group"]["raised"].startswith("Request failed with status: 404, body: ")
        assert MISSING % ("URL group", group) in result["url_group"]["raised"]
        assert MISSING % ("queue", queue) in result["queue"]["raised"]
    theirs = sdk(command, server, TOKEN_B, "invoices", "reports")
    assert theirs["queue"] == snake(dict(BETA_QUEUE, paused=False))
    assert theirs["url_group"]["name"] == "invoices"
    # B has none; A's stay A's.
    assert theirs["signing_key"]["raised"].startswith("Request failed with status: 404")
    stranger = sdk(command, server, "wrong", "orders", "emails")
    assert all("status: 401" in stranger[key]["raised"] for key in stranger)


@needs_js_sdk
def test_js_sdk(server: Server) -> None:
    command = ["node", str(HERE / "sdk" / "sdk_check.mjs")]
    mine = sdk(command, server, TOKEN_A, "orders", "emails")
    assert mine == {
        "url_groups": [served(ALPHA_GROUP)],
        "queues": [served(ALPHA_QUEUE)],
        "url_group": served(ALPHA_GROUP),
        "queue": served(ALPHA_QUEUE),
    }
    for group, queue in [("nothere", "nothere"), ("invoices", "reports")]:
        result = sdk(command, server, TOKEN_A, group, queue)
        assert MISSING % ("URL group", group) in result["url_group"]["raised"]
        assert MISSING % ("queue", queue) in result["queue"]["raised"]
        assert result["queue"]["status"] == result["url_group"]["status"] == 404
    theirs = sdk(command, server, TOKEN_B, "invoices", "reports")
    assert theirs["queue"] == served(BETA_QUEUE)
    stranger = sdk(command, server, "wrong", "orders", "emails")
    assert all(stranger[key]["status"] == 401 for key in stranger)


def readme_block(title: str) -> str:
    """The code block that follows ``title`` in the README."""
    text = (ROOT / "README.md").read_text()
    match = re.search(re.escape(title) + r"[^\n]*\n+```\w*\n(.*?)```", text, re.S)
    assert match, title
    return match.group(1)


@needs_python_sdk
def test_the_readmes_python_example_runs(server: Server, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_block("Python (`pip install qstash`)"))
    env = dict(os.environ, QSTASH_URL=server.url, QSTASH_TOKEN=TOKEN_A)
    done = subprocess.run(
        [SDK_PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "name='orders'" in done.stdout and "name='emails'" in done.stdout


needs_sdk_and_pytest = pytest.mark.skipif(
    not os.path.exists(SDK_PYTHON)
    or subprocess.run(
        [SDK_PYTHON, "-c", "import pytest, xdist, qstash_lists.testing"], capture_output=True
    ).returncode
    != 0,
    reason="no Python SDK with pytest and qstash-lists beside it; " + HOW,
)


@needs_sdk_and_pytest
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_users_suite_from_the_readme_passes_with_the_fixture(
    tmp_path: Path, workers: str
) -> None:
    """The README's suite, as a user copies it into a project that has qstash and qstash-lists
    installed, with its ini line: a client built once, at import, and 100 tests that each upsert
    a queue and see only theirs (the run's server put back to qstash_data before each)."""
    (tmp_path / "pytest.ini").write_text(readme_section_block("In your tests", "ini"))
    suite = readme_section_block("In your tests", "python", "qstash_server")
    (tmp_path / "test_users.py").write_text(suite)
    user_suite(tmp_path, "100 passed", "-n", workers)


def user_suite(folder: Path, passed: str, *args: str) -> None:
    """Run pytest in ``folder`` with the SDK's interpreter, as a user's project would."""
    done = subprocess.run(
        [SDK_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        env=dict(os.environ, PYTEST_ADDOPTS=""),
        cwd=str(folder),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and passed in done.stdout, done.stdout + done.stderr


@needs_sdk_and_pytest
def test_the_readmes_serve_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "serve_example.py"
    script.write_text(readme_section_block("In your tests", "python", "serve("))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QSTASH_")}
    done = subprocess.run(
        [SDK_PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "['emails']\n"), done.stderr


@needs_sdk_and_pytest
def test_the_readmes_bad_day_recipe_passes(tmp_path: Path) -> None:
    """The README's Python recipe for a rate limit at startup, as a user copies it."""
    recipe = readme_section_block("In your tests", "python", "RateLimitExceededError")
    (tmp_path / "test_startup.py").write_text(recipe)
    user_suite(tmp_path, "1 passed")


@needs_js_sdk
def test_the_readmes_js_suite_passes_under_the_runner_as_printed(tmp_path: Path) -> None:
    """The README's fixture and node:test files (two, 30 tests each that reset, write and check,
    an account each) under its command line, at two files at once, three runs in a row: each
    passes whole, and the fixture is left as it was."""
    folder = Path(SDK_JS).parent / "readme-js"  # the SDK's node_modules is above it
    shutil.rmtree(folder, ignore_errors=True)  # node --test runs every test file it finds there
    folder.mkdir()
    emails = readme_section_block("In your tests", "js", "node:test")
    reports = emails.replace("test-emails", "test-reports").replace("emails-", "reports-")
    # The bad-day recipe, in emails.test.mjs as the README says.
    imported = "import { Client, QstashRatelimitError } from"
    emails = emails.replace("import { Client } from", imported)
    emails += readme_section_block("In your tests", "js", "QstashRatelimitError")
    (folder / "emails.test.mjs").write_text(emails)
    (folder / "reports.test.mjs").write_text(reports)
    fixture = folder / "fixture.json"
    fixture.write_text(readme_section_block("In your tests", "json", "test-emails"))
    before = fixture.read_bytes()
    command = readme_section_block("In your tests", "sh", "--run").split()
    assert command[0] == "qstash-lists" and "--test-concurrency=2" in command

    def run_the_command() -> "subprocess.CompletedProcess[str]":
        argv = [sys.executable, str(ROOT / "app.py")] + command[1:]
        return subprocess.run(argv, cwd=str(folder), capture_output=True, text=True, timeout=300)

    for run in range(3):
        done = run_the_command()
        assert done.returncode == 0 and "# pass 61" in done.stdout, (run, done.stdout, done.stderr)
        assert done.stderr == "" and fixture.read_bytes() == before
    # A misspelt key in the bad-day recipe fails at its own POST, saying which key.
    (folder / "emails.test.mjs").write_text(emails.replace("{ status: 429 }", "{ statuss: 429 }"))
    done = run_the_command()
    assert done.returncode == 1 and '\\"statuss\\": not a fault\'s' in done.stdout, done.stdout


@pytest.mark.skipif(shutil.which("go") is None, reason="no Go (apt-get install golang-go)")
def test_the_go_suite_passes_under_the_runner_as_printed(tmp_path: Path) -> None:
    """docs/http.md's Go suite (net/http, no SDK) with the README's fixture, three runs."""
    text = (ROOT / "docs" / "http.md").read_text()
    section = text[text.index("## From Go") :]
    (tmp_path / "queues_test.go").write_text(section.split("```go\n")[1].split("```")[0])
    (tmp_path / "go.mod").write_text("module example\n\ngo 1.19\n")
    fixture = tmp_path / "fixture.json"
    fixture.write_text(readme_section_block("In your tests", "json", "test-emails"))
    command = ["--data", "fixture.json", "--quiet", "--run", "go", "test", "./..."]
    assert "qstash-lists " + " ".join(command) in section
    for run in range(3):
        done = subprocess.run(
            [sys.executable, str(ROOT / "app.py")] + command,
            cwd=str(tmp_path),
            env=dict(os.environ, GOFLAGS="-count=1", GOCACHE=str(tmp_path / "cache")),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and done.stdout.startswith("ok "), (
            run,
            done.stdout,
            done.stderr,
        )


@needs_js_sdk
def test_the_readmes_js_example_runs(server: Server) -> None:
    # An ES module finds its packages next to itself, so the example runs from the SDK's folder.
    script = Path(SDK_JS).parent / "example.mjs"
    script.write_text(readme_block("JavaScript (`npm install @upstash/qstash`), `example.mjs`"))
    env = dict(os.environ, QSTASH_URL=server.url, QSTASH_TOKEN=TOKEN_A)
    done = subprocess.run(
        ["node", str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "name: 'orders'" in done.stdout and "name: 'emails'" in done.stdout


@needs_js_sdk
def test_the_js_sdks_dev_mode_uses_this_server_and_downloads_nothing(tmp_path: Path) -> None:
    """QSTASH_DEV=1: the SDK ignores baseUrl and token, checks GET /v2/keys on 127.0.0.1 with the
    dev token for the dev signing keys, and would download the closed `qstash dev` binary
    otherwise."""
    script = Path(SDK_JS).parent / "dev-mode.mjs"
    script.write_text(readme_block("`QSTASH_DEV=1 node dev-mode.mjs`"))
    port = free_port()
    data = write_json(tmp_path / "data.json", {"urlGroups": [ALPHA_GROUP], "queues": [ALPHA_QUEUE]})
    with serving(data, "--port", str(port), "--quiet") as server:
        assert server.port == port
        env = {k: v for k, v in os.environ.items() if not k.startswith("QSTASH_")}
        env.update(QSTASH_DEV="1", QSTASH_DEV_PORT=str(port))
        done = subprocess.run(
            ["node", str(script)], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert "name: 'emails'" in done.stdout and "name: 'orders'" in done.stdout
    assert "download" not in (done.stdout + done.stderr).lower() and "ENOTFOUND" not in done.stderr


def test_the_docs_list_every_release_the_matrix_checks() -> None:
    """docs/http.md's "works with" lines are the matrix's: tests/sdk/matrix.py --markdown prints
    them when every release works (it fails, in CI, when one does not), and a release KNOWN to
    fail is listed with its reason."""
    import sys

    sys.path.insert(0, str(HERE / "sdk"))
    import matrix

    lines = {
        language: [
            version
            if (language, version) not in matrix.KNOWN
            else "%s (fails: %s)" % (version, matrix.KNOWN[language, version])
            for version in versions
        ]
        for language, versions in matrix.RELEASES.items()
    }
    listed = (ROOT / "docs" / "http.md").read_text().splitlines()
    assert all(line in listed for line in matrix.works_with(lines)), matrix.works_with(lines)


@pytest.fixture(scope="module", params=["python app.py", "uwsgi"])
def writable(request: Any, tmp_path_factory: Any) -> Any:
    """A --writable server: python app.py, or the documented uWSGI recipe (two processes) with
    QSTASH_LISTS_WRITABLE=1, where a write in one process must be read back from the other."""
    data = write_json(
        tmp_path_factory.mktemp("writes") / "data.json", {"accounts": [{"token": TOKEN_A}]}
    )
    if request.param == "python app.py":
        with serving(data, "--writable", "--quiet") as running:
            yield running.url
        return
    from test_hostile import deploy_command, wait_until_answered
    from test_workers import NO_UWSGI, UWSGI

    if UWSGI is None:
        pytest.skip(NO_UWSGI)
    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data), "QSTASH_LISTS_WRITABLE": "1", "PYTHONPATH": str(ROOT)}
    with started(
        [UWSGI] + deploy_command("uwsgi", port)[1:],
        env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as master:
        write_json(data, {"accounts": [{"token": TOKEN_A, "queues": [ALPHA_QUEUE]}]})
        wait_until_answered(port)
        yield "http://127.0.0.1:%d" % port
        master.terminate()


def check_writes(result: Dict[str, Any], prefix: str, python: bool) -> None:
    """What each step read back, in the SDK's own shapes."""
    queue, group = prefix + "-queue", prefix + "-group"
    created = "created_at" if python else "createdAt"
    got = result["got"]
    assert (got["name"], got["parallelism"], got["paused"], got["lag"]) == (queue, 1, False, 0)
    assert result["got again"]["parallelism"] == 2 and result["got again"][created] == got[created]
    assert [result[step]["paused"] for step in ("paused", "resumed", "upserted paused")] == [
        True,
        False,
        True,
    ]
    assert queue in [q["name"] for q in result["listed"]]
    assert queue not in [q["name"] for q in result["listed after delete"]]
    one: Dict[str, Any] = {"url": "https://a.example/1"}
    two = {"url": "https://a.example/2", "name": "second"}
    if python:
        one = dict(one, name=None)
    assert (result["group"]["name"], result["group"]["endpoints"]) == (group, [one, two])
    assert result["group after remove"]["endpoints"] == [two]
    assert group not in [g["name"] for g in result["groups"]]
    assert all(
        result[step] is None
        for step in (
            "upsert",
            "pause",
            "resume",
            "delete",
            "add endpoints",
            "remove endpoints",
            "delete group",
            "delete group again",
        )
    )


@needs_python_sdk
@pytest.mark.parametrize("mode", ["sync", "asyncio"])
def test_python_sdk_writes(writable: str, mode: str) -> None:
    env = dict(os.environ, QSTASH_URL=writable, QSTASH_TOKEN=TOKEN_A)
    done = subprocess.run(
        [SDK_PYTHON, str(HERE / "sdk" / "sdk_writes.py"), mode, "py-" + mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    check_writes(json.loads(done.stdout), "py-" + mode, python=True)


@needs_js_sdk
def test_js_sdk_writes(writable: str) -> None:
    env = dict(os.environ, QSTASH_URL=writable, QSTASH_TOKEN=TOKEN_A, QSTASH_LISTS_SDK_JS=SDK_JS)
    done = subprocess.run(
        ["node", str(HERE / "sdk" / "sdk_writes.mjs"), "js"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    check_writes(json.loads(done.stdout), "js", python=False)


@needs_js_sdk
def test_the_js_sdks_dev_mode_finds_a_file_of_accounts_with_the_dev_token(tmp_path: Path) -> None:
    """Dev mode needs the dev token's account to answer the dev signing keys: in a file of accounts
    too (given plainly or by digest), unless the file gives that account keys of its own."""
    import hashlib

    import app as service

    script = Path(SDK_JS).parent / "dev-mode.mjs"
    script.write_text(readme_block("`QSTASH_DEV=1 node dev-mode.mjs`"))
    port = free_port()
    digest = hashlib.sha256(service.DEV_TOKEN.encode()).hexdigest()
    data = write_json(
        tmp_path / "data.json",
        {
            "accounts": [
                {"token": TOKEN_A},
                {"tokenSha256": digest, "urlGroups": [ALPHA_GROUP], "queues": [ALPHA_QUEUE]},
            ]
        },
    )
    with serving(data, "--port", str(port), "--quiet") as server:
        assert server.proc.stdout is not None
        dev_mode = server.proc.stdout.readline()  # the banner's fourth line
        assert (
            dev_mode
            == "# the JS SDK dev mode, QSTASH_DEV=1: set QSTASH_DEV_PORT=%d where the SDK runs\n"
            % port
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("QSTASH_")}
        env.update(QSTASH_DEV="1", QSTASH_DEV_PORT=str(port))
        done = subprocess.run(
            ["node", str(script)], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert "name: 'emails'" in done.stdout and "name: 'orders'" in done.stdout


# ---- Bad days on demand: what the SDKs make of a fault ------------------------------------------
@pytest.fixture
def bad_days(tmp_path: Path) -> Any:
    document = {
        "accounts": [
            {"token": TOKEN_A, "queues": [ALPHA_QUEUE]},
            {"token": TOKEN_B, "queues": [BETA_QUEUE]},
        ]
    }
    path = write_json(tmp_path / "data.json", document)
    with serving(path, "--writable", "--reset", "--quiet") as running:
        yield running


def log_of(server: Server, token: str) -> List[Any]:
    status, _, body = server.get("/qstash-lists/requests", bearer(token))
    assert status == 200, body
    return json.loads(body)  # type: ignore[no-any-return]


RATE_LIMITED = {"limit": "10", "remaining": "0", "reset": "1800000000"}
DAILY_LIMITED = {"limit": "500", "remaining": "0", "reset": "1800000000"}
UNAVAILABLE = '{"error":"503: a fault this suite asked for (/qstash-lists/faults)"}'


def check_bad_day(server: Server, result: Dict[str, Any]) -> None:
    """Each fault used once; the dropped list retried by the SDK and answered; the other account's
    requests met none; after a reset, no fault is left and the log is empty."""
    assert result["dropped"] == result["after"] == {"names": ["emails"]}
    statuses = [entry["status"] for entry in log_of(server, TOKEN_A)]
    assert statuses == [429, 429, 503, None, 200, 200]
    status, _, body = server.get("/v2/queues", bearer(TOKEN_B))
    assert status == 200 and [q["name"] for q in json.loads(body)] == ["reports"]
    assert log_of(server, TOKEN_B)[0]["status"] == 200
    auth = bearer(TOKEN_A)
    assert server.get("/qstash-lists/faults", auth, "POST")[0] == 400  # no body
    for keys in ({"status": 503, "times": 3}, {"drop": True}):
        assert server.get("/qstash-lists/faults", auth, "POST", json.dumps(keys).encode())[0] == 200
    assert server.get("/qstash-lists/reset", auth, "POST")[0] == 200
    assert log_of(server, TOKEN_A) == []
    assert server.get("/v2/queues", auth)[0] == 200


def run_bad_day(command: List[str], server: Server) -> Dict[str, Any]:
    env = dict(os.environ, QSTASH_URL=server.url, QSTASH_TOKEN=TOKEN_A, QSTASH_LISTS_SDK_JS=SDK_JS)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@needs_python_sdk
def test_the_python_sdk_meets_each_fault_as_qstashs(bad_days: Server) -> None:
    result = run_bad_day([SDK_PYTHON, str(HERE / "sdk" / "bad_days.py")], bad_days)
    assert result["burst"] == dict(RATE_LIMITED, raised="RateLimitExceededError")
    assert result["daily"] == dict(DAILY_LIMITED, raised="DailyMessageLimitExceededError")
    assert result["unavailable"] == {
        "raised": "QStashError",
        "message": "Request failed with status: 503, body: " + UNAVAILABLE,
    }
    check_bad_day(bad_days, result)


@needs_js_sdk
def test_the_js_sdk_meets_each_fault_as_qstashs(bad_days: Server) -> None:
    result = run_bad_day(["node", str(HERE / "sdk" / "bad_days.mjs")], bad_days)
    assert {k: v for k, v in result["burst"].items() if k != "message"} == dict(
        RATE_LIMITED, raised="QstashRatelimitError"
    )
    assert {k: v for k, v in result["daily"].items() if k != "message"} == dict(
        DAILY_LIMITED, raised="QstashDailyRatelimitError"
    )
    assert result["unavailable"] == {"raised": "QstashError", "message": UNAVAILABLE}
    check_bad_day(bad_days, result)


NO_RETRY_CLIENTS = {
    "python": "QStash(token, base_url=url, retry=False)",
    "js": "new Client({ baseUrl: url, token, retry: false })",
}
NO_RETRY_SCRIPTS = {
    "python": """import os
from qstash import QStash
url, token = os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"]
%s.queue.list()
""",
    "js": """import { createRequire } from "node:module";
import path from "node:path";
const require = createRequire(path.join(process.env.QSTASH_LISTS_SDK_JS, "index.js"));
const { Client } = require("@upstash/qstash");
const url = process.env.QSTASH_URL, token = process.env.QSTASH_TOKEN;
await %s.queue().list();
""",
}


@pytest.mark.parametrize(
    "sdk_name",
    [
        pytest.param("python", marks=needs_python_sdk),
        pytest.param("js", marks=needs_js_sdk),
    ],
)
def test_with_retries_off_as_the_docs_say_a_drop_fails_the_call_in_one_request(
    bad_days: Server, sdk_name: str
) -> None:
    """docs/http.md's client with retries off, as printed: one drop (times 1, which a retry would
    get past) fails the call, and the log shows the one request it made."""
    client = NO_RETRY_CLIENTS[sdk_name]
    assert client in (ROOT / "docs" / "http.md").read_text()
    fault = json.dumps({"drop": True, "times": 1}).encode()
    assert bad_days.get("/qstash-lists/faults", bearer(TOKEN_A), "POST", fault)[0] == 200
    script = NO_RETRY_SCRIPTS[sdk_name] % client
    command = (
        [SDK_PYTHON, "-c", script]
        if sdk_name == "python"
        else ["node", "--input-type=module", "-e", script]
    )
    env = dict(
        os.environ, QSTASH_URL=bad_days.url, QSTASH_TOKEN=TOKEN_A, QSTASH_LISTS_SDK_JS=SDK_JS
    )
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    assert [entry["status"] for entry in log_of(bad_days, TOKEN_A)] == [None], done.stderr
