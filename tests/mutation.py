"""A local mutation pass (not run by CI: it takes minutes): put one bug at a time into a copy of
app.py or store.py, run the tests that should notice, and list the bugs no test noticed.

    python tests/mutation.py [--jobs 2] [--only WORD]

Each mutant is a place where a bug would hurt users (auth, account isolation, paths and names,
ETag/304, HEAD, reload and forks, size cap, validation, writes, log redaction, settings,
signals): the text to find (it must occur exactly once) and what to put instead.  A mutant is
"killed" when the tests fail on it.  Survivors are printed with their reason.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, NamedTuple, Tuple

ROOT = Path(__file__).resolve().parent.parent
QUICK = [
    "tests/test_app.py",
    "tests/test_items.py",
    "tests/test_store.py",
    "tests/test_reload.py",
    "tests/test_fuzz.py",
    "tests/test_faults.py",
]
SERVER = ["tests/test_server.py"]


class Mutant(NamedTuple):
    area: str
    file: str
    find: str
    replace: str
    tests: Tuple[str, ...] = tuple(QUICK)


M = Mutant
WRITES = ("tests/test_writes.py",)
WRITER = ("tests/test_writer.py",)
DIFFERENTIAL = ("tests/test_differential.py",)
VERSIONS = ("tests/test_versions.py",)
SAFETY = ("tests/test_write_safety.py",)
BAD_DAYS = ("tests/test_bad_days.py",)
MUTANTS: List[Mutant] = [
    # auth
    M("auth", "app.py", 'raise Unauthorized("not a Bearer header")', "pass"),
    M("auth", "app.py", "if len(tokens) > 1:", "if len(tokens) > 2:"),
    M("auth", "app.py", 'if not token or b" " in token', 'if b" " in token'),
    M(
        "auth",
        "app.py",
        "if len(spellings) > MAX_QUERY_TOKENS:",
        "if len(spellings) >= MAX_QUERY_TOKENS:",
    ),
    M(
        "auth",
        "app.py",
        "if len(spellings) > MAX_QUERY_TOKENS:",
        "if len(spellings) > MAX_QUERY_TOKENS + 1:",
    ),
    M("auth", "app.py", '_latin1(value[1:]).replace(b"+", b" ")', "_latin1(value[1:])"),
    M("auth", "app.py", '        if not rest or rest[0] in "=&"\n', ""),
    M(
        "auth",
        "app.py",
        "        if sent:  # a credential came",
        "        if not sent:  # a credential came",
    ),
    M(
        "auth",
        "store.py",
        "hashlib.sha256(token).digest())",
        "hashlib.sha256(token.strip()).digest())",
    ),
    M(
        "auth",
        "app.py",
        'return text.encode("latin-1", "backslashreplace")',
        'return text.encode("latin-1", "ignore")',
    ),
    M(
        "auth",
        "app.py",
        'tokens.add(_latin1(token.lstrip(" ")))',
        "tokens.add(_latin1(token.strip()))",
    ),
    M("auth", "store.py", "    if _TOKEN.fullmatch(token):", "    if True:"),
    # account isolation
    M(
        "isolation",
        "app.py",
        "        account = loaded.find(token)\n",
        "        account = loaded.find(token) and loaded.accounts[0]\n",
    ),
    M(
        "isolation",
        "store.py",
        "            seen: dict[str, int] = {}\n",
        "            seen = _SHARED\n",
    ),
    M(
        "isolation",
        "store.py",
        "        account = store.by_digest.get(digest)\n",
        "        account = store.accounts[0]\n",
        WRITES + SAFETY,
    ),
    # paths and names
    M(
        "path",
        "app.py",
        'route = path_info[:-1] if path_info.endswith("/") else path_info',
        "route = path_info",
    ),
    M("path", "app.py", "if len(parts) > 3 and parts[3]:", "if len(parts) > 3:"),
    M(
        "path",
        "app.py",
        '    if not store.is_name(name):\n        raise BadRequest("bad request: a queue',
        '    if False:\n        raise BadRequest("bad request: a queue',
    ),
    M(
        "path",
        "app.py",
        "    if not store.is_name(name):  # it would make one",
        "    if False:  # it would make one",
        ("tests/test_items.py",) + WRITES,
    ),
    M(
        "path",
        "store.py",
        "return type(value) is str and _NAME.fullmatch(value) is not None",
        "return type(value) is str and _NAME.match(value) is not None",
    ),
    M(
        "path",
        "app.py",
        "            if handler is health:  # the one route without a token",
        "            if False:  # the one route without a token",
        ("tests/test_health.py",),
    ),
    # ETag and 304
    M("etag", "app.py", 'body.etag in tags or "W/" + body.etag in tags', "body.etag in tags"),
    M("etag", "app.py", 'if "*" in tags or body.etag', "if body.etag"),
    M(
        "etag",
        "app.py",
        "hashlib.blake2b(raw, digest_size=16)",
        "hashlib.blake2b(b'%d' % len(raw), digest_size=16)",
    ),
    M(
        "etag",
        "app.py",
        'return Answer("304 Not Modified", list(body.not_modified), b"")',
        'return Answer("304 Not Modified", list(body.headers), b"")',
    ),
    M(
        "etag",
        "app.py",
        "lambda: store.encode(document), NO_STORE)",
        "lambda: store.encode(document), PRIVATE)",
        tuple(QUICK + ["tests/test_keys.py"]),
    ),
    # HEAD and methods
    M(
        "head",
        "app.py",
        'data = b"" if environ.get("REQUEST_METHOD") == "HEAD" else answer.body',
        'data = b"" if environ.get("REQUEST_METHOD") == "HEADX" else answer.body',
    ),
    M(
        "head",
        "app.py",
        "if handler is None or not (writable or method in READS):",
        "if handler is None:",
    ),
    M("head", "app.py", 'head = ["HEAD"] if "GET" in methods else []', "head: List[str] = []"),
    M(
        "head",
        "app.py",
        "raise MethodNotAllowed(METHODS[route], writable, method)",
        "raise MethodNotAllowed((), writable, method)",
    ),
    M(
        "head",
        "app.py",
        "writes = [] if writable else [m for m in methods if m not in READS]",
        "writes: List[str] = []",
    ),
    # reload and forks
    M(
        "reload",
        "store.py",
        "if not force and self._version.unchanged(on_disk):",
        "if self._version.unchanged(on_disk):",
    ),
    M(
        "reload",
        "store.py",
        "self._set_failed(problem.signature, problem, started)",
        "self._set_failed(_stat(self.path), problem, started)",
    ),
    M(
        "settings",
        "app.py",
        '    if isinstance(exc, ValueError) or getattr(exc, "errno", None) == errno.EADDRNOTAVAIL:',
        "    if False:",
        ("tests/test_server.py",),
    ),
    M(
        "settings",
        "app.py",
        '    threading.Thread(target=write, name="qstash-lists banner", daemon=True).start()',
        "    write()",
        ("tests/test_server.py",),
    ),
    M(
        "settings",
        "app.py",
        '{" ", ":", "/"} & set(name)',
        '{" "} & set(name)',
        ("tests/test_server.py",),
    ),
    M(
        "settings",
        "app.py",
        "        if isinstance(exc, BrokenPipeError):\n            return 0\n",
        "",
        ("tests/test_server.py",),
    ),
    M(
        "settings",
        "app.py",
        "        pass  # a folder it may not enter, say: the problem names it",
        '        return _fail(["no such file"])',
        ("tests/test_server.py",),
    ),
    M(
        "validation",
        "store.py",
        "    if secret and type(value) in (str, int, float):",
        "    if False:",
    ),
    M("reload", "store.py", "os.register_at_fork(after_in_child=after_fork)", "pass"),
    M(
        "reload",
        "store.py",
        "        self._serve(fd, found.signature, store, found.raw, started)",
        "        self._serve(fd, found.signature, store, found.raw, time.time())",
        VERSIONS,
    ),
    M("reload", "store.py", "    for fd in list(_flocked):", "    for fd in []:"),
    M("reload", "store.py", "            _close(self._file)", "            pass"),
    M("reload", "store.py", "            _flocked.add(fd)  #", "            pass  #"),
    M("reload", "store.py", "        del data  # wait without holding it\n", ""),
    M(
        "reload",
        "store.py",
        "                self._start()\n                self.wake(force=False)",
        "                self._start()",
    ),
    M(
        "reload",
        "store.py",
        "                self.wake(force=False)",
        "                self.wake()",
        ("tests/test_workers.py",),
    ),
    M(
        "reload",
        "store.py",
        "force = FORCE in receive.recv(4096)",
        "force = bool(receive.recv(4096))",
        ("tests/test_workers.py",),
    ),
    M(
        "reload",
        "store.py",
        "        if self._forked:\n            self._start_in_child()\n        # Both are what stat says",
        "        # Both are what stat says",
    ),
    M(
        "reset",
        "app.py",
        'return "gunicorn without --preload", "add --preload"',
        "pass",
        ("tests/test_workers.py",),
    ),
    M(
        "reset",
        "app.py",
        "SystemExit(UWSGI_APP_FAILED if lazy_uwsgi",
        "SystemExit(BOOT_FAILED if lazy_uwsgi",
        ("tests/test_workers.py",),
    ),
    M(
        "reload",
        "app.py",
        "uwsgi.post_fork_hook = store.after_fork if",
        "_ = store.after_fork if",
        ("tests/test_workers.py",),
    ),
    M(
        "reload",
        "store.py",
        "        if self._version.store is None:\n            logger.error",
        "        if self._version.store is not None:\n            logger.error",
    ),
    M(
        "reload",
        "store.py",
        "st.st_mtime_ns, st.st_ctime_ns)",
        "st.st_mtime_ns, 0)",
        ("tests/test_versions.py", "tests/test_reload.py"),
    ),
    M(
        "reload",
        "store.py",
        "if _rewritten(before, after) or len(raw) != after.st_size:",
        "if _rewritten(before, after):",
    ),
    M(
        "reload",
        "store.py",
        "if _rewritten(before, after) or len(raw) != after.st_size:",
        "if len(raw) != after.st_size:",
    ),
    M(
        "reload",
        "store.py",
        "            if data is None or data._closed:\n                return",
        "            if data is None:\n                return",
    ),
    M("reload", "store.py", "        if first == self._problem:\n            return\n", ""),
    M(
        "reload",
        "store.py",
        "            if _stat(self.path) != version.signature:  # changed since",
        "            if False:  # changed since",
        ("tests/test_health.py", "tests/test_reload.py"),
    ),
    M("reload", "store.py", "kind = _KINDS.get(stat.S_IFMT(os.stat(path).st_mode))", "kind = None"),
    # size cap
    M("size", "store.py", "if before.st_size > max_size:", "if before.st_size > max_size + 1:"),
    M("size", "store.py", "if total > limit:", "if total > limit + 1:"),
    M("size", "store.py", "min(limit - total + 1, _READ_CHUNK)", "_READ_CHUNK"),
    M("size", "app.py", "_LARGEST_SIZE = 1 << 32", "_LARGEST_SIZE = 1 << 40", tuple(SERVER)),
    # validation: each rule once, mutated at its edges
    M(
        "validation",
        "store.py",
        "for key in (key for key in required if key not in value):",
        "for key in ():",
    ),
    M("validation", "store.py", "if digests.setdefault(digest, i) != i:", "if False:"),
    M(
        "validation",
        "store.py",
        "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
        "return type(value) is int and 0 <= value < MAX_SAFE_INTEGER",
    ),
    M(
        "validation",
        "store.py",
        "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
        "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER + 1",
    ),
    M(
        "validation",
        "store.py",
        "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
        "return type(value) is int and -1 <= value <= MAX_SAFE_INTEGER",
    ),
    M(
        "validation",
        "store.py",
        "return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER",
        "return isinstance(value, int) and 0 <= value <= MAX_SAFE_INTEGER",
    ),
    M(
        "validation",
        "store.py",
        'elif key == "updatedAt" and is_whole(values[0]) and values[0] > found:',
        "elif False:",
    ),
    M(
        "validation",
        "store.py",
        'elif key == "updatedAt" and is_whole(values[0]) and values[0] > found:',
        'elif key == "updatedAt" and is_whole(values[0]) and values[0] >= found:',
    ),
    M(
        "validation",
        "store.py",
        'return type(value) is str and value != "" and value.isprintable()',
        "return type(value) is str and value.isprintable()",
    ),
    M(
        "validation",
        "store.py",
        'return type(value) is str and value != "" and value.isprintable()',
        'return type(value) is str and value != ""',
    ),
    M(
        "validation",
        "store.py",
        "        elif seen.setdefault(value, i) != i:\n",
        "        elif False:\n",
    ),
    M(
        "validation",
        "store.py",
        "    name: str = _rule(NAME)\n    parallelism",
        "    name: str = _rule(TEXT)\n    parallelism",
    ),
    M(
        "validation",
        "store.py",
        "if type(value) is dict and _KEY_SETS[kind][0] <= value.keys() <= _KEY_SETS[kind][1]:",
        "if type(value) is dict:",
    ),
    M(
        "validation",
        "store.py",
        "if type(value) is dict and _KEY_SETS[kind][0] <= value.keys() <= _KEY_SETS[kind][1]:",
        "if type(value) is dict and _KEY_SETS[kind][0] <= value.keys():",
    ),
    M("validation", "store.py", "    if len(value) < len(pairs):", "    if False:"),
    M(
        "validation",
        "store.py",
        'url: str = _rule(HTTP_URL, "", required=True)',
        'url: str = _rule(TEXT, "", required=True)',
    ),
    M(
        "validation",
        "store.py",
        "    parallelism: int = _rule(WHOLE)\n",
        "    parallelism: int = _rule(Rule(lambda v: True, ''))\n",
    ),
    M(
        "validation",
        "store.py",
        'return parts.scheme in ("http", "https")',
        'return parts.scheme in ("http", "https", "ftp")',
    ),
    M(
        "validation",
        "store.py",
        "paused: bool = _rule(FLAG, False)",
        "paused: bool = _rule(Rule(lambda v: True, ''), False)",
    ),
    M("validation", "store.py", 'and text[closing : closing + 1] in ("]", "}")', ""),
    M(
        "validation",
        "store.py",
        "    if not text or text.isspace():  # (strip would copy the whole file)\n",
        "    if False:\n",
    ),
    # writes
    M(
        "writes",
        "store.py",
        "                store = self._load_version(held.fd, found, started)\n",
        "                store = cast(Store, self._version.store)\n",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "if not force and version.failed_at is None and version.has_bytes(found.raw):",
        "if not force and version.store is not None:",
        ("tests/test_writes.py", "tests/test_writer.py"),
    ),
    M("writes", "store.py", "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", "pass", WRITES),
    M(
        "writes",
        "store.py",
        "                if _same_file(os.fstat(held.fd), held.stat) and held.leads_to(path):",
        "                if True or held.leads_to(path):",
        WRITES,
    ),
    M("writes", "store.py", "os.fchmod(fd, stat.S_IMODE(old.st_mode))", "pass", WRITES),
    M(
        "writes",
        "store.py",
        "except OSError as exc:  # ENOLCK",
        "except ValueError as exc:  # ENOLCK",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "for uid, gid in ((-1, old.st_gid), (old.st_uid, -1)):",
        "for uid, gid in ((old.st_uid, old.st_gid),):",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "        return os.path.realpath(path) == self.target and _same_file(on_disk, self.stat)",
        "        return _same_file(on_disk, self.stat)",
        ("tests/test_writer.py",),
    ),
    M(
        "writes",
        "store.py",
        '        if new.renamed:\n            temporary = ""',
        '        if not new.renamed:\n            temporary = ""',
        WRITER,
    ),
    M(
        "writes",
        "store.py",
        "        os.fsync(fd)\n        new = _Temporary",
        "        new = _Temporary",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "        if temporary:\n            with",
        "        if False:\n            with",
        WRITES + SAFETY,
    ),
    M(
        "writes",
        "store.py",
        "if self.writable and _stat(self.path) != self._version.signature:",
        "if False:",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "                if again is None or again.raw != found.raw:\n",
        "                if again is None:\n",
        VERSIONS,
    ),
    M(
        "writes",
        "store.py",
        "if renamed and on_disk == self._version.signature:",
        "if renamed:",
        WRITES + VERSIONS,
    ),
    M(
        "writes",
        "store.py",
        "self._serve(new.fd, signature, fresh, data, started)",
        "self._serve(new.fd, found.signature, fresh, data, started)",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "queue, updated_at=max(now, queue.created_at), parallelism=parallelism",
        "queue, created_at=now, parallelism=parallelism",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "paused = queue.paused if paused is None else paused",
        "paused = bool(paused) if paused is None else paused",
        ("tests/test_sdks.py",) + WRITES,
    ),
    M("writes", "store.py", "    if not kept:\n", "    if False:\n", WRITES),
    M(
        "writes",
        "store.py",
        "where = {(e.name, e.url if e.name is None else None)",
        "where = {(e.name, e.url)",
        WRITES,
    ),
    M(
        "auth",
        "app.py",
        '    here = ("http://127.0.0.1:", "http://0.0.0.0:")',
        '    here = ("http://127.",)',
        ("tests/test_server.py",),
    ),
    M(
        "auth",
        "app.py",
        "if account.signing_keys not in (None, DEV_SIGNING_KEYS):",
        "if False:",
        ("tests/test_server.py",),
    ),
    M(
        "writes",
        "store.py",
        "parallelism = 1 if parallelism is None else parallelism",
        "parallelism = 2 if parallelism is None else parallelism",
        WRITES,
    ),
    M(
        "writes",
        "store.py",
        "    parallelism = 1 if parallelism is None else parallelism\n",
        "",
        WRITES,
    ),
    M(
        "writes",
        "app.py",
        "lambda v: v is None or (store.is_whole(v) and v >= 1)",
        "lambda v: v is None or store.is_whole(v)",
        WRITES,
    ),
    # issue 36: web pages, rebinding, the lock, hand edits, temporary files, accounts, bodies,
    # limits
    M(
        "safety",
        "app.py",
        'return environ.get("HTTP_ORIGIN") is not None or site',
        "return site",
        SAFETY,
    ),
    M(
        "safety",
        "app.py",
        'or site in ("cross-site", "same-site")',
        "or False",
        SAFETY,
    ),
    M(
        "safety",
        "app.py",
        '            if not _host_is_local(environ.get("HTTP_HOST"), self.allowed_hosts):',
        "            if False:",
        SAFETY,
    ),
    M("safety", "app.py", "or bool(ipaddress.ip_address(name))", "or False", SAFETY),
    M(
        "safety",
        "app.py",
        '            or name.endswith(".localhost")\n            or name in allowed\n',
        '            or name.endswith(".localhost")\n',
        SAFETY,
    ),
    M(
        "safety",
        "store.py",
        "                if time.monotonic() >= deadline:\n",
        "                if False:\n",
        SAFETY,
    ),
    M("safety", "store.py", "LOCK_TIMEOUT = 1.0", "LOCK_TIMEOUT = 10.0", SAFETY),
    M(
        "safety",
        "store.py",
        "                if not held.leads_to(self.path):\n",
        "                if False:\n",
        ("tests/test_write_safety.py", "tests/test_writer.py"),
    ),
    M(
        "safety",
        "store.py",
        '        fd, temporary = tempfile.mkstemp(\n            prefix=".%s." % name, suffix=".qstash-lists-tmp", dir=directory or "."\n        )',
        '        temporary = os.path.join(directory or ".", ".%s.qstash-lists-tmp" % name)\n        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)',
        SAFETY,
    ),
    M("safety", "store.py", "    if _TWICE in value:\n", "    if False:\n", SAFETY),
    M(
        "safety",
        "app.py",
        "(shown if shown.isprintable() else json.dumps(value))[:60]",
        "shown[:60]",
        SAFETY,
    ),
    M(
        "safety",
        "store.py",
        "if len(accounts) > 1 and size > max(share, len(account.lines)):",
        "if False:",
        SAFETY,
    ),
    M(
        "safety",
        "app.py",
        "lambda v: store.is_name(v) and len(v) <= MAX_NAME",
        "lambda v: store.is_name(v)",
        SAFETY,
    ),
    M(
        "safety",
        "store.py",
        '    names = {g["name"] for g in gone if "url" not in g}\n',
        '    names = {g.get("name") for g in gone}\n',
        SAFETY + WRITES,
    ),
    # issue 37: a write costs what it changes, writes that wait go together, another process reuses
    # what it keeps
    M(
        "writer",
        "store.py",
        "                if self.stuck or time.monotonic() >= stuck_at:\n",
        "                if time.monotonic() >= stuck_at:\n",
        WRITER,
    ),
    M(
        "writer",
        "store.py",
        "                if self.stuck or time.monotonic() >= stuck_at:\n",
        "                if self.stuck:\n",
        WRITER,
    ),
    M(
        "writes",
        "store.py",
        "        if changed is account:\n            return did",
        "        if False:\n            return did",
        WRITES,
    ),
    M("writes", "app.py", "if length > MAX_BODY:", "if False:", WRITES),
    M(
        "baddays",
        "app.py",
        "            self.service.log(environ, DROPPED, 0, started)\n",
        "",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "            self._resets[digest] += log\n",
        "",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "threading.BoundedSemaphore(delays)",
        "threading.BoundedSemaphore(max(1, delays))",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "        store.encode(document)  # NaN",
        "        pass  # NaN",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "and len(length) <= 9 else None",
        "else None",
        BAD_DAYS,
    ),
    M(
        "writes",
        "app.py",
        '        raise _no_such(noun, asked.name or "") from None',
        '        return _done("nothing")',
        WRITES,
    ),
    M(
        "writes",
        "app.py",
        '            (adding and "url" not in given)\n            or not given',
        "            not given",
        WRITES,
    ),
    # the health check, the file wrapper only where it keeps a reference
    M(
        "wrapper",
        "app.py",
        "    if data and _by_waitress(environ):",
        '    if data and environ.get("wsgi.file_wrapper") is not None:',
    ),
    M("wrapper", "app.py", 'BY_REFERENCE = ("waitress.",)', 'BY_REFERENCE = ("",)'),
    M(
        "health",
        "store.py",
        "self._version, signature=signature, judged_at=judged_at, failed_at=since",
        "self._version, signature=signature, judged_at=judged_at, failed_at=None",
        ("tests/test_health.py",),
    ),
    M(
        "health",
        "store.py",
        "else hashlib.sha256(self.raw).hexdigest()",
        "else hashlib.sha1(self.raw).hexdigest()",
        ("tests/test_health.py",),
    ),
    M(
        "health",
        "app.py",
        'HTTPStatus.SERVICE_UNAVAILABLE, document, [("Retry-After", "1")])',
        "HTTPStatus.OK, document)",
        ("tests/test_health.py",),
    ),
    M(
        "health",
        "app.py",
        '    ("GET", HEALTH_PATH): health,',
        '    ("GET", HEALTH_PATH): health,\n    ("POST", HEALTH_PATH): health,',
        ("tests/test_health.py",),
    ),
    # log redaction, format, and a log stream that does not keep up
    M("log", "app.py", 'name + "=[redacted]" if equals', "field if equals"),
    M("log", "app.py", "[A-Za-z0-9_.%-]{1,24}", "[A-Za-z0-9_.%-]{1,64}"),
    M("log", "app.py", "for field in fields[:LOGGED_QUERY_FIELDS]", "for field in fields"),
    M(
        "log",
        "store.py",
        'got = "a string of %d characters" % len(value) if type(value) is str else _show(value, True)',
        "got = _show(value)",
    ),
    M(
        "log",
        "app.py",
        "time.gmtime(created)",
        "time.localtime(created)",
        tuple(SERVER) + ("tests/test_health.py",),
    ),
    M(
        "log",
        "app.py",
        'raise Unauthorized("unknown token")',
        'raise Unauthorized("unknown token %r" % environ.get("HTTP_AUTHORIZATION"))',
    ),
    M("log", "app.py", '"" if self.answer.why is None else " (%s)" % self.answer.why', '""'),
    M(
        "log",
        "app.py",
        'raise Unauthorized("tokens disagree" if b"" not in tokens else "malformed")',
        'raise Unauthorized("malformed")',
    ),
    M(
        "log",
        "app.py",
        'logging.getLogger("waitress.queue").addFilter(_yield_to_workers)',
        "pass",
        ("tests/test_hostile.py",),
    ),
    M(
        "log",
        "app.py",
        "    time.sleep(0)  # the GIL to the workers that wait for it\n    return False",
        "    time.sleep(0)  # the GIL to the workers that wait for it\n    return True",
        ("tests/test_hostile.py",),
    ),
    M(
        "log",
        "app.py",
        "if self._writer.reached.wait(ACCESS_LOG_CLOSE_TIMEOUT):",
        "if self._writer.reached.wait():",
        tuple(SERVER),
    ),
    M(
        "log",
        "app.py",
        "if self.access_log and access_logger.isEnabledFor(logging.INFO):",
        "if False:",
    ),
    M(
        "log",
        "app.py",
        "    data = store.encode(document)\n",
        "    data = json.dumps(document).encode()\n",
        WRITES,
    ),
    # signing keys
    M(
        "keys",
        "app.py",
        "if keys is None and asked.account.token_sha256 == _DEV_DIGEST:",
        "if keys is None:",
        tuple(QUICK + ["tests/test_keys.py"]),
    ),
    M(
        "keys",
        "app.py",
        "        keys = DEV_SIGNING_KEYS\n",
        "        keys = None\n",
        tuple(QUICK + ["tests/test_keys.py"]),
    ),
    M(
        "keys",
        "store.py",
        'self.problem(where, None, key, "expected a non-empty printable string")',
        'self.problem(where, None, key, "expected a non-empty printable string, got %r" % value[key])',
        tuple(QUICK + ["tests/test_keys.py"]),
    ),
    # settings
    M(
        "settings",
        "app.py",
        "if text is None and setting.env is not None and setting.env in environ:",
        "if setting.env is not None and setting.env in environ:",
        tuple(SERVER),
    ),
    M(
        "settings",
        "app.py",
        '    if text.startswith("Bearer "):',
        "    if False:",
        tuple(SERVER),
    ),
    M(
        "settings",
        "app.py",
        "    return text.isascii() and text.isdigit() and len(text) <= most",
        "    return text.isdigit()",
        tuple(SERVER),
    ),
    M(
        "settings",
        "app.py",
        "not 0.01 <= float(text) <= 3600:",
        "not 0 <= float(text) <= 3600:",
        tuple(SERVER),
    ),
    M(
        "settings",
        "app.py",
        "BOOT_FAILED, UWSGI_APP_FAILED = 3, 22",
        "BOOT_FAILED, UWSGI_APP_FAILED = 2, 22",
    ),
    M(
        "settings",
        "app.py",
        "    return DEV_TOKEN if is_loopback(host) else None",
        "    return DEV_TOKEN",
        tuple(SERVER),
    ),
    M(
        "settings",
        "app.py",
        '            if text == "":\n',
        "            if False:\n",
        tuple(SERVER),
    ),
    M("settings", "app.py", "_whole(1, MAX_THREADS)", "_whole(1, 10**9)", tuple(SERVER)),
    M(
        "settings",
        "app.py",
        'return text.lower() in ("1", "true", "yes", "on")',
        "return True",
        WRITES,
    ),
    M(
        "settings",
        "app.py",
        "    mode = parser.add_mutually_exclusive_group()\n",
        "    mode = parser\n",
        tuple(SERVER),
    ),
    # signals
    M(
        "signals",
        "app.py",
        "        signal.signal(signum, _stop)\n",
        "        pass\n",
        tuple(SERVER),
    ),
    M(
        "signals",
        "app.py",
        "    raise SystemExit(0)\n\n\ndef _wake_all",
        "    raise KeyboardInterrupt\n\n\ndef _wake_all",
        tuple(SERVER),
    ),
    M(
        "signals",
        "app.py",
        "        signal.signal(signal.SIGHUP, _wake_all)\n    if args.check:",
        "        pass\n    if args.check:",
        tuple(SERVER),
    ),
    # a version is what the file holds (issue 49): racy versions, the writer's read, threads, sizes,
    # the bind mount, a save before the rename, a child's own wake-up pair
    M(
        "versions",
        "store.py",
        "return self.judged_at - max(on_disk.mtime_ns, on_disk.ctime_ns) / 1e9 >= RACY_SECONDS",
        "return True",
        VERSIONS,
    ),
    M(
        "versions",
        "store.py",
        "        return self.store is not None and raw == self.raw",
        "        return self.store is not None",
        VERSIONS + DIFFERENTIAL,
    ),
    M(
        "versions",
        "store.py",
        "            self.since, busy = time.monotonic(), False\n",
        "            self.since, busy = time.monotonic(), self.stuck\n",
        WRITER,
    ),
    M("versions", "store.py", "    if exc.errno == errno.EBUSY:", "    if False:", VERSIONS),
    M(
        "versions",
        "store.py",
        "            data._pair()  # a wake in the child",
        "            pass  # a wake in the child",
        ("tests/test_store.py",),
    ),
    # --run stops everything it started; the plugin's put-back (issue 51)
    M(
        "runner",
        "app.py",
        "os.setpgid(0, 0)\n",
        "\n",
        ("tests/test_plugin.py",),
    ),
    M(
        "runner",
        "app.py",
        "        _end_group(child.pid, grace, prog)\n",
        "        pass\n",
        ("tests/test_plugin.py",),
    ),
    M(
        "runner",
        "app.py",
        "    if _signals:  # a stop before it runs\n        return 128 + _signals[0]",
        "    if False:\n        return 0",
        ("tests/test_plugin.py",),
    ),
    M(
        "runner",
        "app.py",
        "    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)",
        "    os._exit(2)",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "    clients = app.clients_token(loaded, token, source)",
        "    clients = token",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "        self._double.initial = self._data.replace(raw)  # what a reset puts back\n",
        "        pass\n",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "        self._double.initial = self._data.replace(raw)  # what a reset puts back\n",
        "        self._data.replace(raw)\n",
        ("tests/test_plugin.py",),
    ),
    M(
        "baddays",
        "app.py",
        "        self.initial: Optional[store.Store] = service.source.current()\n",
        "        self.initial: Optional[store.Store] = None\n",
        BAD_DAYS + ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "        elsewhere = _elsewhere or ([] if _before else _reaching(os.environ, since))",
        "        elsewhere = _elsewhere",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "    except (TypeError, ValueError) as exc:  # a date",
        "    except ValueError as exc:  # a date",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "app.py",
        '    for _noted in [signal.SIGINT] + [signal.SIGHUP] * hasattr(signal, "SIGHUP"):',
        "    for _noted in [signal.SIGINT]:",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "app.py",
        "    if signal.SIGINT in _signals:  # Ctrl-C while it started",
        "    if _signals:  # Ctrl-C while it started",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "app.py",
        '        env.pop("QSTASH_DEV", None)  #',
        "        pass  #",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "app.py",
        'for name in ("SIGPIPE", "SIGXFSZ"):',
        "for name in ():",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "    os.register_at_fork(after_in_child=_forget_sweepers)",
        "    pass",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "        self._double.clear()\n",
        "        pass\n",
        ("tests/test_plugin.py",),
    ),
    M(
        "watcher",
        "app.py",
        "                _end_group(int(said[0]), grace, prog)",
        "                pass",
        ("tests/test_plugin.py",),
    ),
    M(
        "watcher",
        "app.py",
        "            shutil.rmtree(folder, ignore_errors=True)",
        "            pass",
        ("tests/test_plugin.py",),
    ),
    M(
        "runner",
        "app.py",
        "        os.killpg(group, signal.SIGKILL)\n        _killed(prog, grace)",
        "        pass",
        ("tests/test_plugin.py",),
    ),
    M(
        "runner",
        "app.py",
        "        signal.signal(_noted, lambda signum, frame: _signals.append(signum))",
        "        pass",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        "            pytest.fail(elsewhere[0], pytrace=False)",
        "            pass",
        ("tests/test_plugin.py",),
    ),
    M(
        "plugin",
        "testing.py",
        '                environ["HTTP_AUTHORIZATION"] = "Bearer " + self.first',
        "                pass",
        ("tests/test_plugin.py",),
    ),
    # bad days on demand (issue 52)
    M("baddays", "app.py", "if fault.method in (None, method) and", "if True and", BAD_DAYS),
    M(
        "baddays",
        "app.py",
        "                    if fault.times > 1:",
        "                    if False:",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        'prefix, limit, reset = "RateLimit-", 500',
        'prefix, limit, reset = "Burst-RateLimit-", 500',
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "            self.clear(digest)  # once the account is put back",
        "            pass  # once the account is put back",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        '{field.partition("=")[0] for field in query',
        "{field for field in query",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "if route in (RESET_PATH, FAULTS_PATH, REQUESTS_PATH):  # a TestDouble",
        "if False:  # a TestDouble",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "len(entries) > REQUEST_LOG or ",
        "",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "    if fault.status is None and not (fault.drop or fault.delay):",
        "    if False:",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        '    environ["wsgi.input"] = io.BytesIO(raw)\n',
        "",
        BAD_DAYS,
    ),
    M(
        "baddays",
        "app.py",
        "            self.clear(digest, log=False)",
        "            self.clear(digest)",
        BAD_DAYS,
    ),
    M("baddays", "app.py", "        if key not in FAULT_KEYS:", "        if False:", BAD_DAYS),
    M(
        "baddays",
        "app.py",
        "faults = self._faults.setdefault(digest, [])",
        "faults = self._faults.setdefault(b'', [])",
        BAD_DAYS,
    ),
    # the writer rebuilt (issue 42): exact reuse, the lock on what is renamed, refusals, signals
    M(
        "reuse",
        "store.py",
        "    return before.st_ctime_ns != after.st_ctime_ns and after.st_nlink > 0",
        "    return before.st_ctime_ns != after.st_ctime_ns",
        WRITER,
    ),
    M(
        "writer",
        "store.py",
        "            busy = True\n",
        "            busy = False\n",
        WRITER,
    ),
    M(
        "writer",
        "store.py",
        "                self.since, self.stuck = None, busy\n",
        "                self.since, self.stuck = None, False\n",
        WRITER,
    ),
    M(
        "writer",
        "store.py",
        "        if len(data) > self.max_size:\n            raise _too_large(self.path, len(data), self.max_size)\n        with _new_version(",
        "        if False:\n            raise _too_large(self.path, len(data), self.max_size)\n        with _new_version(",
        WRITER,
    ),
    M(
        "writer",
        "store.py",
        "            target = os.path.realpath(path)\n            fd = _open(target)",
        '            target = locals().get("target") or os.path.realpath(path)\n            fd = _open(target)',
        WRITER,
    ),
    M(
        "writer",
        "store.py",
        '            cast(socket.socket, self._wake_send).send(sent, getattr(socket, "MSG_NOSIGNAL", 0))',
        '            with threading.Lock():\n                cast(socket.socket, self._wake_send).send(sent, getattr(socket, "MSG_NOSIGNAL", 0))',
        WRITER,
    ),
    M(
        "writer",
        "app.py",
        "    if isinstance(exc, store.TooLarge):\n        return InsufficientStorage()",
        "    if False:\n        return InsufficientStorage()",
        WRITES,
    ),
    M(
        "loading",
        "store.py",
        "if type(value) is not dict or not required <= value.keys() <= known:",
        "if type(value) is not dict or not required <= value.keys():",
    ),
    M(
        "loading",
        "store.py",
        '            elif key == "name" and seen.setdefault(found, i) != i:',
        "            elif False:",
    ),
]


def run(mutant: Mutant, python: str) -> Tuple[Mutant, bool, str]:
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder)
        for name in (
            "app.py",
            "store.py",
            "testing.py",
            "pyproject.toml",
            "data.json",
            "README.md",
        ):
            shutil.copy(ROOT / name, copy / name)
        shutil.copytree(ROOT / "tests", copy / "tests")
        if (ROOT / "docs").exists():
            shutil.copytree(ROOT / "docs", copy / "docs")
        source = (copy / mutant.file).read_text()
        if source.count(mutant.find) != 1:
            return mutant, False, "the text occurs %d times" % source.count(mutant.find)
        source = source.replace(mutant.find, mutant.replace)
        if "_SHARED" in mutant.replace:
            source += "\n_SHARED: dict[str, int] = {}\n"
        (copy / mutant.file).write_text(source)
        # The package qstash_lists (a pytester run's plugin, python -m qstash_lists.app) is the
        # mutated copy too, not the checkout that the editable install maps it to.
        (copy / ".mutant").mkdir()
        (copy / ".mutant" / "qstash_lists").symlink_to(copy)
        try:
            done = subprocess.run(
                [python, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider"]
                + list(mutant.tests),
                cwd=str(copy),
                env=dict(os.environ, PYTHONPATH=str(copy / ".mutant")),
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            return mutant, True, "timed out"
        last = (done.stdout.strip().splitlines() or [""])[-1]
        return mutant, done.returncode != 0, last


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.only in m.area or args.only in m.find]
    killed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for mutant, caught, last in pool.map(lambda m: run(m, sys.executable), chosen):
            killed += caught
            print(
                "%-8s %-10s %s: %r -> %r  (%s)"
                % (
                    "killed" if caught else "SURVIVED",
                    mutant.area,
                    mutant.file,
                    mutant.find[:60],
                    mutant.replace[:40],
                    last,
                ),
                flush=True,
            )
    print(
        "mutation score: %d of %d killed (%.0f%%)"
        % (killed, len(chosen), 100.0 * killed / max(1, len(chosen)))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
