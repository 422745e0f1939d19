"""The data behind qstash-lists: load, validate, watch and write the JSON data file (no HTTP here).

The file holds one account (``{"urlGroups": [...], "queues": [...]}``, whose token the caller supplies)
or several (``{"accounts": [{"token": ...}, ...]}``).  It becomes dataclasses, or a :class:`DataError`
listing every fault with its place.  :class:`DataFile` keeps the last good snapshot of a file people edit
while it is served, and is its one writer.  From the shell: ``python app.py --check --data FILE``.
"""

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, Mapping, NamedTuple, Optional, TypeVar, Union, cast
from urllib.parse import urlsplit

__all__ = ["Account", "Change", "Conflict", "DataError", "DataFile", "Endpoint", "FileChanging", "Queue", "Status",
           "Store", "TokenMissing", "TooLarge", "UrlGroup", "add_endpoints", "after_fork", "check_token", "delete_item",
           "encode", "from_api", "is_http_url", "is_name", "is_text", "is_whole", "load", "megabytes", "parse",
           "pause_queue", "read", "read_at_most", "record", "remove_endpoints", "upsert_queue", "wake_all"]

logger = logging.getLogger("qstash_lists")

#: The shipped data.json (``python app.py --example`` prints it): a starter file of one account.
EXAMPLE: dict[str, Any] = {"urlGroups": [
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
DEFAULT_MAX_SIZE = 64 * 1024 * 1024  # a larger data file is refused (--max-size); loading takes several times it
MAX_SAFE_INTEGER = 2**53 - 1  # the largest integer a JavaScript client reads back exactly
_YEAR_2001_MS = 978307200000
MAX_FAULTS = 50  # how many faults one report lists before it counts the rest
READ_ATTEMPTS = 4  # reads of a file that changes while it is read, in one look, before giving up
LOCK_TIMEOUT = 10.0  # how long a write waits for another process's write to the same file
_READ_CHUNK = 1 << 24
NAME_RULE = "only letters, digits, '-', '.' and '_'"  # QStash's for URL groups and queues (a 400 otherwise)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TOKEN = re.compile(r"[!-~]+")  # visible ASCII: what fits in "Bearer <token>"
#: The fields a data file holds of each kind of object, in QStash's order: required, then optional.
FIELDS = {"urlGroups": (("createdAt", "updatedAt", "name", "endpoints"), ()), "endpoints": (("url",), ("name",)),
          "queues": (("createdAt", "updatedAt", "name", "parallelism", "lag"), ("paused",)),
          "accounts": ((), ("token", "tokenSha256", "urlGroups", "queues", "signingKeys")),
          "signingKeys": (("current", "next"), ()), "(top level)": ((), ("urlGroups", "queues", "signingKeys",
                                                                          "accounts"))}
FIELD_NAMES = {"urlGroups": "url_groups", "queues": "queues"}  # the Account field of each array of the file
_KEYS = {kind: (frozenset(required), frozenset(required + optional)) for kind, (required, optional) in FIELDS.items()}
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFDIR: "a directory",
          stat.S_IFSOCK: "a socket", stat.S_IFBLK: "a block device"}

T = TypeVar("T")
#: What tells versions of a file apart: inode, device, size, mtime and ctime (cp -p and tar set an mtime back, not it).
Signature = tuple[int, int, int, int, int]


class DataError(Exception):
    """A data file that cannot be served or written: ``faults``, one line each, and the ``signature`` judged."""

    def __init__(self, faults: list[str], signature: Optional[Signature] = None) -> None:
        super().__init__("\n".join(faults))
        self.faults = faults
        self.signature = signature


class TokenMissing(DataError):
    """A file in the one-account form, loaded without a token for that account."""


class FileChanging(DataError):
    """The file changed each time it was read: a writer is busy with it."""


class Conflict(DataError):
    """A write found the file on disk in a state it must not overwrite (it does not load)."""


class TooLarge(DataError):
    """A write would make the file larger than its size limit."""


# ---- The data: dataclasses, one loaded file ------------------------------------------------------
# Endpoint, UrlGroup and Queue are not frozen (a frozen dataclass's object.__setattr__ costs about as much as
# parsing the file at 100,000 queues), but nothing changes them once loaded.
@dataclass
class Endpoint:
    """One endpoint of a URL group."""

    url: str
    name: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        """The API's object; ``name`` is left out when there is none."""
        return {"url": self.url} if self.name is None else {"name": self.name, "url": self.url}


@dataclass
class UrlGroup:
    """A URL group (the API's "topic") and its endpoints."""

    created_at: int
    updated_at: int
    name: str
    endpoints: tuple[Endpoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The API's object, keys in QStash's order."""
        return {"createdAt": self.created_at, "updatedAt": self.updated_at, "name": self.name,
                "endpoints": [endpoint.to_dict() for endpoint in self.endpoints]}


@dataclass
class Queue:
    """A queue."""

    created_at: int
    updated_at: int
    name: str
    parallelism: int
    lag: int
    paused: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The API's object, keys in QStash's order."""
        return {"createdAt": self.created_at, "updatedAt": self.updated_at, "name": self.name,
                "parallelism": self.parallelism, "lag": self.lag, "paused": self.paused}


Item = Union[UrlGroup, Queue]


def encode(document: Any) -> bytes:
    """Return ``document`` as the API writes it: compact UTF-8 JSON (items as their ``to_dict``)."""
    return _ENCODER.encode(document).encode()


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                            default=lambda item: item.to_dict())  # built once: json.dumps builds one a call


@dataclass(frozen=True)
class Account:
    """The URL groups and queues that one token sees."""

    token_sha256: bytes = field(repr=False)  # only the digest, and not in repr: a weak token could be guessed
    url_groups: tuple[UrlGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    names: Mapping[str, Mapping[str, int]] = field(default_factory=dict, repr=False, compare=False)  # kind: name: i
    signing_keys: Optional[tuple[str, str]] = field(default=None, repr=False)  # (current, next); secrets

    def item(self, kind: str, name: str) -> Optional[Item]:
        """Return the item of ``kind`` ("url_groups" or "queues") named ``name``, or None."""
        position = self.names.get(kind, {}).get(name)
        items: tuple[Item, ...] = getattr(self, kind)
        return None if position is None else items[position]


@dataclass(frozen=True)
class Store:
    """Every account of one loaded data file, found by the SHA-256 digest of its token."""

    accounts: tuple[Account, ...]
    single_account: bool = False  # the file holds one account ({"urlGroups": ..., "queues": ...})
    fallback_used: bool = False  # ... served with the fallback token, as no token was given (see parse)
    by_digest: Mapping[bytes, Account] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_digest", {account.token_sha256: account for account in self.accounts})

    def find(self, token: bytes) -> Optional[Account]:
        """Return the account whose token is ``token``, or None, by its SHA-256: timing tells a probe no token."""
        return self.by_digest.get(hashlib.sha256(token).digest())

    def warnings(self, source: str) -> list[str]:
        """Return what looks wrong in a valid file, one line each: no account, times in seconds."""
        if not self.accounts:
            return ["%s: warning: no account at all: every request will get 401" % source]
        early = ["%s%s[%d].%s" % ("" if self.single_account else "accounts[%d]." % i, kind, j, name)  # before 2001
                 for i, account in enumerate(self.accounts) for kind in ("urlGroups", "queues")
                 for j, item in enumerate(cast("tuple[Item, ...]", getattr(account, FIELD_NAMES[kind])))
                 for name, value in (("createdAt", item.created_at), ("updatedAt", item.updated_at))
                 if 0 < value < _YEAR_2001_MS]
        more = " (and %d more)" % (len(early) - 1) if len(early) > 1 else ""
        return ["%s: warning: %s%s looks like seconds, not milliseconds (before 2001 as milliseconds)"
                % (source, early[0], more)] if early else []

    def summary(self) -> str:
        """Return "N accounts, N URL groups, N queues"."""
        counts = (len(self.accounts), sum(len(account.url_groups) for account in self.accounts),
                  sum(len(account.queues) for account in self.accounts))
        return ", ".join("%d %s%s" % (n, noun, "" if n == 1 else "s")
                         for n, noun in zip(counts, ("account", "URL group", "queue")))


def check_token(token: str) -> Optional[str]:
    """Return why ``token`` cannot be used as a bearer token, or None if it can."""
    return None if _TOKEN.fullmatch(token) else "expected a non-empty token of visible ASCII characters, no spaces"


def megabytes(size: int) -> str:
    """Return a size for a message: in MB (of 2**20 bytes, as ``--max-size 64M``), or in bytes below 0.1 MB."""
    return "%d bytes" % size if size < 0x19999 else ("%.1f" % (size / 0x100000)).removesuffix(".0") + " MB"


# ---- The rules, each written once; the checker judges every value by them ------------------------
def is_whole(value: Any) -> bool:
    """A JSON integer (not true, not 1.0) from 0 to 2**53 - 1: what a JavaScript client reads exactly."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def is_name(value: Any) -> bool:
    """A URL group's or a queue's name: letters, digits, '_', '-' and '.' only (QStash's rule)."""
    return type(value) is str and _NAME.fullmatch(value) is not None


def is_text(value: Any) -> bool:
    """An endpoint's name, a signing key: a non-empty string of printable characters."""
    return type(value) is str and value != "" and value.isprintable()


def is_http_url(value: Any) -> bool:
    """An absolute http or https URL with a host, printable, without spaces."""
    if type(value) is not str or not value.isprintable() or " " in value:
        return False
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


# ---- Loading: parse and check ---------------------------------------------------------------------
def load(path: str, token: Optional[str], fallback: Optional[str] = None,
         max_size: int = DEFAULT_MAX_SIZE) -> Store:
    """Read (see :func:`read`) and validate the data file at ``path`` (see :func:`parse`); raise DataError."""
    return parse(read(path, max_size)[0], path, token, fallback)


def parse(raw: bytes, source: str, token: Optional[str], fallback: Optional[str] = None) -> Store:
    """Validate the JSON document ``raw`` (``source`` names it).  A one-account file gets ``token``, else
    ``fallback`` (then ``fallback_used``), else TokenMissing."""
    checker = _Checker()
    accounts = checker.document(_json(raw, source), fallback if token is None else token)
    if checker.faults:
        lines = ["%s: %s" % (source, fault) for fault in checker.faults[:MAX_FAULTS]]
        if len(checker.faults) > MAX_FAULTS:
            lines.append("%s: ... and %d more" % (source, len(checker.faults) - MAX_FAULTS))
        raise DataError(lines)
    fallback_used = checker.single_account and token is None
    if fallback_used and fallback is None:
        raise TokenMissing(["%s: holds a single account, and QSTASH_TOKEN is not set: set it to the token its "
                            "clients send" % source])
    return Store(accounts, checker.single_account, fallback_used)


_TWICE: Any = object()  # the key, in an object that gave some key twice, of the keys given twice


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object as json.loads builds it, and the keys it gave more than once under _TWICE (not JSON's)."""
    value = dict(pairs)
    if len(value) < len(pairs):
        value[_TWICE] = sorted({key for key, _ in pairs if sum(key == k for k, _ in pairs) > 1})
    return value


def _json(raw: bytes, source: str) -> Any:
    """The JSON document ``raw`` of the data file ``source``, or a DataError that says where it is not."""
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is harmless
    except UnicodeDecodeError as exc:
        raise DataError(["%s: not UTF-8 text: %s at byte %d" % (source, exc.reason, exc.start)]) from None
    if not text.strip():
        raise DataError(["%s: empty: a data file is a JSON object (python app.py --example prints one)" % source])
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        line, column, message = exc.lineno, exc.colno, exc.msg
        pos = exc.pos + (text[exc.pos:exc.pos + 1] == ",")  # 3.13 points at the comma, earlier ones after it
        closing = len(text) - len(text[pos:].lstrip())
        if text[:pos].rstrip().endswith(",") and text[closing:closing + 1] in ("]", "}"):
            line, column = text.count("\n", 0, closing) + 1, closing - text.rfind("\n", 0, closing)
            message = "a comma before the closing '%s' (JSON allows none)" % text[closing]
        raise DataError(["%s: line %d, column %d: invalid JSON: %s" % (source, line, column, message)]) from None
    except RecursionError:
        raise DataError(["%s: invalid JSON: nested too deeply" % source]) from None
    except ValueError:  # Python (3.11, 3.10.7, 3.9.14 on) reads no integer of over 4,300 digits, and says not where
        raise DataError(["%s: invalid JSON: an integer of more than 4,300 digits" % source]) from None


class _Checker:
    """Turns the parsed document into dataclasses, judging each value once by the rules above and noting every
    fault; a place (``accounts[1].queues[3].lag``) is spelled out only for a fault."""

    def __init__(self) -> None:
        self.faults: list[str] = []
        self.single_account = False

    def fault(self, array: str, i: Optional[int], key: Optional[str], message: str) -> None:
        """Note a fault at the place of ``key`` in element ``i`` of ``array`` (either may be None)."""
        where = array if i is None else "%s[%d]" % (array, i)
        if key is not None:
            if len(key) > 60 or not key.isprintable():  # a key from the file: keep the line short and whole
                key = _show(key)
            where = key if where == "(top level)" else "%s.%s" % (where, key)
        self.faults.append("%s: %s" % (where, message))

    def document(self, value: Any, token: Optional[str]) -> tuple[Account, ...]:
        if type(value) is dict and "accounts" in value:
            for key in value:
                if key != "accounts":
                    self.fault("(top level)", None, key, "unknown key next to 'accounts' (a file lists accounts, "
                               "or holds 'urlGroups' and 'queues' of one account, not both)")
            built = self.each(value["accounts"], "accounts", self.account, {})
            return tuple(account for account in built if account is not None)
        top = self.fields(value, "(top level)", None, "(top level)")
        if top is None:
            return ()
        self.single_account = True
        digest = b"" if token is None else hashlib.sha256(token.encode()).digest()
        return (self.collections(top, "", digest),)

    def each(self, value: Any, array: str, build: Callable[..., Any], seen: dict[Any, int]) -> tuple[Any, ...]:
        """Build every element of the array ``value`` (one with a fault becomes None: never served)."""
        if type(value) is not list:
            self.fault(array, None, None, "expected an array, got %s" % _show(value))
            return ()
        return tuple([build(item, array, i, seen) for i, item in enumerate(value)])

    def fields(self, value: Any, array: str, i: Optional[int], kind: str) -> Any:
        """Return ``value`` if it is an object; say which of its keys are unknown, missing or given twice."""
        required, known = _KEYS[kind]
        if type(value) is dict and required <= value.keys() <= known:
            return value
        if type(value) is not dict:
            self.fault(array, i, None, "expected an object, got %s" % _show(value))
            return None
        for key in value:
            if key is _TWICE:
                for twice in value[_TWICE]:
                    self.fault(array, i, twice, "given twice in one object (only one is allowed)")
            elif key not in known:
                expected = ", ".join("'%s'" % name for name in FIELDS[kind][0] + FIELDS[kind][1])
                self.fault(array, i, key, "unknown key (expected %s)" % expected)
        for key in FIELDS[kind][0]:
            if key not in value:
                self.fault(array, i, key, "missing")
        return value  # what is there is judged too: every fault of an item is reported

    def whole(self, item: dict[str, Any], array: str, i: int, key: str) -> Optional[int]:
        """Return the value of ``key`` if it is whole (see is_whole), else None and say why (unless missing)."""
        value = item.get(key, _MISSING)
        if is_whole(value):
            return cast(int, value)
        if value is not _MISSING:
            self.fault(array, i, key, "expected an integer from 0 to 2**53 - 1, got %s" % _show(value))
        return None

    def times(self, item: dict[str, Any], array: str, i: int) -> None:
        created, updated = self.whole(item, array, i, "createdAt"), self.whole(item, array, i, "updatedAt")
        if created is not None and updated is not None and created > updated:
            self.fault(array, i, "updatedAt", "expected a time not before createdAt (%d), got %d" % (created, updated))

    def name(self, item: dict[str, Any], array: str, i: int, seen: dict[str, int], rule: Callable[[Any], bool]) -> Any:
        """Return the item's name if it keeps ``rule`` (is_name or is_text) and is new in the array, else None."""
        value = item.get("name", _MISSING)
        if rule(value) and value not in seen:
            seen[value] = i
            return value
        if value is _MISSING:
            return None
        if type(value) is not str or not value:
            self.fault(array, i, "name", "expected a non-empty string, got %s" % _show(value))
        elif not rule(value):
            self.fault(array, i, "name", "expected %s, got %s" % (NAME_RULE if rule is is_name else
                       "printable characters (no control characters, line breaks or lone surrogates)", _show(value)))
        else:
            self.fault(array, i, "name", "duplicate name %s (also at %s[%d].name)" % (_show(value), array, seen[value]))
        return None

    def account(self, value: Any, array: str, i: int, digests: dict[bytes, int]) -> Optional[Account]:
        item = self.fields(value, array, i, "accounts")
        if item is None:
            return None
        digest = self.token(item, array, i)
        if digest is None:
            return None
        if digests.setdefault(digest, i) != i:
            self.fault(array, i, None, "same token as %s[%d]" % (array, digests[digest]))
        return self.collections(item, "%s[%d]." % (array, i), digest)

    def token(self, item: dict[str, Any], array: str, i: int) -> Optional[bytes]:
        if ("token" in item) == ("tokenSha256" in item):
            self.fault(array, i, None, "expected exactly one of 'token' or 'tokenSha256'")
            return None
        value = item.get("token")
        if "token" in item:
            problem = check_token(value) if type(value) is str else "expected a string"
            if problem is None:
                return hashlib.sha256(cast(str, value).encode()).digest()
            self.fault(array, i, "token", problem)  # never the value: it is meant to be a secret
            return None
        value = item["tokenSha256"]
        if type(value) is not str or not _SHA256_HEX.fullmatch(value):
            # Never show the value either: it may be the token itself, pasted in the wrong field.
            got = "a string of %d characters" % len(value) if type(value) is str else _show(value)
            self.fault(array, i, "tokenSha256", "expected 64 hexadecimal digits (a SHA-256 digest, printf %%s "
                       "TOKEN | sha256sum), got %s" % got)
            return None
        return bytes.fromhex(value)

    def collections(self, item: dict[str, Any], prefix: str, digest: bytes) -> Account:
        # The names seen while checking each array become the account's index by name.
        names: dict[str, dict[str, int]] = {"url_groups": {}, "queues": {}}
        groups = self.each(item.get("urlGroups", []), prefix + "urlGroups", self.url_group, names["url_groups"])
        queues = self.each(item.get("queues", []), prefix + "queues", self.queue, names["queues"])
        keys, value = None, item.get("signingKeys")
        if value is not None and type(value) is not dict:  # never the value: signing keys are secrets
            self.fault(prefix + "signingKeys", None, None, "expected an object with 'current' and 'next'")
        elif value is not None and self.fields(value, prefix + "signingKeys", None, "signingKeys") is not None:
            for key in ("current", "next"):
                if not is_text(value.get(key, "-")):  # missing is said already
                    self.fault(prefix + "signingKeys", None, key, "expected a non-empty printable string")
            keys = (value.get("current", ""), value.get("next", ""))
        return Account(digest, groups, queues, names, keys)

    def url_group(self, value: Any, array: str, i: int, seen: dict[str, int]) -> Optional[UrlGroup]:
        item = self.fields(value, array, i, "urlGroups")
        if item is None:
            return None
        created, updated, name = item.get("createdAt"), item.get("updatedAt"), item.get("name")
        endpoints = self.each(item.get("endpoints", []), "%s[%d].endpoints" % (array, i), self.endpoint, {})
        if is_whole(created) and is_whole(updated) and created <= updated and is_name(name) and name not in seen:
            seen[name] = i
            return UrlGroup(created, updated, name, endpoints)
        self.times(item, array, i)  # a fault: say which, and where
        self.name(item, array, i, seen, is_name)
        return None

    def endpoint(self, value: Any, array: str, i: int, seen: dict[str, int]) -> Optional[Endpoint]:
        item = self.fields(value, array, i, "endpoints")
        if item is None:
            return None
        url = item.get("url", _MISSING)
        if not is_http_url(url) and url is not _MISSING:
            self.fault(array, i, "url", "expected an absolute http or https URL, got %s" % _show(url))
        return Endpoint(url, self.name(item, array, i, seen, is_text))  # None: no name (or a fault, said)

    def queue(self, value: Any, array: str, i: int, seen: dict[str, int]) -> Optional[Queue]:
        item = self.fields(value, array, i, "queues")
        if item is None:
            return None
        created, updated, name = item.get("createdAt"), item.get("updatedAt"), item.get("name")
        parallelism, lag, paused = item.get("parallelism"), item.get("lag"), item.get("paused", False)
        if (is_whole(created) and is_whole(updated) and created <= updated and is_name(name) and name not in seen
                and is_whole(parallelism) and is_whole(lag) and type(paused) is bool):
            seen[name] = i
            return Queue(created, updated, name, parallelism, lag, paused)
        self.times(item, array, i)  # a fault: say which, and where
        self.name(item, array, i, seen, is_name)
        self.whole(item, array, i, "parallelism")
        self.whole(item, array, i, "lag")
        if type(paused) is not bool:
            self.fault(array, i, "paused", "expected true or false, got %s" % _show(paused))
        return None


_MISSING: Any = object()  # a key the object does not have (its fault is said once, as missing)


def _show(value: Any) -> str:
    """Name a JSON value in a fault message, briefly."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():  # a line break or a lone surrogate: escape all but ASCII
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- Reading: never blocks, never half a version --------------------------------------------------
def read(path: str, max_size: int = DEFAULT_MAX_SIZE) -> tuple[bytes, Signature]:
    """Return the bytes of the data file at ``path`` (never blocking: a regular file of at most ``max_size``
    bytes) and the signature of the version read, read again while it changes; or a DataError of one line."""
    for _ in range(READ_ATTEMPTS):
        fd = _open(path)
        try:
            raw, judged = _read_open(fd, path, max_size)
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


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        try:  # a socket cannot even be opened: name it, as fstat would
            kind = _KINDS.get(stat.S_IFMT(os.stat(path).st_mode))
        except OSError:
            kind = None
        reason = "not a regular file but %s" % kind if kind else exc.strerror or str(exc)
        raise DataError(["%s: cannot read: %s" % (path, reason)]) from None


def _read_open(fd: int, path: str, max_size: int) -> tuple[bytes, Signature]:
    """Read the open file ``fd`` whole, if it is a regular file of at most ``max_size`` bytes."""
    before = os.fstat(fd)
    judged = _signature(before)
    if not stat.S_ISREG(before.st_mode):
        kind = _KINDS.get(stat.S_IFMT(before.st_mode), "not a plain file")
        raise DataError(["%s: cannot read: not a regular file but %s" % (path, kind)], judged)
    if before.st_size > max_size:
        raise DataError(["%s: cannot read: %s, over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE)"
                         % (path, megabytes(before.st_size), megabytes(max_size))], judged)
    raw = read_at_most(lambda n: os.read(fd, n), max_size)
    if raw is None:
        raise DataError(["%s: cannot read: grew past the limit of %s while being read "
                         "(--max-size, QSTASH_LISTS_MAX_SIZE)" % (path, megabytes(max_size))], judged)
    return raw, judged


def read_at_most(read: Callable[[int], bytes], limit: int) -> Optional[bytes]:
    """Read to the end by ``read(n)`` (a file may end past what fstat said), in chunks (the limit may be gigabytes);
    None if that is more than ``limit`` bytes."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = read(min(limit - total + 1, _READ_CHUNK))
        if not chunk:
            return b"".join(chunks)  # one chunk: itself, not a copy
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)


def _stat(path: str) -> Optional[Signature]:
    try:
        return _signature(os.stat(path))
    except OSError:
        return None


def _signature(st: os.stat_result) -> Signature:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# ---- Writing: the one writer, for writes and --record alike ---------------------------------------
@contextlib.contextmanager
def _locked(path: str, max_size: int) -> Iterator[tuple[str, bytes, os.stat_result]]:
    """Hold every writer's lock (an exclusive ``flock`` on the symlink's target, taken again on a version replaced
    meanwhile) for at most LOCK_TIMEOUT, and yield the target and its latest bytes and stat."""
    import fcntl  # POSIX only: writes need it, reads do not

    target = os.path.realpath(path)
    deadline, pause = time.monotonic() + LOCK_TIMEOUT, 0.001
    while True:
        fd = _open(target)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DataError(["%s: another process kept the file locked for %g s; nothing was written"
                                     % (path, LOCK_TIMEOUT)]) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                continue
            try:
                st = os.fstat(fd)
                raw = _read_open(fd, path, max_size)[0] if _stat(target) == _signature(st) else None
            except OSError as exc:
                raise DataError(["%s: cannot read: %s" % (path, exc.strerror or exc)]) from None
            if raw is not None:  # else a writer replaced the file since it was opened: take the new one
                yield target, raw, st
                return
        finally:
            os.close(fd)  # lets go of the lock


def _replace(target: str, raw: bytes, old: Optional[os.stat_result], source: str) -> Signature:
    """Write ``raw`` beside ``target`` (fsync'd, with the old mode and owner), rename it over ``target`` and return
    its signature: readers see the old version or the new.  The temporary file goes on every way out."""
    directory, name = os.path.split(target)
    temporary = os.path.join(directory, ".%s.qstash-lists-tmp" % name)  # one name: a leftover is reused
    fd = -1
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        if old is not None:
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
            with contextlib.suppress(PermissionError):  # only root can give a file away
                os.fchown(fd, old.st_uid, old.st_gid)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.replace(temporary, target)
        temporary = ""  # renamed: nothing to remove
        with contextlib.suppress(OSError):  # the rename itself on disk: best effort (not every file system)
            dir_fd = os.open(directory or ".", os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return _signature(os.fstat(fd))
    except OSError as exc:
        raise DataError(["%s: cannot write: %s (%s); it is unchanged" % (source, exc.strerror or exc,
                                                                        exc.filename or target)]) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if temporary:  # not renamed: the temporary file goes
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _dump(document: Any, source: str, max_size: int) -> bytes:
    """The bytes of ``document`` as a data file of at most ``max_size``: a queue or endpoint a line, by the json
    module's C encoder (its indenting one is pure Python: three times as slow at 10,000 queues)."""
    def pretty(value: Any, depth: int) -> str:
        if not isinstance(value, (dict, list)) or not any(isinstance(v, (dict, list)) for v in (
                value.values() if isinstance(value, dict) else value)):
            return json.dumps(value, ensure_ascii=False)
        pad, (opening, closing) = "\n" + "  " * (depth + 1), ("[", "]") if isinstance(value, list) else ("{", "}")
        inner = [json.dumps(k, ensure_ascii=False) + ": " + pretty(v, depth + 1) for k, v in value.items()] \
            if isinstance(value, dict) else [pretty(v, depth + 1) for v in value]
        return opening + pad + ("," + pad).join(inner) + "\n" + "  " * depth + closing

    raw = (pretty(document, 0) + "\n").encode()
    if len(raw) > max_size:
        raise TooLarge(["%s: would be %s, over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE); it is unchanged"
                        % (source, megabytes(len(raw)), megabytes(max_size))])
    return raw


def record(path: str, document: dict[str, Any], token: str, max_size: int = DEFAULT_MAX_SIZE) -> Store:
    """Check ``document`` as a one-account file for ``token`` and write it to ``path``; or DataError, file unchanged."""
    raw = _dump(document, path, max_size)
    loaded = parse(raw, path, token)
    if not os.path.lexists(path):
        _replace(os.path.realpath(path), raw, None, path)
    else:
        with _locked(path, max_size) as (target, _, old):
            _replace(target, raw, old, path)
    return loaded


def from_api(item: dict[str, Any], kind: str, dropped: set[str]) -> dict[str, Any]:
    """The fields of one of QStash's answers that a data file holds; the names of the others go into ``dropped``."""
    required, optional = FIELDS[kind]
    kept = {key: value for key, value in item.items() if key in required + optional}
    dropped.update("%s.%s" % (kind, key) for key in item if key not in kept)
    if kind == "urlGroups" and type(kept.get("endpoints")) is list:
        kept["endpoints"] = [from_api(e, "endpoints", dropped) if type(e) is dict else e for e in kept["endpoints"]]
    if kind == "endpoints" and kept.get("name") in ("", None):
        kept.pop("name", None)  # QStash writes an endpoint without a name as "" or null: here it has none
    return kept


# ---- The changes a write makes to one account's object in the document ---------------------------
# Each returns what it did, for the access log ("no such queue" when there is nothing to change),
# and whether the file changes.  Times are Unix milliseconds; updatedAt never before createdAt.
Change = tuple[str, bool]


def _find(items: list[dict[str, Any]], name: str) -> Optional[dict[str, Any]]:
    return next((item for item in items if item.get("name") == name), None)


def upsert_queue(account: dict[str, Any], now: int, name: str, parallelism: int, paused: Optional[bool]) -> Change:
    """Create the queue ``name``, or update its parallelism and (if given) paused; createdAt is kept."""
    queue = _find(account.setdefault("queues", []), name)
    if queue is None:
        account["queues"].append({"createdAt": now, "updatedAt": now, "name": name, "parallelism": parallelism,
                                  "lag": 0, "paused": bool(paused)})
        return "queue created", True
    queue.update(updatedAt=max(now, queue["createdAt"]), parallelism=parallelism)
    queue["paused"] = queue.get("paused", False) if paused is None else paused
    return "queue updated", True


def pause_queue(account: dict[str, Any], now: int, name: str, paused: bool) -> Change:
    """Pause or resume the queue ``name``: a change only if it was not already so."""
    queue = _find(account.get("queues", []), name)
    if queue is None:
        return "no such queue", False
    if queue.get("paused", False) == paused:
        return "already " + ("paused" if paused else "running"), False
    queue.update(updatedAt=max(now, queue["createdAt"]), paused=paused)
    return "paused" if paused else "resumed", True


def delete_item(account: dict[str, Any], now: int, kind: str, name: str) -> Change:
    """Delete the URL group or queue ``name`` (``kind`` "urlGroups" or "queues"): nothing to do if there is none."""
    item = _find(account.get(kind, []), name)
    if item is None:
        return "not there", False
    account[kind].remove(item)
    return "deleted", True


def add_endpoints(account: dict[str, Any], now: int, name: str, endpoints: list[dict[str, str]]) -> Change:
    """Add ``endpoints`` to the URL group ``name``, creating it: a named one replaces the one of its name,
    an unnamed one is added unless the group has the same URL without a name."""
    group = _find(account.setdefault("urlGroups", []), name)
    if group is None:
        group = {"createdAt": now, "updatedAt": now, "name": name, "endpoints": []}
        account["urlGroups"].append(group)
    have = group["endpoints"]
    for endpoint in endpoints:  # in place of the same one, or else at the end
        i = next((i for i, e in enumerate(have) if e.get("name") == endpoint.get("name")
                  and ("name" in endpoint or e["url"] == endpoint["url"])), len(have))
        have[i:i + 1] = [endpoint]
    group["updatedAt"] = max(now, group["createdAt"])
    return "endpoints added", True


def remove_endpoints(account: dict[str, Any], now: int, name: str, endpoints: list[dict[str, str]]) -> Change:
    """Remove each endpoint that has every field given from the URL group ``name``, deleting it if left empty."""
    group = _find(account.get("urlGroups", []), name)
    if group is None:
        return "no such URL group", False
    kept = [e for e in group["endpoints"] if not any(all(e.get(k) == v for k, v in gone.items()) for gone in endpoints)]
    if len(kept) == len(group["endpoints"]):
        return "no endpoint matched", False
    if not kept:
        account["urlGroups"].remove(group)
        return "endpoints removed, URL group deleted", True
    group.update(updatedAt=max(now, group["createdAt"]), endpoints=kept)
    return "endpoints removed", True


def _account_of(document: dict[str, Any], digest: bytes) -> Optional[dict[str, Any]]:
    """The object in ``document`` of the account whose token's digest is ``digest`` (the one-account form: it)."""
    if "accounts" not in document:
        return document
    checker = _Checker()  # of a file that loads: each account has a good token or digest
    return next((a for i, a in enumerate(document["accounts"]) if checker.token(a, "accounts", i) == digest), None)


# ---- Watching: the snapshot in service ------------------------------------------------------------
class Status(NamedTuple):
    """What a DataFile serves, for a health check: nothing from the file but its digest."""

    version: Optional[str] = None  # the SHA-256 of the bytes in service, as sha256sum prints it; None: none yet
    loaded_at: Optional[float] = None  # when that version was put in service (a Unix time)
    failed_at: Optional[float] = None  # since when the file on disk is not what is served (a failed look)


class DataFile(Generic[T]):
    """The last good snapshot of a data file that may change while it is served, and its one writer.

    A reloader thread looks at the file's signature every ``interval`` seconds (or when woken), builds a
    changed version with ``build(raw)`` aside and puts it in service whole; a fault is logged when it starts
    and ends, and the last good snapshot stays.  Each process has its own reloader, started by a child's
    first call (see after_fork).  The first load raises DataError if ``required``; else :meth:`current` is
    None until a good version appears.  ``writable``: :meth:`update` writes the file, and :meth:`current`
    first looks whether another process has, so that every next read sees a write.
    """

    def __init__(self, path: str, build: Callable[[bytes], T], interval: float = 1.0, *,
                 max_size: int = DEFAULT_MAX_SIZE, required: bool = True, writable: bool = False) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.path, self.interval, self.max_size, self.writable = path, interval, max_size, writable
        self._build = build
        #: The signature of the version last judged, the snapshot in service and its Status: one owner, _put.
        self._state: tuple[Optional[Signature], Optional[T], Status] = (None, None, Status())
        self._fault: Optional[str] = None  # the first line of the fault last logged, until it ends
        self._closed = self._forked = False
        self._lock, self._writing = threading.Lock(), threading.Lock()  # writing: one write at a time here
        fault = self._load()
        if fault is not None:
            if required:
                raise fault
            self._report(fault)
        self._start()
        _open_files.add(self)

    def current(self) -> Optional[T]:
        """Return the newest good snapshot (None only if there has never been one)."""
        if self._forked:
            self._adopt()
        if self.writable and _stat(self.path) != self._state[0]:
            self.refresh()  # a write from another process: the next read sees it
        return self._state[1]

    def status(self) -> Status:
        """Return which version is in service, since when, and when the file on disk stopped being it."""
        if self._forked:
            self._adopt()
        signature, _, status = self._state
        if status.failed_at is None and status.version is not None and _stat(self.path) != signature:
            return status._replace(failed_at=time.time())  # changed since, and not yet looked at
        return status

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

    def update(self, digest: bytes, change: Callable[[dict[str, Any], int], Change]) -> Change:
        """Apply ``change`` to the account ``digest`` in the latest version, write it whole and serve it; raise
        Conflict (the file does not load: kept), TooLarge, LookupError (no such account) or DataError."""
        with self._writing, _locked(self.path, self.max_size) as (target, raw, old):
            if _signature(old) != self._state[0] or self._state[2].failed_at is not None:  # never overwrite a bad one
                try:
                    self._build(raw)
                except DataError as exc:
                    raise Conflict(exc.faults) from None
            document = json.loads(raw)
            account = _account_of(document, digest)
            if account is None:
                raise LookupError("no such account")
            outcome = change(account, int(time.time() * 1000))
            if outcome[1]:
                new = _dump(document, self.path, self.max_size)
                snapshot = self._build(new)
                signature = _replace(target, new, old, self.path)
                with self._lock:
                    self._put(signature, snapshot, new)
            return outcome

    def _load(self) -> Optional[DataError]:
        """Read and build the file; return its fault, if any (callers hold the lock, or are the constructor)."""
        signature = None
        try:
            raw, signature = read(self.path, self.max_size)
            self._put(signature, self._build(raw), raw)
            return None
        except DataError as exc:
            fault = exc
        except Exception:
            logger.exception("%s: cannot build a snapshot", self.path)
            fault = DataError([])
        # A version read() refused comes with its signature; one not opened, or changing, with None: read again.
        self._state = (signature or fault.signature, self._state[1], self._state[2]._replace(failed_at=time.time()))
        return fault

    def _put(self, signature: Optional[Signature], snapshot: T, raw: bytes) -> None:
        """Put ``snapshot`` in service, with the signature and the bytes it was built from: the one place."""
        self._state = (signature, snapshot, Status(hashlib.sha256(raw).hexdigest(), time.time()))
        if self._fault is not None:
            logger.info("%s: good again", self.path)
            self._fault = None

    def _report(self, fault: DataError) -> None:
        """Log a fault when it starts (not at every look while it lasts)."""
        first = fault.faults[0] if fault.faults else type(fault).__name__
        if first == self._fault:
            return
        self._fault = first
        if isinstance(fault, FileChanging):
            logger.warning("%s", fault.faults[0])
            return
        for line in fault.faults:
            logger.error("%s", line)
        outcome = "serving 503 until it is valid" if self._state[1] is None else "keeping the last good version"
        logger.error("%s: %s", self.path, outcome)

    def _start(self) -> None:
        """Start this process's reloader, holding only a weak reference: a DataFile nobody uses stops it."""
        self._wake = threading.Event()
        self._thread = threading.Thread(target=_reloader, args=(weakref.ref(self), self._wake, self.interval),
                                        daemon=True, name="qstash-lists reloader: %s" % self.path)
        self._thread.start()

    def _adopt(self) -> None:
        """The first call in a forked child: start its reloader, and look at the file now."""
        with self._lock:
            started, self._forked = self._forked, False
            if started:
                self._start()
        if started:
            self.refresh()


def _reloader(ref: "weakref.ReferenceType[DataFile[Any]]", wake: threading.Event, interval: float) -> None:
    """The loop of a DataFile's reloader thread: look every ``interval`` seconds or when woken, while it is open."""
    while True:
        force = wake.wait(interval)
        wake.clear()
        data = ref()
        if data is None or data._closed:
            return
        try:
            data.refresh(force)
        except Exception:  # never let the reloader die
            logger.exception("%s: reloader error", data.path)
        del data  # wait without holding it


_open_files: "weakref.WeakSet[DataFile[Any]]" = weakref.WeakSet()


def after_fork() -> None:
    """In a forked child (Python's fork runs this; uWSGI's post-fork hook too), give every open DataFile new locks
    and mark it: its first call starts its reloader and looks (no thread starts inside a fork hook)."""
    for data in list(_open_files):
        if not data._closed:
            data._lock, data._writing, data._forked = threading.Lock(), threading.Lock(), True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork)


def wake_all() -> None:
    """Have the reloader of every open DataFile look now (what SIGHUP does)."""
    for data in list(_open_files):
        data.wake()
