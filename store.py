"""The data behind qstash-lists: load, validate and watch the JSON data file.

The file holds one account (``{"urlGroups": [...], "queues": [...]}``, whose
token the caller supplies) or several (``{"accounts": [{"token": ...}, ...]}``).
It becomes dataclasses, or a :class:`DataError` that lists every fault
with its exact place.  :class:`DataFile` keeps the last good snapshot of a file
that people edit while the service runs.  Nothing here knows about HTTP.

Check a file from the shell with ``python app.py --check --data FILE``.
"""

import gc
import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_string  # the json module's string escaper
from operator import itemgetter
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union
from urllib.parse import urlsplit

__all__ = [
    "Account",
    "DataError",
    "DataFile",
    "Endpoint",
    "Queue",
    "Store",
    "TokenMissing",
    "UrlGroup",
    "check_token",
    "encode",
    "load",
    "parse",
]

logger = logging.getLogger("qstash_lists")

#: The shipped data.json (``python app.py --example`` prints it): a starter file of one account.
EXAMPLE: Dict[str, Any] = {
    "urlGroups": [
        {"createdAt": 1700000000000, "updatedAt": 1700000500000, "name": "orders", "endpoints": [
            {"name": "billing", "url": "https://billing.example.com/hooks/orders"},
            {"name": "shipping", "url": "https://shipping.example.com/hooks/orders"},
        ]},
        {"createdAt": 1700001000000, "updatedAt": 1700001000000, "name": "signups", "endpoints": [
            {"url": "https://crm.example.com/webhooks/signup"},
        ]},
    ],
    "queues": [
        {"createdAt": 1700000000000, "updatedAt": 1700000000000, "name": "emails",
         "parallelism": 2, "lag": 0, "paused": False},
        {"createdAt": 1700002000000, "updatedAt": 1700003000000, "name": "reports",
         "parallelism": 1, "lag": 12, "paused": True},
    ],
}
#: The largest integer a JavaScript client reads back exactly.
MAX_SAFE_INTEGER = 2**53 - 1
#: How many faults one report lists before it stops counting them out.
MAX_FAULTS = 50
_GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TOKEN = re.compile(r"[!-~]+")  # visible ASCII: what fits in "Bearer <token>"


class DataError(Exception):
    """A data file that cannot be served; ``faults`` holds one line per fault."""

    def __init__(self, faults: List[str]) -> None:
        super().__init__("\n".join(faults))
        self.faults = faults


class TokenMissing(DataError):
    """A file in the one-account form, loaded without a token for that account."""


# Endpoint, UrlGroup and Queue are not frozen: a frozen dataclass sets each field
# through object.__setattr__ (0.79 µs a queue here, against 0.12 µs), and at 100,000
# queues that took almost as long as parsing the file.  Nothing changes them once
# loaded; a new version of the file becomes new objects.  Each writes itself as the
# API's compact JSON (see encode).


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
        """Return the account whose token is ``token``, or None; one lookup, whatever the number of accounts.

        The dict is keyed by the SHA-256 digest of each token, not by the token:
        a probe's timing can tell an attacker at most how a digest of their
        choosing compares with stored digests, and a digest cannot be steered
        towards a secret one without inverting SHA-256.  So neither the secret
        nor its length leaks, as with a constant-time comparison.
        """
        return self.by_digest.get(hashlib.sha256(token).digest())

    def summary(self) -> str:
        """Return "N accounts, N URL groups, N queues"."""
        groups = sum(len(account.url_groups) for account in self.accounts)
        queues = sum(len(account.queues) for account in self.accounts)
        return "%s, %s, %s" % (
            _plural(len(self.accounts), "account"),
            _plural(groups, "URL group"),
            _plural(queues, "queue"),
        )

def check_token(token: str) -> Optional[str]:
    """Return why ``token`` cannot be used as a bearer token, or None if it can."""
    if not token:
        return "expected a non-empty token"
    if not _TOKEN.fullmatch(token):
        return "expected a token of visible ASCII characters, with no spaces"
    return None


def load(path: str, token: Optional[str], fallback: Optional[str] = None) -> Store:
    """Load and validate the data file at ``path``; raise DataError on any fault.

    ``token`` is the token of a file in the one-account form (``fallback`` when
    ``token`` is None); a file that lists its accounts names their tokens itself.
    """
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise DataError(["%s: cannot read: %s" % (path, exc.strerror or exc)]) from None
    return parse(raw, path, token, fallback)


def parse(raw: bytes, source: str, token: Optional[str], fallback: Optional[str] = None) -> Store:
    """Validate the JSON document ``raw``; ``source`` names it in fault messages.

    The file's form is decided by this one parse: a one-account file gets
    ``token``, or ``fallback`` if ``token`` is None (the store then says so in
    ``fallback_used``), or raises TokenMissing if both are None.
    """
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is harmless
    except UnicodeDecodeError as exc:
        raise DataError(["%s: not UTF-8 text: %s at byte %d" % (source, exc.reason, exc.start)]) from None
    try:
        document = json.loads(text)
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
        raise TokenMissing(["%s: holds a single account, and no token was given for it" % source])
    return Store(accounts, checker.single_account, fallback_used)


