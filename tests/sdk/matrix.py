"""The official SDKs' release history against the server: every release a team may have pinned.

    python tests/sdk/matrix.py             # every release in RELEASES, against python app.py
    python tests/sdk/matrix.py --latest    # and say which newer minor lines the registries have
    python tests/sdk/matrix.py --markdown  # print docs/http.md's "works with" lines

For @upstash/qstash, the last patch of every minor line from 2.0 (there is no 1.x; 0.x has no
topic or queue calls); for the Python ``qstash``, the last patch of every minor line on PyPI.
Each release is installed once into its own folder under .ci-sdk/matrix/ (npm, or pip
--target; ignored by git), then driven by matrix_check.mjs or matrix_check.py: every call it
offers to list or get URL groups (topics, in older JS releases) and queues, signing_key.get()
where it exists, and the JS dev mode (QSTASH_DEV=1) where it exists.  Each result must be the
data file's, with the fields and types that release's own declarations give (the .d.ts of a JS
release; the dataclasses of a Python one); a name that does not exist must raise with the
server's message.  Exit status 1 if a release fails that is not in KNOWN, with its reason.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
sys.path.insert(1, str(HERE.parent.parent))  # the checkout, for the store that helpers reads

from helpers import ALPHA_GROUP, ALPHA_QUEUE, ROOT, SIGNING_KEYS, TOKEN_A, serving, write_json  # noqa: E402

#: The releases checked: the last patch of each minor line (``--latest`` says when this falls
# behind).
RELEASES = {
    "js": [
        "2.0.0",
        "2.1.11",
        "2.2.0",
        "2.3.1",
        "2.4.3",
        "2.5.5",
        "2.6.5",
        "2.7.23",
        "2.8.4",
        "2.9.1",
        "2.10.1",
        "2.11.3",
        "2.12.0",
    ],
    "python": ["2.0.5", "3.0.0", "3.2.0", "3.4.0"],
}
#: Releases that cannot work against this server, and why (from the release's own source).
KNOWN: Dict[Tuple[str, str], str] = {}
SCRATCH = ROOT / ".ci-sdk" / "matrix"
GROUP, QUEUE, MISSING = str(ALPHA_GROUP["name"]), str(ALPHA_QUEUE["name"]), "no-such-name"
NOUNS = {
    "topics": "URL group",
    "urlGroups": "URL group",
    "url_group": "URL group",
    "queue": "queue",
}


def install(language: str, version: str) -> Path:
    """The folder that holds ``version`` of the SDK, installed there first if it is not yet."""
    folder = SCRATCH / language / version
    if language == "js":
        modules = folder / "node_modules"
        if not (modules / "@upstash" / "qstash" / "package.json").exists():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "package.json").write_text(
                '{"private": true}\n'
            )  # so npm installs here, not above
            quiet(
                [
                    "npm",
                    "install",
                    "--silent",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "@upstash/qstash@" + version,
                ],
                folder,
            )
        return modules
    if not (folder / "qstash").is_dir():
        quiet(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--target",
                str(folder),
                "qstash==" + version,
            ],
            ROOT,
        )
    return folder


def quiet(command: List[str], cwd: Path) -> None:
    """Run an installer; say what it said only if it failed."""
    done = subprocess.run(command, cwd=str(cwd), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("%s failed:\n%s%s" % (" ".join(command), done.stdout, done.stderr))


def latest() -> Dict[str, List[str]]:
    """The last patch of every minor line each registry has now (JS from 2.0 on)."""
    npm = json.loads(
        subprocess.run(
            ["npm", "view", "@upstash/qstash", "versions", "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    with urllib.request.urlopen("https://pypi.org/pypi/qstash/json", timeout=30) as answer:
        pypi = list(json.load(answer)["releases"])
    found = {}
    for language, versions in (("js", npm), ("python", pypi)):
        lines: Dict[Tuple[int, int], Tuple[int, ...]] = {}
        for version in versions:
            if re.fullmatch(r"\d+\.\d+\.\d+", version) and (
                language == "python" or int(version.split(".")[0]) >= 2
            ):
                parts = tuple(int(p) for p in version.split("."))
                key = (parts[0], parts[1])
                lines[key] = max(lines.get(key, parts), parts)
        found[language] = [".".join(map(str, lines[key])) for key in sorted(lines)]
    return found


# What the server must answer, and what each release's own declarations say it returns.


def snake(value: Any) -> Any:
    """``value`` as the Python SDK's dataclasses hold it: snake_case names, no name where there is
    none."""
    if isinstance(value, list):
        return [snake(item) for item in value]
    if isinstance(value, dict):
        return {
            re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key): snake(item)
            for key, item in value.items()
            if item is not None
        }
    return value


def expected(call: str, python: bool) -> Any:
    """The value ``call`` must return: the data file's own."""
    kind = call.replace("dev mode: ", "").replace("async ", "").split(".")[0]
    if kind == "signing_key":
        return SIGNING_KEYS
    one = ALPHA_QUEUE if kind.startswith("queue") else ALPHA_GROUP
    value = [one] if call.endswith("list") else one
    return snake(value) if python else value


