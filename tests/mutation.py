"""A local mutation pass (not run by CI: it takes minutes): put one bug at a time into a copy of
app.py or store.py, run the tests that should notice, and list the bugs no test noticed.

    python tests/mutation.py [--jobs 2] [--only WORD]

Each mutant is a place where a bug would hurt users (auth, account isolation, paths and names,
ETag/304, gzip, HEAD, reload and forks, size cap, validation, writes, log redaction, settings,
signals): the text to find (it must occur exactly once) and what to put instead.  A mutant is
"killed" when the tests fail on it.  Survivors are printed with their reason.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, NamedTuple, Tuple

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["tests/test_app.py", "tests/test_items.py", "tests/test_store.py", "tests/test_reload.py",
         "tests/test_fuzz.py", "tests/test_faults.py"]
SERVER = ["tests/test_server.py"]


class Mutant(NamedTuple):
    area: str
    file: str
    find: str
    replace: str
    tests: Tuple[str, ...] = tuple(QUICK)


M = Mutant
WRITES = ("tests/test_writes.py",)
MUTANTS: List[Mutant] = [
    # auth
    M("auth", "app.py", 'if token and " " not in token and "\\t" not in token:', "if token:"),
    M("auth", "app.py", 'raise Unauthorized("not a Bearer header")', "pass"),
    M("auth", "app.py", "if len(tokens) > 1:", "if len(tokens) > 2:"),
    M("auth", "app.py", 'if not token or b" " in token', 'if b" " in token'),
    M("auth", "app.py", "if len(spellings) > MAX_QUERY_TOKENS:", "if len(spellings) >= MAX_QUERY_TOKENS:"),
    M("auth", "app.py", "if len(spellings) > MAX_QUERY_TOKENS:", "if len(spellings) > MAX_QUERY_TOKENS + 1:"),
    M("auth", "app.py", '_latin1(value[1:]).replace(b"+", b" ")', "_latin1(value[1:])"),
    M("auth", "app.py", 'if not rest or rest[0] in "=&"}', "}"),
    M("auth", "app.py", "('' if why == \"no credential\"", "('' if why != \"no credential\""),
    M("auth", "store.py", "hashlib.sha256(token).digest())", "hashlib.sha256(token.strip()).digest())"),
    M("auth", "app.py", 'return text.encode("latin-1", "backslashreplace")', 'return text.encode("latin-1", "ignore")'),
    M("auth", "app.py", "tokens.add(_latin1(token.lstrip(\" \")))", "tokens.add(_latin1(token.strip()))"),
    M("auth", "store.py", 'return None if _TOKEN.fullmatch(token) else', "return None if True else"),
    # account isolation
    M("isolation", "app.py", "key = (account.token_sha256, path, name)", 'key = (b"", path, name)'),
    M("isolation", "app.py", "body = snapshot.body(account, collection, name)",
      "body = snapshot.body(snapshot.store.accounts[0], collection, name)"),
    M("isolation", "store.py", 'names: dict[str, dict[str, int]] = {"url_groups": {}, "queues": {}}',
      'names: dict[str, dict[str, int]] = _SHARED'),
    M("isolation", "store.py", 'checker.token(a, "accounts", i) == digest', "True", WRITES),
    # paths and names
    M("path", "app.py", 'path = path_info[:-1] if path_info.endswith("/") else path_info', "path = path_info"),
    M("path", "app.py", "if len(parts) > 3 and parts[3]:", "if len(parts) > 3:"),
    M("path", "app.py", "if name is not None and not store.is_name(name):", "if False:"),
    M("path", "store.py", "return type(value) is str and _NAME.fullmatch(value) is not None",
      "return type(value) is str and _NAME.match(value) is not None"),
    M("path", "app.py", "    if route == HEALTH_PATH:\n        return health(source.status())\n", "",
      ("tests/test_health.py",)),
    # ETag and 304
    M("etag", "app.py", 'etag in tags or "W/" + etag in tags', "etag in tags"),
    M("etag", "app.py", 'return "*" in tags or', "return"),
    M("etag", "app.py", "hashlib.blake2b(data, digest_size=16)", "hashlib.blake2b(b'%d' % len(data), digest_size=16)"),
    M("etag", "app.py", "self.etag[:-1] + '-gzip\"'", "self.etag"),
    M("etag", "app.py", 'return "304 Not Modified", list(body.not_modified), b"", None',
      'return "304 Not Modified", list(body.headers), b"", None'),
    M("etag", "app.py", '"next": keys[1]}), NO_STORE)', '"next": keys[1]}), PRIVATE)',
      tuple(QUICK + ["tests/test_keys.py"])),
    # gzip
    M("gzip", "app.py", "        return float(q) > 0\n", "        return True\n"),
    M("gzip", "app.py", 'weights.get("*", "0")', 'weights.get("*", "1")'),
    M("gzip", "app.py", "encoding is None and len(data) >= GZIP_MIN", "encoding is None and len(data) > GZIP_MIN"),
    M("gzip", "app.py", "        return False\n\n\ndef _matches", "        return True\n\n\ndef _matches"),
    M("gzip", "app.py", '("Vary", "Accept-Encoding")] * (self.compressible or encoding is not None)',
      '("Vary", "Accept-Encoding")] * False'),
    # HEAD and methods
    M("head", "app.py", 'if environ.get("REQUEST_METHOD") == "HEAD":\n            data = b""',
      'if environ.get("REQUEST_METHOD") == "HEADX":\n            data = b""'),
    M("head", "app.py", "_ALLOWED[route, source.writable]", "_ALLOWED[route, True]"),
    M("head", "app.py", '+ ("HEAD",) * ("GET" in methods)', ""),
    M("head", "app.py", 'method in ROUTES[route] or not allowed)', "False)"),
    # reload and forks
    M("reload", "store.py", "if not force and _stat(self.path) == self._state[0]:",
      "if _stat(self.path) == self._state[0]:"),
    M("reload", "store.py", "self._state = (signature or fault.signature, self._state[1],",
      "self._state = (_stat(self.path), self._state[1],"),
    M("reload", "store.py", "os.register_at_fork(after_in_child=after_fork)", "pass"),
    M("reload", "store.py", "        del data  # wait without holding it\n", ""),
    M("reload", "store.py", "        if started:\n            self.refresh()", "        pass"),
    M("reload", "store.py", "        if self._forked:\n            self._adopt()\n        if self.writable",
      "        if self.writable"),
    M("reload", "app.py", "uwsgi.post_fork_hook = store.after_fork if", "_ = store.after_fork if",
      ("tests/test_workers.py",)),
    M("reload", "store.py", '"serving 503 until it is valid" if self._state[1] is None else',
      '"serving 503 until it is valid" if self._state[1] is not None else'),
    M("reload", "store.py", "st.st_mtime_ns, st.st_ctime_ns)", "st.st_mtime_ns, 0)"),
    M("reload", "store.py", "if _signature(after) == judged and len(raw) == after.st_size:",
      "if _signature(after) == judged:"),
    M("reload", "store.py", "if _signature(after) == judged and len(raw) == after.st_size:",
      "if len(raw) == after.st_size:"),
    M("reload", "store.py", "        if data is None or data._closed:\n            return",
      "        if data is None:\n            return"),
    M("reload", "store.py", "        if first == self._fault:\n            return", "        pass"),
    M("reload", "store.py",
      "if status.failed_at is None and status.version is not None and _stat(self.path) != signature:", "if False:",
      ("tests/test_health.py", "tests/test_workers.py")),
    M("reload", "store.py", 'kind = _KINDS.get(stat.S_IFMT(os.stat(path).st_mode))', "kind = None"),
    # size cap
    M("size", "store.py", "if before.st_size > max_size:", "if before.st_size > max_size + 1:"),
    M("size", "store.py", "if total > limit:", "if total > limit + 1:"),
    M("size", "store.py", "min(limit - total + 1, _READ_CHUNK)", "_READ_CHUNK"),
    M("size", "app.py", "<= 1 << 32:", "<= 1 << 40:", tuple(SERVER)),
    M("size", "store.py", "    if len(raw) > max_size:\n        raise TooLarge(",
      "    if False:\n        raise TooLarge(", WRITES),
    # validation: each rule once, mutated at its edges
    M("validation", "store.py", "        if value is not _MISSING:\n            self.fault(array, i, key,",
      "        if True:\n            self.fault(array, i, key,"),
    M("validation", "store.py", "if digests.setdefault(digest, i) != i:", "if False:"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return type(value) is int and 0 <= value < MAX_SAFE_INTEGER"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER + 1"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return type(value) is int and -1 <= value <= MAX_SAFE_INTEGER"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return isinstance(value, int) and 0 <= value <= MAX_SAFE_INTEGER"),
    M("validation", "store.py", "if created is not None and updated is not None and created > updated:", "if False:"),
    M("validation", "store.py", "if created is not None and updated is not None and created > updated:",
      "if created is not None and updated is not None and created >= updated:"),
    M("validation", "store.py", 'return type(value) is str and value != "" and value.isprintable()',
      'return type(value) is str and value.isprintable()'),
    M("validation", "store.py", 'return type(value) is str and value != "" and value.isprintable()',
      'return type(value) is str and value != ""'),
    M("validation", "store.py", "if rule(value) and value not in seen:", "if rule(value):"),
    M("validation", "store.py",
      'self.name(item, array, i, seen, is_name)\n        self.whole(item, array, i, "parallelism")',
      'self.name(item, array, i, seen, is_text)\n        self.whole(item, array, i, "parallelism")'),
    M("validation", "store.py", "is_name(name) and name not in seen\n                and is_whole(parallelism)",
      "is_name(name)\n                and is_whole(parallelism)"),
    M("validation", "store.py", "if type(value) is dict and required <= value.keys() <= known:",
      "if type(value) is dict:"),
    M("validation", "store.py", "if type(value) is dict and required <= value.keys() <= known:",
      "if type(value) is dict and required <= value.keys():"),
    M("validation", "store.py", "    if len(value) < len(pairs):", "    if False:"),
    M("validation", "store.py", "if not is_http_url(url) and url is not _MISSING:", "if False:"),
    M("validation", "store.py", "and is_whole(parallelism) and is_whole(lag) and type(paused) is bool):",
      "and is_whole(lag) and type(paused) is bool):"),
    M("validation", "store.py", 'return parts.scheme in ("http", "https")',
      'return parts.scheme in ("http", "https", "ftp")'),
    M("validation", "store.py", "if type(paused) is not bool:", "if False:"),
    M("validation", "store.py", 'and text[closing:closing + 1] in ("]", "}")', ""),
    M("validation", "store.py", "    if not text.strip():\n", "    if False:\n"),
    # writes
    M("writes", "store.py", "if _signature(old) != self._state[0] or self._state[2].failed_at is not None:",
      "if False:", WRITES),
    M("writes", "store.py", "if _signature(old) != self._state[0] or self._state[2].failed_at is not None:",
      "if _signature(old) != self._state[0]:", WRITES),
    M("writes", "store.py", "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", "pass", WRITES),
    M("writes", "store.py", "raw = _read_open(fd, path, max_size)[0] if _stat(target) == _signature(st) else None",
      "raw = _read_open(fd, path, max_size)[0]", WRITES),
    M("writes", "store.py", "os.fchmod(fd, stat.S_IMODE(old.st_mode))", "pass", WRITES),
    M("writes", "store.py", "    target = os.path.realpath(path)\n    deadline", "    target = path\n    deadline",
      WRITES),
    M("writes", "store.py", "        os.fsync(fd)\n        os.replace", "        os.replace", WRITES),
    M("writes", "store.py", "        if temporary:  # not renamed", "        if False:  # not renamed", WRITES),
    M("writes", "store.py", "        if self.writable and _stat(self.path) != self._state[0]:", "        if False:",
      WRITES),
    M("writes", "store.py", "self._put(signature, snapshot, new)", "self._put(None, snapshot, new)", WRITES),
    M("writes", "store.py", 'queue.update(updatedAt=max(now, queue["createdAt"]), parallelism=parallelism)',
      'queue.update(createdAt=now, updatedAt=now, parallelism=parallelism)', WRITES),
    M("writes", "store.py", 'queue["paused"] = queue.get("paused", False) if paused is None else paused',
      'queue["paused"] = bool(paused)', ("tests/test_sdks.py",) + WRITES),
    M("writes", "store.py", "    if not kept:\n        account[\"urlGroups\"].remove(group)",
      "    if False:\n        account[\"urlGroups\"].remove(group)", WRITES),
    M("writes", "store.py", 'and ("name" in endpoint or e["url"] == endpoint["url"])), len(have))', "), len(have))",
      WRITES),
    M("writes", "app.py", "lambda v: store.is_whole(v) and v >= 1", "lambda v: store.is_whole(v)", WRITES),
    M("writes", "app.py", "if int(length) > MAX_BODY:", "if False:", WRITES),
    M("writes", "app.py", 'if did == "no such " + noun:', "if False:", WRITES),
    M("writes", "app.py", "if (adding and \"url\" not in given) or not given or not all(", "if not given or not all(",
      WRITES),
    # the health check, --record, the file wrapper only where it keeps a reference
    M("wrapper", "app.py", 'or not str(getattr(file_wrapper, "__module__", "")).startswith(BY_REFERENCE):', ":"),
    M("wrapper", "app.py", 'BY_REFERENCE = ("waitress.",)', 'BY_REFERENCE = ("",)'),
    M("health", "store.py", "self._state[2]._replace(failed_at=time.time()))", "self._state[2])",
      ("tests/test_health.py",)),
    M("health", "store.py", "Status(hashlib.sha256(raw).hexdigest(), time.time())",
      "Status(hashlib.sha1(raw).hexdigest(), time.time())", ("tests/test_health.py",)),
    M("health", "app.py", 'return _json_answer(HTTPStatus.SERVICE_UNAVAILABLE, document, [("Retry-After", "1")])',
      "return _json_answer(HTTPStatus.OK, document)", ("tests/test_health.py",)),
    M("health", "app.py", 'HEALTH_PATH: ("GET",)}', 'HEALTH_PATH: ("GET", "POST")}', ("tests/test_health.py",)),
    M("record", "app.py", "    worker.join(timeout)\n", "    worker.join()\n", ("tests/test_record.py",)),
    M("record", "app.py", "return None  # urllib would send", "return super().redirect_request(*args)  #",
      ("tests/test_record.py",)),
    M("record", "app.py", 'if response.headers.get("Server") == WAITRESS_SETTINGS["ident"]:', "if False:",
      ("tests/test_record.py",)),
    M("record", "store.py", "    loaded = parse(raw, path, token)\n", "    loaded = Store(())\n",
      ("tests/test_record.py",)),
    M("record", "store.py", "if key in required + optional}", "}", ("tests/test_record.py",)),
    M("record", "app.py", "    if raw is None:\n        raise ConfigError", "    if False:\n        raise ConfigError",
      ("tests/test_record.py",)),
    M("record", "store.py", 'kept.pop("name", None)', "pass", ("tests/test_record.py",)),
    M("record", "app.py", '"upstream": Setting("--upstream", "QSTASH_LISTS_UPSTREAM"',
      '"upstream": Setting("--upstream", "QSTASH_URL"', ("tests/test_record.py",)),
    # log redaction, format, and a log stream that does not keep up
    M("log", "app.py", 'name + "=[redacted]" if equals', "field if equals"),
    M("log", "app.py", '[A-Za-z0-9_.%-]{1,24}', "[A-Za-z0-9_.%-]{1,64}"),
    M("log", "app.py", "for field in fields[:LOGGED_QUERY_FIELDS]", "for field in fields"),
    M("log", "store.py", 'got = "a string of %d characters" % len(value) if type(value) is str else _show(value)',
      "got = _show(value)"),
    M("log", "app.py", "time.gmtime(created)", "time.localtime(created)", tuple(SERVER)),
    M("log", "app.py", 'raise Unauthorized("unknown token")',
      'raise Unauthorized("unknown token %r" % environ.get("HTTP_AUTHORIZATION"))'),
    M("log", "app.py", '"" if why is None else " (%s)" % why', '""'),
    M("log", "app.py", 'raise Unauthorized("tokens disagree" if b"" not in tokens else "malformed")',
      'raise Unauthorized("malformed")'),
    M("log", "app.py", 'logging.getLogger("waitress.queue").setLevel(logging.ERROR)', "pass",
      ("tests/test_hostile.py",)),
    M("log", "app.py", "self._thread.join(ACCESS_LOG_CLOSE_TIMEOUT)", "self._thread.join()", tuple(SERVER)),
    M("log", "app.py", "elif access_logger.isEnabledFor(logging.INFO):", "elif False:"),
    M("log", "app.py", "store.encode(document)\n    return", "json.dumps(document).encode()\n    return",
      WRITES),
    # signing keys
    M("keys", "app.py", "(DEV_SIGNING_KEYS if account.token_sha256 == _DEV_DIGEST else None)", "DEV_SIGNING_KEYS",
      tuple(QUICK + ["tests/test_keys.py"])),
    M("keys", "app.py", "(DEV_SIGNING_KEYS if account.token_sha256 == _DEV_DIGEST else None)", "None",
      tuple(QUICK + ["tests/test_keys.py"])),
    M("keys", "store.py", 'self.fault(prefix + "signingKeys", None, key, "expected a non-empty printable string")',
      'self.fault(prefix + "signingKeys", None, key, "expected a non-empty printable string, got %r" % value[key])',
      tuple(QUICK + ["tests/test_keys.py"])),
    # settings
    M("settings", "app.py", "if text is None and setting.env is not None and setting.env in environ:",
      "if setting.env is not None and setting.env in environ:", tuple(SERVER)),
    M("settings", "app.py", 'if text.startswith("Bearer ") else', "if False else", tuple(SERVER)),
    M("settings", "app.py", "if not (text.isascii() and text.isdigit() and len(text) <= len(str(high)))",
      "if not (text.isdigit())", tuple(SERVER)),
    M("settings", "app.py", "if not 0.01 <= value <= 3600:", "if not 0 <= value <= 3600:", tuple(SERVER)),
    M("settings", "app.py", "raise SystemExit(3) from None", "raise SystemExit(2) from None"),
    M("settings", "app.py", "fallback = DEV_TOKEN if args.check or is_loopback(settings[\"host\"]) else None",
      "fallback = DEV_TOKEN", tuple(SERVER)),
    M("settings", "app.py", '            if text == "":\n', "            if False:\n", tuple(SERVER)),
    M("settings", "app.py", '_whole(1, MAX_THREADS)', "_whole(1, 10**9)", tuple(SERVER)),
    M("settings", "app.py", 'return text.lower() in ("1", "true", "yes", "on")', "return True", WRITES),
    M("settings", "app.py", "    mode = parser.add_mutually_exclusive_group()\n", "    mode = parser\n", tuple(SERVER)),
    # signals
    M("signals", "app.py", "    _handle_signals()  # before the first load", "    pass  # before the first load",
      tuple(SERVER)),
    M("signals", "app.py", "raise SystemExit(0)  # before serving", "raise KeyboardInterrupt  # before serving",
      tuple(SERVER)),
    M("signals", "app.py", "        signal.signal(signal.SIGHUP, _wake_all)\n\n\ndef _stop",
      "        pass\n\n\ndef _stop", tuple(SERVER)),
]


def run(mutant: Mutant, python: str) -> Tuple[Mutant, bool, str]:
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder)
        for name in ("app.py", "store.py", "pyproject.toml", "data.json", "README.md"):
            shutil.copy(ROOT / name, copy / name)
        shutil.copytree(ROOT / "tests", copy / "tests")
        if (ROOT / "docs").exists():
            shutil.copytree(ROOT / "docs", copy / "docs")
        source = (copy / mutant.file).read_text()
        if source.count(mutant.find) != 1:
            return mutant, False, "the text occurs %d times" % source.count(mutant.find)
        source = source.replace(mutant.find, mutant.replace)
        if "_SHARED" in mutant.replace:
            source += "\n_SHARED: dict[str, dict[str, int]] = {'url_groups': {}, 'queues': {}}\n"
        (copy / mutant.file).write_text(source)
        try:
            done = subprocess.run([python, "-m", "pytest", "-x", "-q", "-n", "0", "-p",
                                   "no:cacheprovider"] + list(mutant.tests),
                                  cwd=str(copy), capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return mutant, True, "timed out"
        last = (done.stdout.strip().splitlines() or [""])[-1]
        return mutant, done.returncode != 0, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.only in m.area or args.only in m.find]
    killed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for mutant, caught, last in pool.map(lambda m: run(m, sys.executable), chosen):
            killed += caught
            print("%-8s %-10s %s: %r -> %r  (%s)" % ("killed" if caught else "SURVIVED", mutant.area, mutant.file,
                                                    mutant.find[:60], mutant.replace[:40], last), flush=True)
    print("mutation score: %d of %d killed (%.0f%%)" % (killed, len(chosen), 100.0 * killed / max(1, len(chosen))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