_QUEUE_FIELDS = itemgetter("createdAt", "updatedAt", "name", "parallelism", "lag")
_GROUP_KEYS = frozenset(("createdAt", "updatedAt", "name", "endpoints"))
_GROUP_FIELDS = itemgetter("createdAt", "updatedAt", "name", "endpoints")
_ENDPOINT_KEYS = frozenset(("url", "name"))


class _Checker:
    """Turns the parsed document into dataclasses, noting every fault on the way.

    Each element of an array is built by a method that takes the array's place
    (``"accounts[1].queues"``), the element's index and the names seen so far in
    that array.  A well-formed element takes the short way through its method; the
    long way names every fault, and places are spelled out only there, because
    formatting them for 100,000 good queues would cost more than checking them.
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
        top = self.fields(value, "(top level)", (), ("urlGroups", "queues", "accounts"))
        if top is None:
            return ()
        self.single_account = True
        digest = b"" if token is None else hashlib.sha256(token.encode()).digest()
        return (self.collections(top, "", digest),)

    def each(self, value: Any, where: str, build: Callable[..., Any], seen: Dict[Any, int]) -> Tuple[Any, ...]:
        """Build every element of the array ``value``.

        An element with a fault becomes None; that is harmless, because a
        document with a fault is reported, never served.
        """
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
                self.fault(_at(where, key), "unknown key (expected %s)" % _one_of(required + optional))
        missing = [key for key in required if key not in value]
        for key in missing:
            self.fault(_at(where, key), "missing")
        return None if missing else value

    def integer(self, value: Any, where: str) -> Optional[int]:
        """Return ``value`` if it is a non-negative integer a JavaScript client reads exactly."""
        if type(value) is not int or value < 0:
            self.fault(where, "expected a non-negative integer, got %s" % _show(value))
            return None
        if value > MAX_SAFE_INTEGER:
            self.fault(where, "expected an integer no larger than %d (2**53 - 1), got %d"
                       % (MAX_SAFE_INTEGER, value))
            return None
        return value

    def name(self, value: Any, array: str, i: int, seen: Dict[str, int],
             pattern: Optional["re.Pattern[str]"] = None) -> str:
        where = "%s[%d].name" % (array, i)
        if type(value) is not str or not value:
            self.fault(where, "expected a non-empty string, got %s" % _show(value))
            return ""
        if pattern is not None and not pattern.fullmatch(value):
            self.fault(where, "expected only letters, digits, '_', '-' and '.', got %s" % _show(value))
        elif not value.isprintable():
            self.fault(where, "expected printable characters (no control characters, line breaks "
                       "or lone surrogates), got %s" % _show(value))
        if value in seen:
            self.fault(where, "duplicate name %s (also at %s[%d].name)" % (_show(value), array, seen[value]))
        else:
            seen[value] = i
        return value

    def times(self, value: Dict[str, Any], where: str) -> Tuple[Optional[int], Optional[int]]:
        created = self.integer(value["createdAt"], _at(where, "createdAt"))
        updated = self.integer(value["updatedAt"], _at(where, "updatedAt"))
        if created is not None and updated is not None and updated < created:
            self.fault(_at(where, "updatedAt"),
                       "expected a time not before createdAt (%d), got %d" % (created, updated))
        return created, updated

    def account(self, value: Any, array: str, i: int, digests: Dict[bytes, int]) -> Optional[Account]:
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, (), ("token", "tokenSha256", "urlGroups", "queues"))
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
            self.fault(_at(where, "tokenSha256"),
                       "expected 64 hexadecimal digits (a SHA-256 digest), got %s" % _show(value))
            return None
        return bytes.fromhex(value)

    def collections(self, item: Dict[str, Any], prefix: str, digest: bytes) -> Account:
        # The names seen while checking each array become the account's index by name.
        names: Dict[str, Dict[str, int]] = {"url_groups": {}, "queues": {}}
        groups = self.each(item.get("urlGroups", []), prefix + "urlGroups", self.url_group, names["url_groups"])
        queues = self.each(item.get("queues", []), prefix + "queues", self.queue, names["queues"])
        return Account(digest, groups, queues, names)

    def url_group(self, value: Any, array: str, i: int, seen: Dict[str, int]) -> Optional[UrlGroup]:
        if type(value) is dict and value.keys() == _GROUP_KEYS:
            created, updated, name, endpoints = _GROUP_FIELDS(value)
            if (type(created) is type(updated) is int and 0 <= created <= updated <= MAX_SAFE_INTEGER
                    and type(name) is str and _GROUP_NAME.fullmatch(name) and name not in seen):
                seen[name] = i
                where = "%s[%d].endpoints" % (array, i)
                return UrlGroup(created, updated, name, self.each(endpoints, where, self.endpoint, {}))
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, ("createdAt", "updatedAt", "name", "endpoints"))
        if item is None:
            return None
        created, updated = self.times(item, where)
        name = self.name(item["name"], array, i, seen, _GROUP_NAME)
        endpoints = self.each(item["endpoints"], _at(where, "endpoints"), self.endpoint, {})
        if created is None or updated is None:
            return None  # the fault is noted; the whole document will be refused
        return UrlGroup(created, updated, name, endpoints)

    def endpoint(self, value: Any, array: str, i: int, seen: Dict[str, int]) -> Optional[Endpoint]:
        if type(value) is dict and value.keys() <= _ENDPOINT_KEYS and _is_http_url(value.get("url")):
            name = value.get("name")
            if name is None and "name" not in value:
                return Endpoint(value["url"])
            if type(name) is str and name and name.isprintable() and name not in seen:
                seen[name] = i
                return Endpoint(value["url"], name)
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
        if type(value) is dict:
            try:
                created, updated, name, parallelism, lag = _QUEUE_FIELDS(value)
            except KeyError:
                pass
            else:
                paused = value.get("paused", False)
                # With every required key there, the count tells whether any other is.
                if (len(value) == 5 + ("paused" in value)
                        and type(created) is type(updated) is type(parallelism) is type(lag) is int
                        and 0 <= created <= updated <= MAX_SAFE_INTEGER
                        and 0 <= parallelism <= MAX_SAFE_INTEGER and 0 <= lag <= MAX_SAFE_INTEGER
                        and type(name) is str and name and name.isprintable() and name not in seen
                        and type(paused) is bool):
                    seen[name] = i
                    return Queue(created, updated, name, parallelism, lag, paused)
        where = "%s[%d]" % (array, i)
        item = self.fields(value, where, ("createdAt", "updatedAt", "name", "parallelism", "lag"),
                           ("paused",))
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


def _at(where: str, key: str) -> str:
    """Return the place of ``key`` in the object at ``where``."""
    if len(key) > 60 or not key.isprintable():  # a key from the file: keep the line short and whole
        key = _show(key)
    return key if where == "(top level)" else "%s.%s" % (where, key)


def _one_of(keys: Tuple[str, ...]) -> str:
    return ", ".join("'%s'" % key for key in keys)


def _show(value: Any) -> str:
    """Name a JSON value in a fault message, briefly."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():  # a line break or a lone surrogate: escape all but ASCII
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plural(count: int, noun: str) -> str:
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


