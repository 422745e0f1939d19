"""The data behind qstash-lists: load, validate and watch the JSON data file.

The file holds one account (``{"urlGroups": [...], "queues": [...]}``, whose token the
caller supplies) or several (``{"accounts": [{"token": ...}, ...]}``).  It becomes
dataclasses, or a :class:`DataError` that lists every fault with its exact place.
:func:`read` never blocks, and :class:`DataFile` keeps the last good snapshot of a file
that people edit while it is served.  Nothing here knows about HTTP.  From the shell:
``python app.py --check --data FILE``.
"""

import contextlib
import gc
import hashlib
import json
import logging
import os
import re
import stat
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_string  # the json module's string escaper
from operator import itemgetter
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
    cast,
)
from urllib.parse import urlsplit

__all__ = ["Account", "DataError", "DataFile", "Endpoint", "FileChanging", "Queue", "Status", "Store",
           "TokenMissing", "UrlGroup", "check_token", "encode", "load", "megabytes", "parse", "read", "record",
           "wake_all"]

logger = logging.getLogger("qstash_lists")

#: The shipped data.json (``python app.py --example`` prints it): a starter file of one account.
EXAMPLE: Dict[str, Any] = {"urlGroups": [
    {"createdAt": 1700000000000, "updatedAt": 1700000500000, "name": "orders", "endpoints": [
        {"name": "billing", "url": "https://billing.example.com/hooks/orders"},
        {"name": "shipping", "url": "https://shipping.example.com/hooks/orders"}]},
    {"createdAt": 1700001000000, "updatedAt": 1700001000000, "name": "signups",
     "endpoints": [{"url": "https://crm.example.com/webhooks/signup"}]},
], "queues": [
    {"createdAt": 1700000000000, "updatedAt": 1700000000000, "name": "emails", "parallelism": 2, "lag": 0,
     "paused": False},
    {"createdAt": 1700002000000, "updatedAt": 1700003000000, "name": "reports", "parallelism": 1, "lag": 12,
     "paused": True},
]}
#: A data file larger than this is refused (``--max-size``, ``QSTASH_LISTS_MAX_SIZE``).  Loading
#: takes several times a file's size in memory (tests/benchmark.py measures it).
DEFAULT_MAX_SIZE = 64 * 1024 * 1024
#: An integer of more digits than this is refused as "too long", the same on every Python
#: (3.11 and later refuse over 4,300 digits while parsing; earlier ones parse any length).
MAX_DIGITS = 20
_TOO_LONG = 10**MAX_DIGITS
#: The largest integer a JavaScript client reads back exactly.
MAX_SAFE_INTEGER = 2**53 - 1
_YEAR_2001_MS = 978307200000
#: How many faults one report lists before it stops counting them out.
MAX_FAULTS = 50
#: How often a file that changes while it is read is read again, in one look, before giving up.
READ_ATTEMPTS = 4
_READ_CHUNK = 1 << 24
_GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TOKEN = re.compile(r"[!-~]+")  # visible ASCII: what fits in "Bearer <token>"
#: The fields a data file holds of each kind of object (``--record`` keeps these of QStash's answers).
FIELDS = {"urlGroups": ("createdAt", "updatedAt", "name", "endpoints"), "endpoints": ("url", "name"),
          "queues": ("createdAt", "updatedAt", "name", "parallelism", "lag", "paused")}
_QUEUE_FIELDS = itemgetter("createdAt", "updatedAt", "name", "parallelism", "lag")
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFDIR: "a directory",
          stat.S_IFSOCK: "a socket", stat.S_IFBLK: "a block device"}
_GROUP_FIELDS = itemgetter("createdAt", "updatedAt", "name", "endpoints")

T = TypeVar("T")
#: What tells one version of a file from another: inode, device, size, mtime and ctime.  A
#: writer can set the mtime back (``cp -p``, ``tar``, reproducible builds), never the ctime.
Signature = Tuple[int, int, int, int, int]


class DataError(Exception):
    """A data file that cannot be served: ``faults``, one line each, and the ``signature`` judged (see read)."""

    def __init__(self, faults: List[str], signature: Optional[Signature] = None) -> None:
        super().__init__("\n".join(faults))
        self.faults = faults
        self.signature = signature


class TokenMissing(DataError):
    """A file in the one-account form, loaded without a token for that account."""


class FileChanging(DataError):
    """The file changed each time it was read: a writer is busy with it."""


