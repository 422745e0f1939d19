"""The two modules vendored into someone else's code, and what ``pip install`` puts on the path.

Each case runs in a fresh interpreter, next to a module of the user's own called
``store`` (and ``app``), and serves a request through the copy it is testing.
"""

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
from helpers import (
    ALPHA_QUEUE,
    ROOT,
    TOKEN_A,
    accounts_document,
    environment,
    readme_section_block,
    served,
    write_json,
)

# Serve one request through the app module named on the command line; print what it saw.
SERVE_ONE = """
import importlib, json, sys
from wsgiref.util import setup_testing_defaults
import store as users_store
app = importlib.import_module(sys.argv[1])
environ = {}
setup_testing_defaults(environ)
environ.update(PATH_INFO="/v2/queues/emails", QUERY_STRING="", HTTP_AUTHORIZATION="Bearer token-a")
seen = []
wsgi = app.create_app(app.open_data(sys.argv[2], None), access_log=False)
body = b"".join(wsgi(environ, lambda status, headers, exc_info=None: seen.append(status)))
print(json.dumps({"status": seen[0], "body": json.loads(body), "users_store": users_store.MARK,
                  "app_store": app.store.__name__, "app_store_file": app.store.__file__}))
"""


def user_module(folder: Path, name: str, mark: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("MARK = %r\n" % mark)


def serve_one(cwd: Path, module: str, data: Path, pythonpath: str = "") -> Dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath}
    done = subprocess.run(
        [sys.executable, "-c", SERVE_ONE, module, str(data)],
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout)
    assert (result["status"], result["body"]) == ("200 OK", served(ALPHA_QUEUE))
    return result


def copy_modules(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("app.py", "store.py"):
        shutil.copy(ROOT / name, folder / name)


def test_vendored_inside_a_package_next_to_another_store(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    user_module(tmp_path, "store.py", "the user's top-level store")
    user_module(tmp_path / "myproj", "__init__.py", "")
    user_module(tmp_path / "myproj", "store.py", "the user's myproj.store")
    user_module(tmp_path / "myproj" / "vendor", "__init__.py", "")
    copy_modules(tmp_path / "myproj" / "vendor")
    result = serve_one(tmp_path, "myproj.vendor.app", data)
    assert result["users_store"] == "the user's top-level store"
    assert result["app_store"] == "myproj.vendor.store"


def test_a_top_level_app_finds_its_own_store_when_another_comes_first(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    user_module(tmp_path / "first", "store.py", "the user's store, first on sys.path")
    copy_modules(tmp_path / "lib")
    result = serve_one(
        tmp_path, "app", data, pythonpath="%s:%s" % (tmp_path / "first", tmp_path / "lib")
    )
    assert result["users_store"] == "the user's store, first on sys.path"
    assert Path(result["app_store_file"]) == tmp_path / "lib" / "store.py"


def test_a_top_level_app_shares_store_when_it_is_its_own(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    copy_modules(tmp_path / "lib")
    (tmp_path / "lib" / "store.py").write_text(
        (ROOT / "store.py").read_text() + "\nMARK = 'ours'\n"
    )
    result = serve_one(tmp_path, "app", data, pythonpath=str(tmp_path / "lib"))
    assert (result["users_store"], result["app_store"]) == ("ours", "store")  # one module, not two


def test_run_as_a_script_from_elsewhere(tmp_path: Path) -> None:
    data = write_json(tmp_path / "data.json", accounts_document())
    user_module(tmp_path / "first", "store.py", "not ours")
    copy_modules(tmp_path / "lib")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "lib" / "app.py"), "--check", "--data", str(data)],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "first")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (
        0,
        "%s: OK: 3 accounts, 1 URL group, 2 queues\n" % data,
    )


def installed_names(wheel: Path) -> set:  # type: ignore[type-arg]
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist()}


def test_pip_install_puts_only_qstash_lists_on_the_path(tmp_path: Path) -> None:
    # A copy: building writes build/ and *.egg-info/ beside the sources.
    source = tmp_path / "source"
    source.mkdir()
    for name in (
        "setup.cfg",
        "pyproject.toml",
        "app.py",
        "store.py",
        "py.typed",
        "README.md",
        "LICENSE",
    ):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    wheel = next((tmp_path / "dist").glob("qstash_lists-*.whl"))
    assert installed_names(wheel) == {"qstash_lists", wheel.name.split("-py3")[0] + ".dist-info"}
    with zipfile.ZipFile(wheel) as archive:
        assert sorted(n for n in archive.namelist() if n.startswith("qstash_lists/")) == [
            "qstash_lists/app.py",
            "qstash_lists/py.typed",
            "qstash_lists/store.py",
        ]
        entry_points: Optional[str] = next(
            archive.read(n).decode() for n in archive.namelist() if n.endswith("entry_points.txt")
        )
    assert "qstash-lists = qstash_lists.app:main" in (entry_points or "")
    site = tmp_path / "site"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    # The user's own app.py and store.py stay theirs; the service is qstash_lists.app.
    user_module(tmp_path / "user", "store.py", "the user's store")
    user_module(tmp_path / "user", "app.py", "the user's app")
    data = write_json(tmp_path / "data.json", accounts_document())
    result = serve_one(tmp_path / "user", "qstash_lists.app", data, pythonpath=str(site))
    assert (result["users_store"], result["app_store"]) == (
        "the user's store",
        "qstash_lists.store",
    )
    assert TOKEN_A not in json.dumps(result)