def declarations(modules: Path) -> str:
    """The TypeScript declarations a JS release ships."""
    package = modules / "@upstash" / "qstash"
    return "\n".join(
        path.read_text()
        for path in sorted(package.glob("*.d.ts")) + sorted(package.glob("dist/*.d.ts"))
    )


def returned_type(text: str, call: str) -> Optional[str]:
    """The type a JS call's promise resolves to, by the release's declarations: "Topic[]",
    "QueueResponse"."""
    kind, method = call.replace("dev mode: ", "").replace(" missing", "").split(".")
    owners = {"topics": ["Topics", "UrlGroups"], "urlGroups": ["UrlGroups"], "queue()": ["Queue"]}[
        kind
    ]
    found = next(
        filter(
            None,
            (re.search(r"declare class %s \{(.*?)\n\}" % owner, text, re.S) for owner in owners),
        ),
        None,
    )  # topics is urlGroups under its old name from 2.6
    if not found:
        return None
    signature = re.search(r"\b%s\([^)]*\): Promise<([\w\[\]]+)>" % method, found.group(1))
    return signature.group(1) if signature else None


def fields(text: str, name: str) -> Optional[List[Tuple[str, bool, str]]]:
    """The fields of ``type name = {...}``: (field, optional, type), comments left out."""
    block = re.search(r"\btype %s = \{(.*?)\n\};" % name, text, re.S)
    if not block:
        return None
    body = re.sub(r"/\*.*?\*/", "", block.group(1), flags=re.S)
    return [
        (m.group(1), m.group(2) == "?", m.group(3).strip())
        for m in re.finditer(r"^\s{4}(\w+)(\??): ([^;]+);", body, re.M)
    ]


def type_problems(value: Any, declared: str, text: str, where: str) -> Iterator[str]:
    """Where ``value`` does not match the TypeScript type ``declared`` (the release's)."""
    if declared.endswith("[]"):
        if not isinstance(value, list):
            yield "%s: not an array" % where
            return
        for i, item in enumerate(value):
            yield from type_problems(item, declared[:-2], text, "%s[%d]" % (where, i))
        return
    simple = {"number": (int, float), "string": (str,), "boolean": (bool,)}
    if declared in simple:
        if not isinstance(value, simple[declared]) or (
            declared == "number" and isinstance(value, bool)
        ):
            yield "%s: %r is not a %s" % (where, value, declared)
        return
    shape = fields(text, declared)
    if shape is None:
        return  # a union or a type this check does not read
    if not isinstance(value, dict):
        yield "%s: not an object (%s)" % (where, declared)
        return
    for name, optional, kind in shape:
        if name in value:
            yield from type_problems(value[name], kind, text, "%s.%s" % (where, name))
        elif not optional:
            yield "%s.%s: missing (%s declares it)" % (where, name, declared)


def judge(language: str, results: Dict[str, Any], text: str) -> List[str]:
    """What is wrong with one release's results, one line each (none: it works)."""
    wrong = []
    if not results:
        return ["offers no call to list or get URL groups or queues"]
    for call, result in results.items():
        if call.endswith("missing"):
            noun = NOUNS[call.replace("async ", "").split(".")[0].replace("()", "")]
            if "not found: no %s named" % noun not in result.get("raised", ""):
                wrong.append(
                    "%s: expected the server's 404, got %s" % (call, json.dumps(result)[:200])
                )
            continue
        if "raised" in result:
            wrong.append("%s: raised %s" % (call, result["raised"][:200]))
            continue
        value = snake(result["value"]) if language == "python" else result["value"]  # None: no name
        if value != expected(call, language == "python"):
            wrong.append("%s: returned %s" % (call, json.dumps(result["value"])[:200]))
        if language == "python":
            wrong += result["problems"]
        else:
            declared = returned_type(text, call)
            if declared is None:
                wrong.append("%s: no declared return type found in the release's .d.ts" % call)
            else:
                wrong += list(type_problems(result["value"], declared, text, call))
    return wrong