# Endpoint, UrlGroup and Queue are not frozen (a frozen dataclass sets each field through
# object.__setattr__, which at 100,000 queues costs about as much as parsing the file), but
# nothing changes them once loaded.  Each writes itself as the API's compact JSON (see encode).


@dataclass
class Endpoint:
    """One endpoint of a URL group."""

    url: str
    name: Optional[str] = None

    def to_json(self) -> str:
        """Return the API's JSON object; ``name`` is left out when there is none."""
        if self.name is None:
            return '{"url":%s}' % _json_string(self.url)
        return '{"name":%s,"url":%s}' % (_json_string(self.name), _json_string(self.url))


@dataclass
class UrlGroup:
    """A URL group (the API's "topic") and its endpoints."""

    created_at: int
    updated_at: int
    name: str
    endpoints: Tuple[Endpoint, ...] = ()

    def to_json(self) -> str:
        """Return the API's JSON object."""
        return '{"createdAt":%d,"updatedAt":%d,"name":%s,"endpoints":[%s]}' % (
            self.created_at, self.updated_at, _json_string(self.name),
            ",".join([endpoint.to_json() for endpoint in self.endpoints]))


@dataclass
class Queue:
    """A queue."""

    created_at: int
    updated_at: int
    name: str
    parallelism: int
    lag: int
    paused: bool = False

    def to_json(self) -> str:
        """Return the API's JSON object."""
        return '{"createdAt":%d,"updatedAt":%d,"name":%s,"parallelism":%d,"lag":%d,"paused":%s}' % (
            self.created_at, self.updated_at, _json_string(self.name), self.parallelism, self.lag,
            "true" if self.paused else "false")


def encode(items: Sequence[Union[UrlGroup, Queue]]) -> bytes:
    """Return the API's JSON array of ``items``: compact UTF-8, keys in QStash's order.

    The objects are written from templates, and their strings by the json module's
    own escaper: the same bytes as ``json.dumps`` of the equivalent dicts (a test
    holds them to that), in under half the time at 100,000 queues.
    """
    return ("[%s]" % ",".join([item.to_json() for item in items])).encode()


Item = Union[UrlGroup, Queue]


@dataclass(frozen=True)
class Account:
    """The URL groups and queues that one token sees."""

    # Only the digest is kept, and it stays out of repr: a weak token could be guessed from it.
    token_sha256: bytes = field(repr=False)
    url_groups: Tuple[UrlGroup, ...] = ()
    queues: Tuple[Queue, ...] = ()
    #: "url_groups" / "queues" -> {name: position}: finding one item by name is one lookup.
    names: Mapping[str, Mapping[str, int]] = field(default_factory=dict, repr=False, compare=False)
    #: (current, next): the account's signing keys, if the file gives them.  Secrets: never in a repr.
    signing_keys: Optional[Tuple[str, str]] = field(default=None, repr=False)

    def item(self, kind: str, name: str) -> Optional[Item]:
        """Return the item of ``kind`` ("url_groups" or "queues") named ``name``, or None."""
        position = self.names.get(kind, {}).get(name)
        items: Tuple[Item, ...] = getattr(self, kind)
        return None if position is None else items[position]


@dataclass(frozen=True)
class Store:
    """Every account of one loaded data file, found by the SHA-256 digest of its token."""

    accounts: Tuple[Account, ...]
    #: The file holds one account ({"urlGroups": ..., "queues": ...}), not a list of accounts.
    single_account: bool = False
    #: ... and is served with the fallback token because no token was given (see parse).
    fallback_used: bool = False
    by_digest: Mapping[bytes, Account] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_digest", {account.token_sha256: account for account in self.accounts})

    def find(self, token: bytes) -> Optional[Account]:
        """Return the account whose token is ``token``, or None: one lookup, whatever their number.

        Keyed by the tokens' SHA-256 digests: a probe's timing tells at most how a digest of
        the prober's choosing compares with stored ones, and a digest cannot be steered
        towards a secret one, so neither a token nor its length leaks.
        """
        return self.by_digest.get(hashlib.sha256(token).digest())

    def warnings(self, source: str) -> List[str]:
        """Return what looks wrong in a valid file, one line each: no account, times in seconds."""
        if not self.accounts:
            return ["%s: warning: no account at all: every request will get 401" % source]
        early = []  # before 2001 as milliseconds: most likely seconds
        for i, account in enumerate(self.accounts):
            prefix = "" if self.single_account else "accounts[%d]." % i
            kinds: Tuple[Tuple[str, Sequence[Item]], ...] = (("urlGroups", account.url_groups),
                                                              ("queues", account.queues))
            for kind, items in kinds:
                early += ["%s%s[%d].%s" % (prefix, kind, j, name) for j, item in enumerate(items)
                          for name, value in (("createdAt", item.created_at), ("updatedAt", item.updated_at))
                          if 0 < value < _YEAR_2001_MS]
        if not early:
            return []
        more = " (and %d more)" % (len(early) - 1) if len(early) > 1 else ""
        return ["%s: warning: %s%s looks like seconds, not milliseconds (before 2001 as milliseconds)"
                % (source, early[0], more)]

    def summary(self) -> str:
        """Return "N accounts, N URL groups, N queues"."""
        counts = (len(self.accounts), sum(len(account.url_groups) for account in self.accounts),
                  sum(len(account.queues) for account in self.accounts))
        return ", ".join("%d %s%s" % (n, noun, "" if n == 1 else "s")
                         for n, noun in zip(counts, ("account", "URL group", "queue")))