def test_the_readmes_install_lines_work_as_printed_beside_a_clone(tmp_path: Path) -> None:
    """While the package is on no index: the README's lines, pasted as printed (no placeholder)
    beside a clone's folder, each install the package with its pytest plugin and serve()."""
    lines = readme_section_block("In your tests", "sh", "pip install").strip().splitlines()
    if not (ROOT / ".git").exists():
        pytest.skip("this source tree is not a git clone (a release tarball?): run it in a clone")
    clone = tmp_path / "qstash-lists"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    for i, line in enumerate(lines):
        words = shlex.split(line.split("  #")[0])
        assert words[:2] == ["pip", "install"], line
        target = tmp_path / ("site-%d" % i)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
            + words[2:],
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        # Not measured by coverage (a copy it could not find again when it reports).
        env = environment(measured=False)
        found = subprocess.run(
            [sys.executable, "-c", "from qstash_lists.testing import serve; print(serve.__name__)"],
            env=dict(env, PYTHONPATH=str(target)),
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert found.stdout == "serve\n", found.stderr
        entry_points = next(target.glob("qstash_lists-*.dist-info")) / "entry_points.txt"
        assert "qstash_lists = qstash_lists.testing" in entry_points.read_text()


@pytest.mark.parametrize(
    "script", ["tests/sdk/matrix.py", "tests/benchmark.py", "tests/soak.py", "tests/mutation.py"]
)
def test_each_script_starts_from_the_checkout(script: str) -> None:
    """The scripts run by path (not on pytest's path) find what they import."""
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_every_skip_says_how_to_run_its_test() -> None:
    """Each reason of a pytest.skip, skipif or importorskip in tests/ (its strings, and the
    module-level strings it names) says what to install or do: "install", "run it" or "as root"."""
    named: Dict[str, str] = {}
    calls = []
    for module in sorted((ROOT / "tests").glob("*.py")):
        tree = ast.parse(module.read_text())
        for top in tree.body:
            if isinstance(top, ast.Assign) and isinstance(top.value, ast.Constant):
                named.update((t.id, str(top.value.value)) for t in top.targets if hasattr(t, "id"))
        for node in ast.walk(tree):
            if getattr(getattr(node, "func", None), "attr", "") in (
                "skip",
                "skipif",
                "importorskip",
            ):
                assert isinstance(node, ast.Call)
                reason = [k.value for k in node.keywords if k.arg == "reason"] or node.args[:1]
                calls.append(("%s:%d" % (module.name, node.lineno), reason))
    assert len(calls) > 20
    for where, reason in calls:
        text = " ".join(
            named.get(n.id, "") if isinstance(n, ast.Name) else str(n.value)
            for r in reason
            for n in ast.walk(r)
            if isinstance(n, (ast.Name, ast.Constant))
        )
        assert any(how in text for how in ("install", "run it", "as root")), (where, text)


def test_the_request_trace_in_docs_names_each_definition_where_it_is() -> None:
    """docs/development.md's "One request, end to end": each `name` file:line (and `name` line,
    in that hop's file) is that definition's line, so the trace a maintainer reads first is the
    code as it is."""
    text = (ROOT / "docs" / "development.md").read_text()
    trace = text[text.index("## One request, end to end") :]
    modules = {name: (ROOT / name).read_text().splitlines() for name in ("app.py", "store.py")}
    wrong, checked = [], 0
    for hop in re.split(r"\n(?=\d+(?:-\d+)?\. )", trace):
        here = re.findall(r"\b(app\.py|store\.py):\d+", hop) + [""]  # the hop's file
        for name, module, line in re.findall(r"`([\w.]+)` (?:(app\.py|store\.py):)?(\d+)\b", hop):
            module = module or ("store.py" if name.startswith("store.") else here[0])
            last = name.rsplit(".", 1)[-1]
            source = modules[module][int(line) - 1] if module else ""
            checked += 1
            if not re.match(r"\s*(?:def|class) %s\b|\s*%s\b.*=" % (last, last), source):
                wrong.append("%s %s:%s is %r" % (name, module, line, source.strip()))
    assert checked > 20 and wrong == [], "\n".join(wrong)