def run(language: str, version: str, url: str, dev_port: int) -> Tuple[Dict[str, Any], List[str]]:
    """Drive one release against the server at ``url``: its results, and what is wrong with them."""
    where = install(language, version)
    env = dict(os.environ, QSTASH_URL=url, QSTASH_TOKEN=TOKEN_A, QSTASH_DEV_PORT=str(dev_port))
    env.pop("QSTASH_DEV", None)
    if language == "js":
        text = declarations(where)
        package = where / "@upstash" / "qstash"
        sources = [
            path for path in (package / "index.js", package / "dist" / "index.js") if path.exists()
        ]
        dev = "dev" if any("QSTASH_DEV" in path.read_text() for path in sources) else "no-dev"
        command = ["node", str(HERE / "matrix_check.mjs"), str(where), GROUP, QUEUE, MISSING, dev]
    else:
        text = ""
        env["PYTHONPATH"] = str(where)
        command = [sys.executable, str(HERE / "matrix_check.py"), GROUP, QUEUE, MISSING]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, cwd=str(where)
    )
    if done.returncode != 0 or not done.stdout.strip():
        return {}, [
            "the check itself failed: %s" % (done.stderr.strip().splitlines() or ["no output"])[-1]
        ]
    results: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return results, judge(language, results, text)


def works_with(lines: Dict[str, List[str]]) -> List[str]:
    """docs/http.md's "works with" lines: each SDK's releases, and why one fails, where one does."""
    names = {"js": "`@upstash/qstash`", "python": "`qstash` (Python)"}
    return [
        "- %s: %s" % (names[language], ", ".join(shown))
        for language, shown in lines.items()
        if shown
    ]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--latest", action="store_true", help="also list the registries' newer minor lines"
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print docs/http.md's 'works with' lines"
    )
    parser.add_argument("--only", choices=["js", "python"], help="one SDK only")
    args = parser.parse_args(argv)
    if args.latest:
        for language, versions in latest().items():
            newer = [v for v in versions if v not in RELEASES[language]]
            print(
                "%s: the registry's last patches: %s; not in RELEASES: %s"
                % (language, " ".join(versions), " ".join(newer) or "none")
            )
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    data = write_json(
        folder / ("qstash-lists-matrix-%d.json" % os.getpid()),
        {
            "accounts": [
                {
                    "token": TOKEN_A,
                    "urlGroups": [ALPHA_GROUP],
                    "queues": [ALPHA_QUEUE],
                    "signingKeys": SIGNING_KEYS,
                }
            ]
        },
    )
    dev_data = write_json(
        folder / ("qstash-lists-matrix-dev-%d.json" % os.getpid()),
        {"urlGroups": [ALPHA_GROUP], "queues": [ALPHA_QUEUE]},
    )
    failed = 0
    lines: Dict[str, List[str]] = {"js": [], "python": []}
    try:
        with serving(data, "--quiet") as server, serving(dev_data, "--quiet") as dev:
            for language, versions in RELEASES.items():
                if args.only not in (None, language):
                    continue
                for version in versions:
                    results, wrong = run(language, version, server.url, dev.port)
                    known = KNOWN.get((language, version))
                    verdict = (
                        "works" if not wrong else "fails (known: %s)" % known if known else "FAILS"
                    )
                    failed += bool(wrong) and not known
                    print(
                        "%-6s %-7s %s: %s"
                        % (language, version, verdict, ", ".join(sorted(results)) or "-")
                    )
                    for line in wrong:
                        print("    " + line)
                    lines[language].append(
                        version if not wrong else "%s (fails: %s)" % (version, known or wrong[0])
                    )
    finally:
        data.unlink()
        dev_data.unlink()
    if args.markdown:
        print("\n".join(works_with(lines)))
    print(
        "sdk matrix: %s" % ("every release works" if not failed else "%d release(s) FAIL" % failed)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