def check_token(token: str) -> Optional[str]:
    """Return why ``token`` cannot be used as a bearer token, or None if it can."""
    if not token:
        return "expected a non-empty token"
    if not _TOKEN.fullmatch(token):
        return "expected a token of visible ASCII characters, with no spaces"
    return None


def record(path: str, document: Dict[str, Any], token: str) -> Store:
    """Check ``document`` as a one-account data file for ``token``, then write it to ``path`` whole.

    It goes to a temporary file beside ``path``, flushed, then renamed over it, so a server
    watching ``path`` reads the old version or the new, never half.  Raise DataError (one line
    each) and leave ``path`` as it was.
    """
    raw = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()
    loaded = parse(raw, path, token)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".qstash-lists-")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(raw)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise DataError(["%s: cannot write: %s" % (path, exc.strerror or exc)]) from None
    return loaded


def megabytes(size: int) -> str:
    """Return a size for a message: in MB (of 2**20 bytes, as ``--max-size 64M``), or in bytes below 0.1 MB."""
    if size < 0x19999:
        return "%d bytes" % size
    return ("%.1f" % (size / 0x100000)).removesuffix(".0") + " MB"


def load(path: str, token: Optional[str], fallback: Optional[str] = None,
         max_size: int = DEFAULT_MAX_SIZE) -> Store:
    """Read (see :func:`read`) and validate the data file at ``path`` (see :func:`parse`); raise DataError."""
    return parse(read(path, max_size)[0], path, token, fallback)


def parse(raw: bytes, source: str, token: Optional[str], fallback: Optional[str] = None) -> Store:
    """Validate the JSON document ``raw``; ``source`` names it in fault messages.

    This one parse decides the form: a one-account file gets ``token``, or ``fallback`` if
    that is None (then ``fallback_used``), or raises TokenMissing if both are; a file that
    lists accounts names their tokens itself.
    """
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is harmless
    except UnicodeDecodeError as exc:
        raise DataError(["%s: not UTF-8 text: %s at byte %d" % (source, exc.reason, exc.start)]) from None
    try:
        try:
            document = json.loads(text)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            # Python 3.11+ refuses an integer of over 4,300 digits with a ValueError that names no place:
            # only then parse again, keeping long integers out of int(), so the checker can say where.
            document = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        fault = "line %d, column %d: invalid JSON: %s" % (exc.lineno, exc.colno, exc.msg)
        raise DataError(["%s: %s" % (source, fault)]) from None
    except RecursionError:
        raise DataError(["%s: invalid JSON: nested too deeply" % source]) from None
    checker = _Checker()
    accounts = checker.document(document, fallback if token is None else token)
    if checker.faults:
        raise DataError(checker.report(source))
    fallback_used = checker.single_account and token is None
    if fallback_used and fallback is None:
        raise TokenMissing(["%s: holds a single account, and QSTASH_TOKEN is not set: set it to the token its "
                            "clients send" % source])
    return Store(accounts, checker.single_account, fallback_used)