def _is_http_url(value: Any) -> bool:
    if type(value) is not str or not value.isprintable() or " " in value:
        return False
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


T = TypeVar("T")


class DataFile(Generic[T]):
    """The last good snapshot of a data file that may change while it is served.

    :meth:`current` looks at the file's size, mtime and inode at most once per
    ``interval`` seconds, from whichever thread asks; when they change it builds
    a new snapshot with ``build(path)`` and swaps it in whole.  A version that
    ``build`` rejects with DataError is logged once and the last good snapshot
    stays in service.  The one reader that notices a change waits for the load;
    the others keep the current snapshot meanwhile, and none sees half of one.
    """

    def __init__(self, path: str, build: Callable[[str], T], interval: float = 1.0) -> None:
        self.path = path
        self.interval = interval
        self._build = build
        self._lock = threading.Lock()
        self._signature = self._stat()
        self._snapshot = _without_gc(build, path)  # the first load's DataError is the caller's
        self._next_check = time.monotonic() + interval

    def current(self) -> T:
        """Return the newest good snapshot, reloading first if the file changed."""
        if time.monotonic() >= self._next_check:
            self.refresh()
        return self._snapshot

    def refresh(self, force: bool = False) -> None:
        """Reload now if the file changed (always, with ``force``), unless a reload is running."""
        if force:
            self._signature = None
            self._next_check = 0.0
        if not self._lock.acquire(blocking=False):
            return  # another thread is looking; keep serving the current snapshot
        try:
            self._next_check = time.monotonic() + self.interval
            signature = self._stat()
            if signature == self._signature:
                return
            self._signature = signature  # a bad version is reported once, not every second
            try:
                snapshot = _without_gc(self._build, self.path)
            except DataError as exc:
                for fault in exc.faults:
                    logger.error("%s", fault)
                logger.error("%s: keeping the last good version", self.path)
                return
            except Exception:
                logger.exception("%s: reload failed; keeping the last good version", self.path)
                return
            if self._stat() != signature:
                # Changed while we read it: perhaps torn.  Look again on the next check.
                self._signature = None
                return
            self._snapshot = snapshot
            logger.info("%s: reloaded", self.path)
        finally:
            self._lock.release()

    def _stat(self) -> Optional[Tuple[int, int, int, int]]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


def _without_gc(build: Callable[[str], T], path: str) -> T:
    """Call ``build(path)`` with the cyclic garbage collector paused.

    A snapshot is hundreds of thousands of new, acyclic containers; left on, the
    collector walks them again and again while they are built (a seventh of the
    load time at 100,000 queues).  Reference counting still frees what dies.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build(path)
    finally:
        if enabled:
            gc.enable()
