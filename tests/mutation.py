"""A local mutation pass (not run by CI: it takes minutes): put one bug at a time into a copy of
app.py or store.py, run the tests that should notice, and list the bugs no test noticed.

    python tests/mutation.py [--jobs 2] [--only WORD]

Each mutant is a place where a bug would hurt users (auth, account isolation, path decoding,
ETag/304, gzip, HEAD, reload, size cap, validation, log redaction, settings, signals): the
text to find (it must occur exactly once) and what to put instead.  A mutant is "killed" when
the tests fail on it.  Survivors are printed with their reason; the closing note of issue 18
says which survivors are equivalent (no behaviour changes) and why.
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
MUTANTS: List[Mutant] = [
    # auth
    M("auth", "app.py", 'if token and " " not in token and "\\t" not in token:', "if token:"),
    M("auth", "app.py", 'raise Unauthorized("not a Bearer header")', "pass"),
    M("auth", "app.py", "if len(tokens) > 1:", "if len(tokens) > 2:"),
    M("auth", "app.py", 'if not token or b" " in token', 'if b" " in token'),
    M("auth", "app.py", "if len(spellings) > MAX_QUERY_TOKENS:", "if len(spellings) >= MAX_QUERY_TOKENS:"),
    M("auth", "app.py", "if 14 <= len(name) <= 36}", "if 15 <= len(name) <= 36}"),
    M("auth", "app.py", "if 14 <= len(name) <= 36}", "if 14 <= len(name) <= 35}"),
    M("auth", "app.py", "if len(escaped) > MAX_QUERY_TOKENS:", "if len(escaped) >= MAX_QUERY_TOKENS:"),
    M("auth", "app.py", "if len(escaped) > MAX_QUERY_TOKENS:", "if len(escaped) > MAX_QUERY_TOKENS + 1:"),
    M("auth", "app.py", "if len(spellings) > MAX_QUERY_TOKENS:", "if len(spellings) > MAX_QUERY_TOKENS + 1:"),
    M("auth", "app.py", '_latin1(text).replace(b"+", b" ")', "_latin1(text)"),
    M("auth", "app.py", 'if not rest or rest[0] in "=&":', "if True:"),
    M("auth", "app.py", "('' if why == \"no credential\"", "('' if why != \"no credential\""),
    M("auth", "store.py", "hashlib.sha256(token).digest())", "hashlib.sha256(token.strip()).digest())"),
    M("auth", "app.py", 'return text.encode("latin-1", "backslashreplace")', 'return text.encode("latin-1", "ignore")'),
    M("auth", "app.py", "tokens.add(_latin1(token.lstrip(\" \")))", "tokens.add(_latin1(token.strip()))"),
    M("auth", "store.py", 'if not _TOKEN.fullmatch(token):', "if False:"),
    # account isolation
    M("isolation", "app.py", "key = (account.token_sha256, path, name)", 'key = (b"", path, name)'),
    M("isolation", "app.py", "body = snapshot.lists[account.token_sha256, path] if name",
      "body = snapshot.lists[snapshot.store.accounts[0].token_sha256, path] if name"),
    M("isolation", "store.py", 'names: Dict[str, Dict[str, int]] = {"url_groups": {}, "queues": {}}',
      'names: Dict[str, Dict[str, int]] = _SHARED'),
    # path decoding
    M("path", "app.py", "if raw and unquote_to_bytes(_latin1(raw)).endswith(_latin1(path_info)):", "if raw:"),
    M("path", "app.py", "!= [_latin1(p) for p in parts[1:3]]:\n            raise NotFound()",
      "!= [_latin1(p) for p in parts[1:3]]:\n            pass"),
    M("path", "app.py", 'if b"/" in name:\n            raise NotFound()', 'if b"/" in name:\n            pass'),
    M("path", "app.py", "    if not name:\n        raise NotFound()", "    if False:\n        raise NotFound()"),
    M("path", "app.py", 'return path, name.decode("utf-8", "backslashreplace")',
      'return path, name.decode("utf-8", "replace")'),
    M("path", "app.py", 'for slash in ("", "/")}', 'for slash in ("",)}'),
    M("path", "app.py", '(raw[:-1] if raw.endswith("/") else raw).rpartition("/")', 'raw.rpartition("/")'),
    M("path", "app.py", "name = unquote_to_bytes(_latin1(segment))", "name = _latin1(segment)"),
    # ETag and 304
    M("etag", "app.py", '(tag[2:] if tag.startswith("W/") else tag) == etag', "tag == etag"),
    M("etag", "app.py", 'if tag == "*" or', "if"),
    M("etag", "app.py", "hashlib.blake2b(data, digest_size=16)", "hashlib.blake2b(b'%d' % len(data), digest_size=16)"),
    M("etag", "app.py", "self.identity.etag[:-1] + '-gzip\"'", "self.identity.etag"),
    M("etag", "app.py", 'return "304 Not Modified", list(chosen.not_modified), b""',
      'return "304 Not Modified", list(chosen.headers), b""'),
    M("etag", "app.py", 'cache = [("ETag", etag), ("Cache-Control", "private, no-cache"), ',
      'cache = [("ETag", etag), '),
    # gzip
    M("gzip", "app.py", "            return q > 0\n", "            return True\n"),
    M("gzip", "app.py", "star = q > 0", "star = True"),
    M("gzip", "app.py", "self.compressible = len(data) >= GZIP_MIN", "self.compressible = len(data) > GZIP_MIN"),
    M("gzip", "app.py", "                    q = 0.0", "                    q = 1.0"),
    M("gzip", "app.py", "if vary:\n", "if False:\n"),
    # HEAD and methods
    M("head", "app.py", 'if environ.get("REQUEST_METHOD") == "HEAD":\n            data = b""',
      'if environ.get("REQUEST_METHOD") == "HEADX":\n            data = b""'),
    M("head", "app.py", 'not in ("GET", "HEAD"):\n        raise MethodNotAllowed()\n    account',
      'not in ("GET", "HEAD", "POST"):\n        raise MethodNotAllowed()\n    account'),
    # reload
    M("reload", "store.py", "if not force and _stat(self.path) == self._state[0]:",
      "if _stat(self.path) == self._state[0]:"),
    M("reload", "store.py", "self._state = (signature or fault.signature, self._state[1],",
      "self._state = (_stat(self.path), self._state[1],"),
    M("reload", "store.py", "raw, signature = read(self.path, self.max_size)\n",
      "raw, signature = read(self.path, self.max_size)\n            self._state = (signature, self._state[1])\n"),
    M("reload", "store.py", "            _gc_pausers.discard(me)\n            gc.enable()",
      "            _gc_pausers.discard(me)"),
    M("reload", "store.py", "            _gc_pausers.clear()\n            gc.enable()",
      "            _gc_pausers.clear()"),
    M("reload", "store.py", "if self._pid != os.getpid() and not self._closed:", "if False:"),
    M("reload", "store.py", "if time.monotonic() >= self._next_check:", "if False:"),
    M("reload", "store.py", "os.register_at_fork(after_in_child=_after_fork_in_child)", "pass"),
    M("reload", "store.py", "wait = self.interval if self._pid == 0 else 0", "wait = self.interval"),
    M("reload", "store.py", '"serving 503 until it is valid" if self._state[1] is None else',
      '"serving 503 until it is valid" if self._state[1] is not None else'),
    M("reload", "store.py", "st.st_mtime_ns, st.st_ctime_ns)", "st.st_mtime_ns, 0)"),
    M("reload", "store.py", "if _signature(after) == judged and len(raw) == after.st_size:",
      "if _signature(after) == judged:"),
    M("reload", "store.py", "if _signature(after) == judged and len(raw) == after.st_size:",
      "if len(raw) == after.st_size:"),
    M("reload", "store.py", "        if data is None or data._closed:\n            return",
      "        if data is None:\n            return"),
    M("reload", "store.py", "if self._starting.setdefault(pid, me) != me:", "if False:"),
    # size cap
    M("size", "store.py", "if before.st_size > max_size:", "if before.st_size > max_size + 1:"),
    M("size", "store.py", "if total > limit:", "if total > limit + 1:"),
    M("size", "store.py", "min(limit - total + 1, _READ_CHUNK)", "_READ_CHUNK"),
    M("size", "app.py", "or int(digits) < 1:", "or int(digits) < 0:", tuple(SERVER)),
    # validation
    # validation: each rule once (the short ways and the checker both use it), mutated at its edges
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return type(value) is int and 0 <= value < MAX_SAFE_INTEGER"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER + 1"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return type(value) is int and -1 <= value <= MAX_SAFE_INTEGER"),
    M("validation", "store.py", "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
      "return isinstance(value, int) and 0 <= value <= MAX_SAFE_INTEGER"),
    M("validation", "store.py", "and _is_whole(updated) and created <= updated", "and _is_whole(updated)"),
    M("validation", "store.py", "and _is_whole(updated) and created <= updated",
      "and _is_whole(updated) and created < updated"),
    M("validation", "store.py", 'return type(value) is str and value != "" and value.isprintable()',
      'return type(value) is str and value.isprintable()'),
    M("validation", "store.py", 'return type(value) is str and value != "" and value.isprintable()',
      'return type(value) is str and value != ""'),
    M("validation", "store.py", "return type(value) is str and _GROUP_NAME.fullmatch(value) is not None",
      "return type(value) is str and _GROUP_NAME.match(value) is not None"),
    M("validation", "store.py", "and _is_whole(lag) and _is_text(name) and name not in seen",
      "and _is_text(name) and name not in seen"),
    M("validation", "store.py", "and _is_whole(lag) and _is_text(name) and name not in seen",
      "and _is_whole(lag) and _is_text(name)"),
    M("validation", "store.py", "if not (len(value) == 4 and _are_times(created, updated) and",
      "if not (len(value) == 4 and"),
    M("validation", "store.py", "if not (_is_text(name) and name not in named):", "if not _is_text(name):"),
    M("validation", "store.py", "if group and not _is_group_name(value):", "if group and not _is_text(value):"),
    M("validation", "store.py", "if created is not None and updated is not None and not _are_times(",
      "if False and not _are_times("),
    M("validation", "store.py", 'or not _is_http_url(value.get("url")):', ":"),
    M("validation", "store.py", 'len(value) == 5 + ("paused" in value)', "True"),
    M("validation", "store.py", 'return parts.scheme in ("http", "https")',
      'return parts.scheme in ("http", "https", "ftp")'),
    M("validation", "store.py", 'or len(value) != 1 + ("name" in value) or', "or"),
    M("validation", "store.py", "(type(value) is int and not -_TOO_LONG < value < _TOO_LONG)", "False"),
    M("validation", "store.py", "        seen.clear()\n        return self.each(", "        return self.each("),
    # the health check, --record's deadline, the file wrapper only where it keeps a reference
    M("wrapper", "app.py", 'or not str(getattr(file_wrapper, "__module__", "")).startswith(BY_REFERENCE):', ":"),
    M("wrapper", "app.py", 'BY_REFERENCE = ("waitress.",)', 'BY_REFERENCE = ("",)'),
    M("health", "store.py", "self._state[2]._replace(failed_at=time.time())", "self._state[2]",
      ("tests/test_health.py",)),
    M("health", "store.py", "version = hashlib.sha256(raw).hexdigest()", "version = hashlib.sha1(raw).hexdigest()",
      ("tests/test_health.py",)),
    M("health", "app.py", 'return _json_answer(HTTPStatus.SERVICE_UNAVAILABLE, document, [("Retry-After", "1")])',
      "return _json_answer(HTTPStatus.OK, document)", ("tests/test_health.py",)),
    M("health", "app.py", '    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):\n'
      "        raise MethodNotAllowed()\n    ready", "    ready", ("tests/test_health.py",)),
    M("record", "app.py", "    worker.join(timeout)\n", "    worker.join()\n", ("tests/test_record.py",)),
    M("record", "app.py", "return None  # urllib would send", "return super().redirect_request(*args)  #",
      ("tests/test_record.py",)),
    # log redaction and format
    M("log", "app.py", 'shown.append(name + "=[redacted]")', "shown.append(field)"),
    M("log", "app.py", '[A-Za-z0-9_.%-]{1,24}', "[A-Za-z0-9_.%-]{1,64}"),
    M("log", "app.py", "for field in fields[:LOGGED_QUERY_FIELDS]:", "for field in fields:"),
    M("log", "app.py", "path = _printable(raw[:1000])", "path = raw[:1000]"),
    M("log", "store.py", 'got = "a string of %d characters" % len(value) if type(value) is str else _show(value)',
      "got = _show(value)"),
    M("log", "app.py", "time.gmtime(created)", "time.localtime(created)", tuple(SERVER)),
    M("log", "app.py", 'raise Unauthorized("unknown token")',
      'raise Unauthorized("unknown token %r" % environ.get("HTTP_AUTHORIZATION"))'),
    M("log", "app.py", '"" if why is None else " (%s)" % why', '""'),
    # signing keys and --record
    M("keys", "app.py", "keys = account.signing_keys or (DEV_SIGNING_KEYS if self.store.fallback_used else None)",
      "keys = account.signing_keys or DEV_SIGNING_KEYS", tuple(QUICK + ["tests/test_keys.py"])),
    M("keys", "store.py", 'self.fault(_at(where, key), "expected a non-empty printable string")',
      'self.fault(_at(where, key), "expected a non-empty printable string, got %r" % item[key])',
      tuple(QUICK + ["tests/test_keys.py"])),
    M("keys", "app.py", "if body is None:\n        raise NoSigningKeys()", "if body is None:\n        raise NotFound()",
      tuple(QUICK + ["tests/test_keys.py"])),
    M("record", "store.py", "    loaded = parse(raw, path, token)\n", "    loaded = Store(())\n",
      ("tests/test_record.py",)),
    M("record", "app.py", "if key in store.FIELDS[kind]}", "}", ("tests/test_record.py",)),
    M("record", "app.py", "if len(raw) > max_size:", "if False:", ("tests/test_record.py",)),
    M("record", "app.py", 'kept.pop("name", None)', "pass", ("tests/test_record.py",)),
    M("log", "app.py", 'raise Unauthorized("tokens disagree" if b"" not in tokens else "malformed")',
      'raise Unauthorized("malformed")'),
    M("log", "app.py", "        if record.created < self._next:", "        if record.created > self._next:",
      ("tests/test_hostile.py",)),
    M("log", "app.py", "self._next = record.created + self._seconds", "pass", ("tests/test_hostile.py",)),
    M("log", "app.py", "elif access_logger.isEnabledFor(logging.INFO):", "elif False:"),
    # settings
    M("settings", "app.py", "if text is None and setting.env is not None and setting.env in environ:",
      "if setting.env is not None and setting.env in environ:", tuple(SERVER)),
    M("settings", "app.py", 'if text.startswith("Bearer "):', "if False:", tuple(SERVER)),
    M("settings", "app.py", "if not (text.isascii() and text.isdigit())", "if not text.isdigit()", tuple(SERVER)),
    M("settings", "app.py", "if not 0.01 <= value <= 3600:", "if not 0 <= value <= 3600:", tuple(SERVER)),
    M("settings", "app.py", "raise SystemExit(3) from None", "raise SystemExit(2) from None"),
    M("settings", "app.py", "fallback = DEV_TOKEN if args.check or is_loopback(settings[\"host\"]) else None",
      "fallback = DEV_TOKEN", tuple(SERVER)),
    # signals
    M("signals", "app.py", "        _handle_signals()  # before the first load",
      "        pass  # before the first load", tuple(SERVER)),
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
            source += "\n_SHARED: Dict[str, Dict[str, int]] = {'url_groups': {}, 'queues': {}}\n"
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