def read(path: str, max_size: int = DEFAULT_MAX_SIZE) -> Tuple[bytes, Signature]:
    """Return the bytes of the data file at ``path`` and the signature of the version read.

    Never blocks: opened with O_NONBLOCK, it must be a regular file (so no FIFO or device)
    of at most ``max_size`` bytes, as ``fstat`` on the descriptor says (a symlink is judged
    by its target).  A version that changes while it is read is read again; FileChanging
    if it keeps changing.  Each refusal is a DataError of one line, with the signature it
    judged (None when the file could not be opened, or kept changing).
    """
    for _ in range(READ_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise DataError(["%s: cannot read: %s" % (path, exc.strerror or exc)]) from None
        try:
            before = os.fstat(fd)
            judged = _signature(before)
            if not stat.S_ISREG(before.st_mode):
                kind = _KINDS.get(stat.S_IFMT(before.st_mode), "not a plain file")
                raise DataError(["%s: cannot read: not a regular file but %s" % (path, kind)], judged)
            if before.st_size > max_size:
                raise DataError(["%s: cannot read: %s, over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE)"
                                 % (path, megabytes(before.st_size), megabytes(max_size))], judged)
            raw = _read_at_most(fd, max_size)
            if raw is None:
                raise DataError(["%s: cannot read: grew past the limit of %s while being read "
                                 "(--max-size, QSTASH_LISTS_MAX_SIZE)" % (path, megabytes(max_size))], judged)
            after = os.fstat(fd)
        except OSError as exc:
            raise DataError(["%s: cannot read: %s" % (path, exc.strerror or exc)]) from None
        finally:
            os.close(fd)
        # A writer at work shows in the signature, or (within one tick of a coarse clock) in the length.
        if _signature(after) == judged and len(raw) == after.st_size:
            return raw, judged
        time.sleep(0.02)  # give the writer a moment
    raise FileChanging(["%s: changed each time it was read (%d times); looking again later" % (path, READ_ATTEMPTS)])


class Status(NamedTuple):
    """What a DataFile serves, for a health check: nothing from the file but its digest."""

    #: The SHA-256 of the bytes in service, as ``sha256sum FILE`` prints it (None: nothing good yet).
    version: Optional[str] = None
    #: When that version was put in service (a Unix time).
    loaded_at: Optional[float] = None
    #: When the last look at the file failed, None if it did not: the file on disk is not what is served.
    failed_at: Optional[float] = None


class DataFile(Generic[T]):
    """The last good snapshot of a data file that may change while it is served.

    A reloader thread looks at the file's signature every ``interval`` seconds and, when it
    changed, reads the file and builds a new snapshot with ``build(raw)`` aside, then puts it
    in service whole: requests only read :meth:`current` and never wait.  A version that
    cannot be read or built (DataError) is logged once, and the last good snapshot stays
    (:meth:`status` says which version is in service, and whether the last look failed).
    :meth:`wake` asks for a look now, changed or not (SIGHUP); :meth:`close` stops the thread.
    Each process has its own reloader: a forked one starts it at the fork, or at its first
    :meth:`current` where no fork hook ran (uWSGI), and looks at once.  The first load is the
    constructor's: its DataError is raised if ``required``, else logged, and :meth:`current`
    returns None until a good version appears.
    """

    def __init__(self, path: str, build: Callable[[bytes], T], interval: float = 1.0, *,
                 max_size: int = DEFAULT_MAX_SIZE, required: bool = True) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.path = path
        self.interval = interval
        self.max_size = max_size
        self._build = build
        #: The signature of the version last judged, the snapshot in service and its Status: one owner, _load.
        self._state: Tuple[Optional[Signature], Optional[T], Status] = (None, None, Status())
        self._pid = 0  # the process whose reloader runs: none yet
        self._next_check = 0.0  # when current() next asks whether this is still that process
        self._starting: Dict[int, int] = {}  # pid -> the thread that starts that process's reloader
        self._closed = False
        fault = self._load()
        if fault is not None:
            if required:
                raise fault
            self._report(fault)
        self._start()
        _open_files.add(self)

    def current(self) -> Optional[T]:
        """Return the newest good snapshot (None only if there has never been one)."""
        if time.monotonic() >= self._next_check:  # once a second: is this a fork that ran no hook (uWSGI)?
            self._next_check = time.monotonic() + 1.0
            if self._pid != os.getpid() and not self._closed:
                self._start()
        return self._state[1]

    def status(self) -> Status:
        """Return which version is in service, since when, and when the last look failed (if it did)."""
        return self._state[2]

    def wake(self) -> None:
        """Have the reloader look at the file now and reload it even if it looks unchanged."""
        self._wake.set()

    def close(self) -> None:
        """Stop the reloader thread."""
        self._closed = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def refresh(self, force: bool = False) -> bool:
        """Look now, from this thread: load the file if it changed (always with ``force``); tell if it was."""
        with self._lock:
            if not force and _stat(self.path) == self._state[0]:
                return False
            fault = self._load()
            if fault is None:
                logger.info("%s: reloaded", self.path)
                return True
            self._report(fault)
            return False

    def _load(self) -> Optional[DataError]:
        """Read and build the file; return its fault, if any.  Callers hold the lock (or are the constructor).

        The signature judged, the snapshot in service and its status change together, here only:
        nothing pairs one version's signature with another's snapshot, nor does a process forked meanwhile.
        """
        signature = None
        try:
            raw, signature = read(self.path, self.max_size)
            version = hashlib.sha256(raw).hexdigest()
            snapshot = _without_gc(self._build, raw)
            self._state = (signature, snapshot, Status(version, time.time()))
            return None
        except DataError as exc:
            fault = exc
        except Exception:
            logger.exception("%s: cannot build a snapshot", self.path)
            fault = DataError([])
        # A version that read() refused comes with its own signature; one that kept changing, or
        # could not be opened, with None: the next look at a file that is there reads it again.
        self._state = (signature or fault.signature, self._state[1], self._state[2]._replace(failed_at=time.time()))
        return fault

    def _report(self, fault: DataError) -> None:
        if isinstance(fault, FileChanging):
            logger.warning("%s", fault.faults[0])
            return
        for line in fault.faults:
            logger.error("%s", line)
        outcome = "serving 503 until it is valid" if self._state[1] is None else "keeping the last good version"
        logger.error("%s: %s", self.path, outcome)

    def _start(self) -> None:
        """Start this process's reloader, once, whichever thread asks first."""
        pid, me = os.getpid(), threading.get_ident()
        if self._starting.setdefault(pid, me) != me:
            return
        if self._pid and _gc_pausers:  # a forked child: the parent's builds ended with its threads
            _gc_pausers.clear()
            gc.enable()
        self._lock = threading.Lock()  # new: in a child, the parent's may be held by a thread not there
        self._wake = threading.Event()
        # A weak reference: a DataFile nobody uses any more stops its reloader.  A child looks at once.
        wait = self.interval if self._pid == 0 else 0
        self._thread = threading.Thread(target=_reloader, args=(weakref.ref(self), wait), daemon=True,
                                        name="qstash-lists reloader: %s" % self.path)
        self._thread.start()
        self._pid = pid


def _reloader(ref: "weakref.ReferenceType[DataFile[Any]]", wait: float) -> None:
    """The loop of a DataFile's reloader thread: look after ``wait`` seconds, then every interval or when woken."""
    data = ref()
    while data is not None and not data._closed:
        wake = data._wake
        del data  # wait without holding it
        force = wake.wait(wait)
        wake.clear()
        data = ref()
        if data is None or data._closed:
            return
        try:
            data.refresh(force)
        except Exception:  # never let the reloader die
            logger.exception("%s: reloader error", data.path)
        wait = data.interval


_open_files: "weakref.WeakSet[DataFile[Any]]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Where Python forks (os.fork, gunicorn), start the child's reloaders at once."""
    for data in list(_open_files):
        if not data._closed:
            data._start()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def wake_all() -> None:
    """Have the reloader of every open DataFile look now (what SIGHUP does)."""
    for data in list(_open_files):
        data.wake()


_gc_pausers: Set[int] = set()  # the threads whose build paused the cyclic GC (see _without_gc)


def _without_gc(build: Callable[[bytes], T], raw: bytes) -> T:
    """Call ``build(raw)`` with the cyclic garbage collector paused, then as it was: a snapshot is
    many new, acyclic containers, which the collector would walk again and again while they are
    built (tests/benchmark.py measures it).  Reference counting still frees what dies."""
    me = threading.get_ident()
    if gc.isenabled():
        gc.disable()
        _gc_pausers.add(me)
    try:
        return build(raw)
    finally:
        if me in _gc_pausers:
            _gc_pausers.discard(me)
            gc.enable()


class _Checker:
    """Turns the parsed document into dataclasses, noting every fault on the way.

    Each element of an array is built by a method that takes the array's place
    (``"accounts[1].queues"``), the element's index and the names seen so far in
    that array; an array with no fault takes the short way (``_quick_*``).
    """

    def __init__(self) -> None:
        self.faults: List[str] = []
        self.single_account = False

    def fault(self, where: str, message: str) -> None:
        self.faults.append("%s: %s" % (where, message))

    def report(self, source: str) -> List[str]:
        lines = ["%s: %s" % (source, fault) for fault in self.faults[:MAX_FAULTS]]
        if len(self.faults) > MAX_FAULTS:
            lines.append("%s: ... and %d more" % (source, len(self.faults) - MAX_FAULTS))
        return lines

    def document(self, value: Any, token: Optional[str]) -> Tuple[Account, ...]:
        if type(value) is dict and "accounts" in value:
            for key in value:
                if key != "accounts":
                    self.fault(_at("(top level)", key),
                               "unknown key next to 'accounts' (a file lists accounts, "
                               "or holds 'urlGroups' and 'queues' of one account, not both)")
            return self.each(value["accounts"], "accounts", self.account, {})
        top = self.fields(value, "(top level)", (), ("urlGroups", "queues", "signingKeys", "accounts"))
        if top is None:
            return ()
        self.single_account = True
        digest = b"" if token is None else hashlib.sha256(token.encode()).digest()
        return (self.collections(top, "", digest),)

    def each(self, value: Any, where: str, build: Callable[..., Any], seen: Dict[Any, int]) -> Tuple[Any, ...]:
        """Build every element of the array ``value`` (one with a fault becomes None: never served)."""
        if type(value) is not list:
            self.fault(where, "expected an array, got %s" % _show(value))
            return ()
        return tuple([build(item, where, i, seen) for i, item in enumerate(value)])

    def fields(self, value: Any, where: str, required: Tuple[str, ...],
               optional: Tuple[str, ...] = ()) -> Optional[Dict[str, Any]]:
        """Return ``value`` if it is an object with all ``required`` keys and no unknown ones."""
        if type(value) is not dict:
            self.fault(where, "expected an object, got %s" % _show(value))
            return None
        for key in value:
            if key not in required and key not in optional:
                self.fault(_at(where, key), "unknown key (expected %s)" % ", ".join(
                    "'%s'" % known for known in required + optional))
        missing = [key for key in required if key not in value]
        for key in missing:
            self.fault(_at(where, key), "missing")
        return None if missing else value

    def integer(self, value: Any, where: str) -> Optional[int]:
        """Return ``value`` if it is whole (see _is_whole), else None and say why."""
        if _is_whole(value):
            return cast(int, value)
        if _is_long(value):
            self.fault(where, "integer too long (more than %d digits)" % MAX_DIGITS)
        elif type(value) is not int or value < 0:
            self.fault(where, "expected a non-negative integer, got %s" % _show(value))
        else:
            self.fault(where, "expected an integer no larger than %d (2**53 - 1), got %d" % (MAX_SAFE_INTEGER, value))
        return None

    def name(self, value: Any, array: str, i: int, seen: Dict[str, int], group: bool = False) -> str:
        """Return the name ``value`` (see _is_text, _is_group_name), else say why; note it as seen."""
        where = "%s[%d].name" % (array, i)
        if type(value) is not str or not value:
            self.fault(where, "expected a non-empty string, got %s" % _show(value))
            return ""
        if group and not _is_group_name(value):
            self.fault(where, "expected only letters, digits, '_', '-' and '.', got %s" % _show(value))
        elif not group and not _is_text(value):
            self.fault(where, "expected printable characters (no control characters, line breaks or lone "
                       "surrogates), got %s" % _show(value))
        if value in seen:
            self.fault(where, "duplicate name %s (also at %s[%d].name)" % (_show(value), array, seen[value]))
        else:
            seen[value] = i
        return value

    def times(self, value: Dict[str, Any], where: str) -> Tuple[Optional[int], Optional[int]]:
        created = self.integer(value["createdAt"], _at(where, "createdAt"))
        updated = self.integer(value["updatedAt"], _at(where, "updatedAt"))
        if created is not None and updated is not None and not _are_times(created, updated):
            self.fault(_at(where, "updatedAt"),
                       "expected a time not before createdAt (%d), got %d" % (created, updated))
        return created, updated

    def account(self, value: Any, array: str, i: int, digests: Dict[bytes, int]) -> Optional[Account]:
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, (), ("token", "tokenSha256", "urlGroups", "queues", "signingKeys"))
        if item is None:
            return None
        digest = self.token(item, where)
        if digest is None:
            return None
        if digest in digests:
            self.fault(where, "same token as %s[%d]" % (array, digests[digest]))
        else:
            digests[digest] = i
        return self.collections(item, where + ".", digest)

    def token(self, item: Dict[str, Any], where: str) -> Optional[bytes]:
        if ("token" in item) == ("tokenSha256" in item):
            self.fault(where, "expected exactly one of 'token' or 'tokenSha256'")
            return None
        if "token" in item:
            value = item["token"]
            problem = check_token(value) if type(value) is str else "expected a string"
            if problem is not None:
                # Never show the value: it is meant to be a secret.
                self.fault(_at(where, "token"), problem)
                return None
            return hashlib.sha256(value.encode()).digest()
        value = item["tokenSha256"]
        if type(value) is not str or not _SHA256_HEX.fullmatch(value):
            # Never show the value either: it may be the token itself, pasted in the wrong field.
            got = "a string of %d characters" % len(value) if type(value) is str else _show(value)
            self.fault(_at(where, "tokenSha256"),
                       "expected 64 hexadecimal digits (a SHA-256 digest, printf %%s TOKEN | sha256sum), "
                       "got %s" % got)
            return None
        return bytes.fromhex(value)

    def collections(self, item: Dict[str, Any], prefix: str, digest: bytes) -> Account:
        # The names seen while checking each array become the account's index by name.
        names: Dict[str, Dict[str, int]] = {"url_groups": {}, "queues": {}}
        groups = self.array(item.get("urlGroups", []), prefix + "urlGroups", names["url_groups"], _quick_groups,
                            self.url_group)
        queues = self.array(item.get("queues", []), prefix + "queues", names["queues"], _quick_queues, self.queue)
        keys = self.signing_keys(item["signingKeys"], prefix + "signingKeys") if "signingKeys" in item else None
        return Account(digest, groups, queues, names, keys)

    def signing_keys(self, value: Any, where: str) -> Optional[Tuple[str, str]]:
        # Never show a value: signing keys are secrets.
        if type(value) is not dict:
            self.fault(where, "expected an object with 'current' and 'next'")
            return None
        item = self.fields(value, where, ("current", "next"))
        if item is None:
            return None
        for key in ("current", "next"):
            if not _is_text(item[key]):
                self.fault(_at(where, key), "expected a non-empty printable string")
        return item["current"], item["next"]

    def array(self, value: Any, where: str, seen: Dict[str, int],
              quick: Callable[[Any, Dict[str, int]], Optional[Tuple[Any, ...]]],
              build: Callable[..., Any]) -> Tuple[Any, ...]:
        """Build the array ``value`` the short way if it has no fault, else element by element, naming each."""
        built = quick(value, seen)
        if built is not None:
            return built
        seen.clear()
        return self.each(value, where, build, seen)

    def url_group(self, value: Any, array: str, i: int, seen: Dict[str, int]) -> Optional[UrlGroup]:
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, ("createdAt", "updatedAt", "name", "endpoints"))
        if item is None:
            return None
        created, updated = self.times(item, where)
        name = self.name(item["name"], array, i, seen, group=True)
        endpoints = self.each(item["endpoints"], _at(where, "endpoints"), self.endpoint, {})
        if created is None or updated is None:
            return None  # the fault is noted; the whole document will be refused
        return UrlGroup(created, updated, name, endpoints)

    def endpoint(self, value: Any, array: str, i: int, seen: Dict[str, int]) -> Optional[Endpoint]:
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, ("url",), ("name",))
        if item is None:
            return None
        url = item["url"]
        if not _is_http_url(url):
            self.fault(_at(where, "url"), "expected an absolute http or https URL, got %s" % _show(url))
        if "name" not in item:
            return Endpoint(url)
        return Endpoint(url, self.name(item["name"], array, i, seen))

    def queue(self, value: Any, array: str, i: int, seen: Dict[str, int]) -> Optional[Queue]:
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, ("createdAt", "updatedAt", "name", "parallelism", "lag"), ("paused",))
        if item is None:
            return None
        created, updated = self.times(item, where)
        name = self.name(item["name"], array, i, seen)
        parallelism = self.integer(item["parallelism"], _at(where, "parallelism"))
        lag = self.integer(item["lag"], _at(where, "lag"))
        paused = item.get("paused", False)
        if type(paused) is not bool:
            self.fault(_at(where, "paused"), "expected true or false, got %s" % _show(paused))
        if created is None or updated is None or parallelism is None or lag is None:
            return None  # the fault is noted; the whole document will be refused
        return Queue(created, updated, name, parallelism, lag, paused)


# The short ways, each beside its _Checker twin: the elements of an array with no fault, or None,
# and then the twin goes through it again, naming every fault.  Places are spelled out only there:
# formatting them for every good queue would cost more than checking it.  No unknown key: with
# every required key there (itemgetter raises KeyError otherwise), the count tells.


def _quick_groups(values: Any, seen: Dict[str, int]) -> Optional[Tuple[UrlGroup, ...]]:
    if type(values) is not list:
        return None
    groups = []
    for i, value in enumerate(values):
        if type(value) is not dict:
            return None
        try:
            created, updated, name, endpoints = _GROUP_FIELDS(value)
        except KeyError:
            return None
        if not (len(value) == 4 and _are_times(created, updated) and _is_group_name(name) and name not in seen):
            return None
        built = _quick_endpoints(endpoints)
        if built is None:
            return None
        seen[name] = i
        groups.append(UrlGroup(created, updated, name, built))
    return tuple(groups)


def _quick_endpoints(values: Any) -> Optional[Tuple[Endpoint, ...]]:
    if type(values) is not list:
        return None
    endpoints = []
    named: Set[str] = set()
    for value in values:
        if type(value) is not dict or len(value) != 1 + ("name" in value) or not _is_http_url(value.get("url")):
            return None
        name: Any = value.get("name")
        if name is not None or "name" in value:
            if not (_is_text(name) and name not in named):
                return None
            named.add(name)
        endpoints.append(Endpoint(value["url"], name))
    return tuple(endpoints)


def _quick_queues(values: Any, seen: Dict[str, int]) -> Optional[Tuple[Queue, ...]]:
    if type(values) is not list:
        return None
    queues = []
    for i, value in enumerate(values):
        if type(value) is not dict:
            return None
        try:
            created, updated, name, parallelism, lag = _QUEUE_FIELDS(value)
        except KeyError:
            return None
        paused = value.get("paused", False)
        if not (len(value) == 5 + ("paused" in value) and _are_times(created, updated) and _is_whole(parallelism)
                and _is_whole(lag) and _is_text(name) and name not in seen and type(paused) is bool):
            return None
        seen[name] = i
        queues.append(Queue(created, updated, name, parallelism, lag, paused))
    return tuple(queues)


# The rules, each written once: the short ways and the checker both judge a value by these, and
# the checker only goes on to say why one fails.


def _is_whole(value: Any) -> bool:
    """A JSON integer (not true, not 1.0) from 0 to 2**53 - 1: what a JavaScript client reads exactly."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def _are_times(created: Any, updated: Any) -> bool:
    """createdAt and updatedAt: whole numbers, and updatedAt not before createdAt."""
    return _is_whole(created) and _is_whole(updated) and created <= updated


def _is_text(value: Any) -> bool:
    """A queue's or an endpoint's name, a signing key: a non-empty string of printable characters."""
    return type(value) is str and value != "" and value.isprintable()


def _is_group_name(value: Any) -> bool:
    """A URL group's name: letters, digits, '_', '-' and '.' only (QStash's rule)."""
    return type(value) is str and _GROUP_NAME.fullmatch(value) is not None


def _at(where: str, key: str) -> str:
    """Return the place of ``key`` in the object at ``where``."""
    if len(key) > 60 or not key.isprintable():  # a key from the file: keep the line short and whole
        key = _show(key)
    return key if where == "(top level)" else "%s.%s" % (where, key)


def _show(value: Any) -> str:
    """Name a JSON value in a fault message, briefly."""
    if _is_long(value):
        return "an integer of more than %d digits" % MAX_DIGITS
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():  # a line break or a lone surrogate: escape all but ASCII
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


_LONG: Any = object()  # stands for an integer literal too long to turn into an int (see parse)


def _parse_int(text: str) -> Any:
    return _LONG if len(text) > MAX_DIGITS + 1 else int(text)


def _is_long(value: Any) -> bool:
    """Tell whether ``value`` is an integer of more than MAX_DIGITS digits, on every Python."""
    return value is _LONG or (type(value) is int and not -_TOO_LONG < value < _TOO_LONG)


def _is_http_url(value: Any) -> bool:
    if type(value) is not str or not value.isprintable() or " " in value:
        return False
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _stat(path: str) -> Optional[Signature]:
    try:
        return _signature(os.stat(path))
    except OSError:
        return None


def _signature(st: os.stat_result) -> Signature:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_at_most(fd: int, limit: int) -> Optional[bytes]:
    """Read ``fd`` to its end; None if that is more than ``limit`` bytes."""
    chunks: List[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(limit - total + 1, _READ_CHUNK))
        if not chunk:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)
