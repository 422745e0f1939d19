"""The data behind qstash-lists: load, validate, watch and write the JSON data file (no HTTP here).

The file holds one account (``{"urlGroups": [...], "queues": [...]}``, whose token the caller
supplies) or several (``{"accounts": [{"token": ...}, ...]}``).  It becomes dataclasses, or a
:class:`DataError` listing every fault with its place.  :class:`DataFile` keeps the last good
snapshot of a file people edit while it is served, and is its one writer.  From the shell: ``python
app.py --check --data FILE``.
"""

import contextlib
import dataclasses
import gc
import hashlib
import json
import logging
import os
import re
import socket
import stat
import tempfile
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, partial
from operator import attrgetter
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Union, cast
from urllib.parse import urlsplit

__all__ = [
    "Account",
    "Conflict",
    "DataError",
    "DataFile",
    "Endpoint",
    "FileChanging",
    "LimitReached",
    "Limits",
    "Queue",
    "Status",
    "Store",
    "TokenMissing",
    "TooLarge",
    "UrlGroup",
    "add_endpoints",
    "after_fork",
    "check_token",
    "delete_item",
    "encode",
    "from_api",
    "is_flag",
    "is_http_url",
    "is_name",
    "is_text",
    "is_whole",
    "load",
    "megabytes",
    "parse",
    "pause_queue",
    "read",
    "read_at_most",
    "record",
    "remove_endpoints",
    "unique_keys",
    "upsert_queue",
    "wake_all",
]

logger = logging.getLogger("qstash_lists")

#: The shipped data.json, indented as ``python app.py --example`` prints it: a starter file of
#: one account.
EXAMPLE = """\
{"urlGroups": [
 {"createdAt": 1700000000000, "updatedAt": 1700000500000, "name": "orders", "endpoints": [
   {"name": "billing", "url": "https://billing.example.com/hooks/orders"},
   {"name": "shipping", "url": "https://shipping.example.com/hooks/orders"}]},
 {"createdAt": 1700001000000, "updatedAt": 1700001000000, "name": "signups", "endpoints": [
   {"url": "https://crm.example.com/webhooks/signup"}]}],
 "queues": [
  {"createdAt": 1700000000000, "updatedAt": 1700000000000, "name": "emails",
   "parallelism": 2, "lag": 0, "paused": false},
  {"createdAt": 1700002000000, "updatedAt": 1700003000000, "name": "reports",
   "parallelism": 1, "lag": 12, "paused": true}]}
"""
#: A larger data file is refused (--max-size); loading takes several times it.
DEFAULT_MAX_SIZE = 64 * 1024 * 1024
MAX_SAFE_INTEGER = 2**53 - 1  # the largest integer a JavaScript client reads back exactly
_YEAR_2001_MS = 978307200000
MAX_FAULTS = 50  # how many faults one report lists before it counts the rest
READ_ATTEMPTS = 4  # reads of a file that changes while it is read, in one look, before giving up
#: How long a write waits for another's (then 503): a worker thread is held no longer.
LOCK_TIMEOUT = 1.0
#: Versions saved by hand while one write works that it redoes its change on, before a 409.
WRITE_ATTEMPTS = 3
#: The writes a process may have at work while another process holds the lock (then 503 at once),
#: so that waiting writes never hold every thread a read needs: a server whose thread count is
#: known gives half of it (python app.py, testing.serve); this is for the others.
WAITING_WRITES = 8
_READ_CHUNK = 1 << 24
_MISSING: Any = object()  # a key the object does not have (its fault is said once, as missing)
_PIECES_A_CALL = 1000  # a writev's pieces, under IOV_MAX (1024)
#: QStash's rule for the names of URL groups and queues (a 400 otherwise).
NAME_RULE = "only letters, digits, '-', '.' and '_'"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TOKEN = re.compile(r"[!-~]+")  # visible ASCII: what fits in "Bearer <token>"
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
    stat.S_IFBLK: "a block device",
}

#: What tells versions of a file apart: inode, device, size, mtime and ctime (cp -p and tar set an
#: mtime back, not it).
Signature = tuple[int, int, int, int, int]

#: The data file's layout as the writer writes it, which the reader reuses by (see _split): a file
#: of several accounts is FILE_OPEN, each account's ``lines`` with ACCOUNT_SEPARATOR between them,
#: and FILE_CLOSE; a file of one account is its ``lines`` and SINGLE_CLOSE.
FILE_OPEN = b'{"accounts": [\n'
ACCOUNT_SEPARATOR = b",\n"
FILE_CLOSE = b"\n]}\n"
SINGLE_CLOSE = b"\n"


class Limits(NamedTuple):
    """What writes may create in one account (QStash has plan limits); a data file that holds more
    still loads."""

    items: int = 1000  # queues, and URL groups, per account (--max-items)
    endpoints: int = 1000  # endpoints per URL group (--max-endpoints)
    name: int = 200  # characters in the name of a queue or URL group a write creates (--max-name)


class DataError(Exception):
    """A data file that cannot be served or written: ``faults``, one line each, and the
    ``signature`` judged."""

    def __init__(self, faults: list[str], signature: Optional[Signature] = None) -> None:
        super().__init__("\n".join(faults))
        self.faults, self.signature = faults, signature


class TokenMissing(DataError):
    """A file in the one-account form, loaded without a token for that account."""


class FileChanging(DataError):
    """The file changed each time it was read: a writer is busy with it."""


class Conflict(DataError):
    """A write found the file on disk in a state it must not overwrite (it does not load)."""


class TooLarge(DataError):
    """A write would make the file larger than its size limit, or the account larger than its share
    of it."""


class Busy(DataError):
    """A write that could not have the lock in time: another process, or this one's writes before
    it, held it."""


class LimitReached(DataError):
    """A write would make more items in an account, or endpoints in a URL group, than the Limits
    allow."""


# ---- The rules, each written once; the schema and the checker judge every value by them ----------
def is_whole(value: Any) -> bool:
    """A JSON integer (not true, not 1.0) from 0 to 2**53 - 1: what a JavaScript client reads
    exactly."""
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


def is_flag(value: Any) -> bool:
    """true or false."""
    return type(value) is bool


class Rule(NamedTuple):
    """What a field's values must be: its check, and what a fault's message says it expects."""

    check: Callable[[Any], bool]
    expected: str


WHOLE = Rule(is_whole, "an integer from 0 to 2**53 - 1")
NAME = Rule(is_name, NAME_RULE)
FLAG = Rule(is_flag, "true or false")
HTTP_URL = Rule(is_http_url, "an absolute http or https URL")
TEXT = Rule(is_text, "printable characters (no control characters, line breaks or lone surrogates)")


def check_token(token: str) -> Optional[str]:
    """Return why ``token`` cannot be used as a bearer token, or None if it can."""
    return (
        None
        if _TOKEN.fullmatch(token)
        else "expected a non-empty token of visible ASCII characters, no spaces"
    )


def megabytes(size: int) -> str:
    """Return a size for a message: in MB (of 2**20 bytes, as ``--max-size 64M``), or in bytes below
    0.1 MB."""
    return (
        "%d bytes" % size
        if size < 0x19999
        else ("%.1f" % (size / 0x100000)).removesuffix(".0") + " MB"
    )


# ---- The items: one schema serves loading, checking, serving, writing and recording -----------
# A field is declared once, as ``_rule(its Rule, or the item kind of its array[, its default if
# optional])``: loading, checking, serving, writing and recording follow from it.  Its JSON key is
# its name in camelCase, and it is left out of the JSON while it is None.  Items are not frozen (a
# frozen dataclass's __setattr__ costs about as much as parsing the file), but nothing changes one:
# a change makes a new one (dataclasses.replace).
def _rule(rule: Any, default: Any = dataclasses.MISSING, required: bool = False) -> Any:
    """A field of an item, judged by ``rule`` (a Rule, or an item kind for an array of them);
    optional if it has a ``default`` (but ``required``)."""
    return field(
        default=default,
        metadata={"rule": rule, "required": required or default is dataclasses.MISSING},
    )


class _Item:
    """What queues, URL groups and endpoints share: the API's JSON object, encoded once."""

    def to_dict(self) -> dict[str, Any]:
        """The API's object, keys in QStash's order."""
        return {
            key: value
            for attr, key in SCHEMA[type(self)].keys
            for value in (getattr(self, attr),)
            if value is not None
        }

    @cached_property
    def raw(self) -> bytes:
        """The API's compact JSON of this item: its list entry, its answer and its line in the data
        file (but a URL group's endpoints are one a line there: its ``lines``)."""
        return encode(self)


@dataclass
class Endpoint(_Item):
    """One endpoint of a URL group."""

    name: Optional[str] = _rule(TEXT, None)
    # A default only so that it may follow name, as in QStash's.
    url: str = _rule(HTTP_URL, "", required=True)


@dataclass
class UrlGroup(_Item):
    """A URL group (the API's "topic") and its endpoints."""

    created_at: int = _rule(WHOLE)
    updated_at: int = _rule(WHOLE)
    name: str = _rule(NAME)
    endpoints: tuple[Endpoint, ...] = _rule(Endpoint)  # an array of items of that kind

    @cached_property
    def lines(self) -> bytes:
        if not self.endpoints:
            return self.raw
        """This group in the data file: its fields, then its endpoints one a line."""
        fields = encode({key: v for key, v in self.to_dict().items() if key != "endpoints"})
        endpoints = b",\n    ".join([endpoint.raw for endpoint in self.endpoints])
        # Endpoints is its last field: its object then ends with its array.
        return fields[: -len(b"}")] + b',"endpoints":[\n    ' + endpoints + b"\n  ]}"


@dataclass
class Queue(_Item):
    """A queue."""

    created_at: int = _rule(WHOLE)
    updated_at: int = _rule(WHOLE)
    name: str = _rule(NAME)
    parallelism: int = _rule(WHOLE)
    lag: int = _rule(WHOLE)
    paused: bool = _rule(FLAG, False)


Item = Union[UrlGroup, Queue]


class Field(NamedTuple):
    """One field of an item kind, as its declaration (_rule) gives it."""

    attr: str  # the dataclass's attribute
    key: str  # the JSON key: the attribute in camelCase
    rule: Any  # a Rule, or an item kind (the field is an array of them)
    required: bool


class Schema(NamedTuple):
    """An item kind's fields, in QStash's order."""

    fields: tuple[Field, ...]

    @property
    def keys(self) -> list[tuple[str, str]]:
        return [(f.attr, f.key) for f in self.fields]


def _schema(cls: type) -> Schema:
    """The schema that ``cls``'s declarations give; a TypeError names a field declared without
    its rule."""
    fields = []
    for declared in dataclasses.fields(cls):
        rule = declared.metadata.get("rule")
        if not isinstance(rule, Rule) and rule not in (Endpoint, UrlGroup, Queue):
            raise TypeError(
                "%s.%s: declare it with _rule(a store.Rule, or an item kind[, its default])"
                % (cls.__name__, declared.name)
            )
        key = re.sub("_(.)", lambda m: m.group(1).upper(), declared.name)
        fields.append(Field(declared.name, key, rule, declared.metadata["required"]))
    return Schema(tuple(fields))


#: Each item kind's schema.
SCHEMA: dict[type, Schema] = {cls: _schema(cls) for cls in (Endpoint, UrlGroup, Queue)}


def _builder(cls: type) -> Callable[[Any, "dict[str, int]", int], Any]:
    """The checker's short way for an item of kind ``cls``, written from its schema as dataclasses
    write __init__: the item when every key and value is as the rules want (the same rules, in
    the same order, as _Checker.item), else None, and _Checker.item says what is wrong.  What the
    names it notes in ``seen`` hold is what _Checker.item notes."""
    fields = SCHEMA[cls].fields
    required = [n for n, f in enumerate(fields) if f.required]
    lines = [
        "def build(value, seen, i):",
        "    if type(value) is not dict:",
        "        return None",
        "    try:",
        *["        v%d = value[%r]" % (n, fields[n].key) for n in required],
        "    except KeyError:",
        "        return None",
        "    given = %d" % len(required),
    ]
    names: dict[str, Any] = {"cls": cls, "MISSING": _MISSING, "array": _built_array}
    for n, f in enumerate(fields):
        names["check%d" % n] = f.rule.check if isinstance(f.rule, Rule) else _BUILDERS[f.rule]
        if not f.required:
            names["default%d" % n] = dataclasses.fields(cls)[n].default
            lines.append("    v%d = value.get(%r, MISSING)" % (n, f.key))
            lines.append("    if v%d is MISSING:" % n)
            lines.append("        v%d = default%d" % (n, n))
            lines.append("    else:")
            lines.append("        given += 1")
        indent = "    " if f.required else "        "
        if not isinstance(f.rule, Rule):
            lines.append("%sv%d = array(check%d, v%d)" % (indent, n, n, n))
            lines.append("%sif v%d is None:" % (indent, n))
        elif f.key == "name":
            lines.append(
                "%sif not check%d(v%d) or seen.setdefault(v%d, i) != i:" % (indent, n, n, n)
            )
        elif f.key == "updatedAt":  # not before createdAt, which the schema gives first
            lines.append("%sif not check%d(v%d) or v0 > v%d:" % (indent, n, n, n))
        else:
            lines.append("%sif not check%d(v%d):" % (indent, n, n))
        lines.append("%s    return None" % indent)
    # A key the schema does not know (or one given twice: _pairs notes them under a key of its own).
    lines.append("    if len(value) != given:")
    lines.append("        return None")
    lines.append("    return cls(%s)" % ", ".join("v%d" % n for n in range(len(fields))))
    exec("\n".join(lines), names)  # noqa: S102 (the schema's own code, as dataclasses')
    return cast("Callable[[Any, dict[str, int], int], Any]", names["build"])


def _built_array(build: Callable[[Any, "dict[str, int]", int], Any], value: Any) -> Any:
    """The tuple of the items of the array ``value``, each built by ``build``; None if any is not
    (or ``value`` is no array)."""
    if type(value) is not list:
        return None
    seen: dict[str, int] = {}
    items = []
    for j, each in enumerate(value):
        item = build(each, seen, j)
        if item is None:
            return None
        items.append(item)
    return tuple(items)


_BUILDERS: dict[type, Callable[[Any, "dict[str, int]", int], Any]] = {}
_BUILDERS.update((cls, _builder(cls)) for cls in (Endpoint, UrlGroup, Queue))
#: The arrays of the file: each one's key, the Account field that holds it, its item kind.
ARRAYS = (("urlGroups", "url_groups", UrlGroup), ("queues", "queues", Queue))
#: The keys each object of the file takes: required, then optional.
KEYS: dict[Any, tuple[tuple[str, ...], tuple[str, ...]]] = {
    **{
        cls: (
            tuple(f.key for f in SCHEMA[cls].fields if f.required),
            tuple(f.key for f in SCHEMA[cls].fields if not f.required),
        )
        for cls in SCHEMA
    },
    "accounts": ((), ("token", "tokenSha256", "urlGroups", "queues", "signingKeys")),
    "signingKeys": (("current", "next"), ()),
    "(top level)": ((), ("urlGroups", "queues", "signingKeys", "accounts")),
}


def encode(document: Any) -> bytes:
    """Return ``document`` as the API writes it: compact UTF-8 JSON (items as their ``to_dict``)."""
    return _ENCODER.encode(document).encode()


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=lambda item: item.to_dict()
)  # built once: json.dumps builds one a call


def array(items: Mapping[str, Item]) -> bytes:
    """The API's array of ``items``, from the bytes of each, encoded once."""
    return b"[" + b",".join([item.raw for item in items.values()]) + b"]"


@dataclass(frozen=True, eq=False)
class Account:
    """The URL groups and queues that one token sees, each by name in the file's order."""

    # Only the digest, and not in repr: a weak token could be guessed.
    token_sha256: bytes = field(repr=False)
    url_groups: Mapping[str, UrlGroup] = field(default_factory=dict)
    queues: Mapping[str, Queue] = field(default_factory=dict)
    # (current, next); secrets.
    signing_keys: Optional[tuple[str, str]] = field(default=None, repr=False)
    # Its key and value in a file of accounts.
    credential: Optional[tuple[str, str]] = field(default=None, repr=False)
    #: Answers encoded for this account, kept while it is unchanged (a write makes a new Account).
    cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)

    def item(self, kind: str, name: str) -> Optional[Item]:
        """Return the item of ``kind`` ("url_groups" or "queues") named ``name``, or None."""
        return cast("Mapping[str, Item]", getattr(self, kind)).get(name)

    @cached_property
    def lines(self) -> bytes:
        """This account's object in the data file: a field, queue, URL group or endpoint a line."""
        fields = []  # each '"key": value'
        if self.credential is not None:
            fields.append(json.dumps(dict([self.credential]))[1:-1].encode())
        if self.signing_keys is not None:
            keys = json.dumps(dict(zip(("current", "next"), self.signing_keys)))
            fields.append(b'"signingKeys": ' + keys.encode())
        for key, items, attr in (
            (b"urlGroups", self.url_groups, "lines"),
            (b"queues", self.queues, "raw"),
        ):
            lines = list(map(attrgetter(attr), items.values()))  # each encoded once, fetched in C
            if lines:
                fields.append(b'"%s": [\n  %s\n ]' % (key, b",\n  ".join(lines)))
            else:
                fields.append(b'"%s": []' % key)
        return b"{" + b",\n ".join(fields) + b"}"


@dataclass(frozen=True)
class Store:
    """Every account of one loaded data file, found by the SHA-256 digest of its token."""

    accounts: tuple[Account, ...]
    single_account: bool = False  # the file holds one account ({"urlGroups": ..., "queues": ...})
    # ... served with the fallback token, as no token was given (see parse).
    fallback_used: bool = False

    @cached_property
    def by_digest(self) -> Mapping[bytes, Account]:
        """Each account by the SHA-256 digest of its token."""
        return {account.token_sha256: account for account in self.accounts}

    def find(self, token: bytes) -> Optional[Account]:
        """Return the account whose token is ``token``, or None, by its SHA-256: timing tells a
        probe no token."""
        return self.by_digest.get(hashlib.sha256(token).digest())

    def lines(self) -> list[bytes]:
        """The data file of this store in pieces, written as they are: each account's bytes, and
        what goes between (the layout: FILE_OPEN)."""
        if self.single_account:
            return [self.accounts[0].lines, SINGLE_CLOSE]
        pieces = [FILE_OPEN]
        for i, account in enumerate(self.accounts):
            if i:
                pieces.append(ACCOUNT_SEPARATOR)
            pieces.append(account.lines)
        pieces.append(FILE_CLOSE)
        return pieces

    @cached_property
    def size(self) -> int:
        """The size of this store's data file, in bytes."""
        return sum(map(len, self.lines()))

    def warnings(self, source: str) -> list[str]:
        """Return what looks wrong in a valid file, one line each: no account, times in seconds."""
        if not self.accounts:
            return ["%s: warning: no account at all: every request will get 401" % source]
        early = [
            "%s%s[%d].%s"
            % ("" if self.single_account else "accounts[%d]." % i, key, j, name)  # before 2001
            for i, account in enumerate(self.accounts)
            for key, kind, _ in ARRAYS
            for j, item in enumerate(cast("Mapping[str, Item]", getattr(account, kind)).values())
            for name, value in (("createdAt", item.created_at), ("updatedAt", item.updated_at))
            if 0 < value < _YEAR_2001_MS
        ]
        return (
            [
                "%s: warning: %s%s looks like seconds, not milliseconds (before 2001 as "
                "milliseconds)"
                % (source, early[0], " (and %d more)" % (len(early) - 1) if len(early) > 1 else "")
            ]
            if early
            else []
        )

    def summary(self) -> str:
        """Return "N accounts, N URL groups, N queues"."""
        counts = (
            len(self.accounts),
            sum(len(account.url_groups) for account in self.accounts),
            sum(len(account.queues) for account in self.accounts),
        )
        return ", ".join(
            "%d %s%s" % (n, noun, "" if n == 1 else "s")
            for n, noun in zip(counts, ("account", "URL group", "queue"))
        )


# ---- Loading: parse and check -------------------------------------------------------------------
def load(
    path: str,
    token: Optional[str],
    fallback: Optional[str] = None,
    max_size: int = DEFAULT_MAX_SIZE,
) -> Store:
    """Read (see :func:`read`) and validate the data file at ``path`` (see :func:`parse`); raise
    DataError."""
    return parse(read(path, max_size)[0], path, token, fallback)


def parse(
    raw: bytes,
    source: str,
    token: Optional[str],
    fallback: Optional[str] = None,
) -> Store:
    """Validate the JSON document ``raw`` (``source`` names it).  A one-account file gets ``token``,
    else ``fallback`` (then ``fallback_used``), else TokenMissing."""
    checker = _Checker()
    with _collector_paused:
        accounts = checker.document(_json(raw, source), fallback if token is None else token)
    if checker.faults:
        lines = ["%s: %s" % (source, fault) for fault in checker.faults[:MAX_FAULTS]]
        if len(checker.faults) > MAX_FAULTS:
            lines.append("%s: ... and %d more" % (source, len(checker.faults) - MAX_FAULTS))
        raise DataError(lines)
    fallback_used = checker.single_account and token is None
    if fallback_used and fallback is None:
        raise TokenMissing(
            [
                "%s: holds a single account, and QSTASH_TOKEN is not set: set it to the token its "
                "clients send" % source
            ]
        )
    return Store(accounts, checker.single_account, fallback_used)


class _CollectorPause:
    """Pauses the cyclic garbage collector while files are parsed: its passes over the objects a
    parse makes, which hold no cycle, cost a tenth of the load (docs/performance.md).  The last
    of the parses under way resumes it, if it ran before the first one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _parses and _resume
        self._parses = 0
        self._resume = False  # the collector ran before the parses under way (none: False)

    def __enter__(self) -> None:
        with self._lock:
            if self._parses == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._parses += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._parses -= 1
            if self._parses == 0 and self._resume:
                gc.enable()
                self._resume = False

    def after_fork(self) -> None:
        """In a forked child: the parses under way were the parent's threads', which are not here
        to end them (nor to let go of the lock)."""
        self._lock = threading.Lock()
        self._parses = 0
        if self._resume:
            gc.enable()
            self._resume = False


_collector_paused = _CollectorPause()  # the one pause of this process's collector


_TWICE: Any = object()  # the key, in an object that gave some key twice, of the keys given twice


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object as json.loads builds it, and the keys it gave more than once under _TWICE (not
    JSON's)."""
    value = dict(pairs)
    if len(value) < len(pairs):
        value[_TWICE] = sorted(
            key for key, count in Counter(key for key, _ in pairs).items() if count > 1
        )
    return value


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object as json.loads builds it, or a DataError naming a key it gives twice (an
    object_pairs_hook)."""
    value = _pairs(pairs)
    if _TWICE in value:
        raise DataError(["%s: given twice in one object" % _show(value[_TWICE][0])[1:-1]])
    return value


def _json(raw: bytes, source: str) -> Any:
    """The JSON document ``raw`` of the data file ``source``, or a DataError that says where it is
    not."""
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is harmless
    except UnicodeDecodeError as exc:
        raise DataError(
            ["%s: not UTF-8 text: %s at byte %d" % (source, exc.reason, exc.start)]
        ) from None
    if not text or text.isspace():  # (strip would copy the whole file)
        raise DataError(
            [
                "%s: empty: a data file is a JSON object (python app.py --example prints one)"
                % source
            ]
        )
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        line, column, message = exc.lineno, exc.colno, exc.msg
        # 3.13 points at the comma, earlier ones after it.
        pos = exc.pos + (text[exc.pos : exc.pos + 1] == ",")
        closing = len(text) - len(text[pos:].lstrip())
        if text[:pos].rstrip().endswith(",") and text[closing : closing + 1] in ("]", "}"):
            line, column = text.count("\n", 0, closing) + 1, closing - text.rfind("\n", 0, closing)
            message = "a comma before the closing '%s' (JSON allows none)" % text[closing]
        raise DataError(
            ["%s: line %d, column %d: invalid JSON: %s" % (source, line, column, message)]
        ) from None
    except RecursionError:
        raise DataError(["%s: invalid JSON: nested too deeply" % source]) from None
    # Python (3.11, 3.10.7, 3.9.14 on) reads no integer of over 4,300 digits, and says not where.
    except ValueError:
        raise DataError(
            ["%s: invalid JSON: an integer of more than 4,300 digits" % source]
        ) from None


class _Checker:
    """Turns the parsed document into dataclasses, judging each value by its field's rule and noting
    every fault (its place spelled out only then)."""

    def __init__(self) -> None:
        self.faults: list[str] = []
        self.single_account = False

    def fault(self, array: str, i: Optional[int], key: Optional[str], message: str) -> None:
        """Note a fault at ``key`` of element ``i`` of ``array`` (either may be None)."""
        where = array if i is None else "%s[%d]" % (array, i)
        if key is not None:
            # A key from the file: keep the line short and whole.
            if len(key) > 60 or not key.isprintable():
                key = _show(key)
            where = key if where == "(top level)" else "%s.%s" % (where, key)
        self.faults.append("%s: %s" % (where, message))

    def document(self, value: Any, token: Optional[str]) -> tuple[Account, ...]:
        if type(value) is dict and "accounts" in value:
            for key in value:
                if key != "accounts":
                    self.fault(
                        "(top level)",
                        None,
                        key,
                        "unknown key next to 'accounts' (a file lists accounts, or holds "
                        "'urlGroups' and 'queues' of one account, not both)",
                    )
            digests: dict[bytes, int] = {}
            return tuple(
                account
                for i, v in enumerate(self.each(value["accounts"], "accounts"))
                for account in (self.account(v, "accounts", i, digests),)
                if account is not None
            )
        top = self.fields(value, "(top level)", None, "(top level)")
        if top is None:
            return ()
        self.single_account = True
        digest = b"" if token is None else hashlib.sha256(token.encode()).digest()
        return (self.collections(top, "", digest, None),)

    def each(self, value: Any, array: str) -> list[Any]:
        """The array ``value``, or [] and a fault if it is not one."""
        if type(value) is not list:
            self.fault(array, None, None, "expected an array, got %s" % _show(value))
            return []
        return value

    def fields(self, value: Any, array: str, i: Optional[int], kind: Any) -> Any:
        """Return ``value`` if it is an object; say which of its keys are unknown, missing or given
        twice."""
        required, optional = KEYS[kind]
        if (
            type(value) is dict
            and value.keys() >= set(required)
            and value.keys() <= set(required + optional)
        ):
            return value
        if type(value) is not dict:
            self.fault(array, i, None, "expected an object, got %s" % _show(value))
            return None
        for key in value:
            if key is _TWICE:
                for twice in value[_TWICE]:
                    self.fault(array, i, twice, "given twice in one object (only one is allowed)")
            elif key not in required + optional:
                self.fault(
                    array, i, key, "unknown key (expected '%s')" % "', '".join(required + optional)
                )
        for key in (key for key in required if key not in value):
            self.fault(array, i, key, "missing")
        return value  # what is there is judged too: every fault of an item is reported

    def item(self, value: Any, array: str, i: int, cls: Any, seen: dict[str, int]) -> Any:
        """Build the item of kind ``cls`` at ``array[i]`` by its schema, rule by rule, or note its
        faults and return None (collections tries the short way, _BUILDERS, first)."""
        faults, item = len(self.faults), self.fields(value, array, i, cls)
        if item is None:
            return None
        values: dict[str, Any] = {}
        for attr, key, rule, _ in SCHEMA[cls].fields:  # a required key missing: said by fields
            found = item.get(key, _MISSING)
            if found is _MISSING:
                continue
            if not isinstance(rule, Rule):  # an array of items of that kind
                where, names = "%s[%d].%s" % (array, i, key), cast("dict[str, int]", {})
                each = self.each(found, where)
                found = tuple([self.item(v, where, j, rule, names) for j, v in enumerate(each)])
            elif key == "name":
                self.name(found, array, i, seen, rule)
            elif not rule.check(found):
                self.fault(array, i, key, "expected %s, got %s" % (rule.expected, _show(found)))
                continue
            elif key == "updatedAt" and values.get("created_at", -1) > found:
                self.fault(
                    array,
                    i,
                    key,
                    "expected a time not before createdAt (%d), got %d"
                    % (values["created_at"], found),
                )
            values[attr] = found
        return cls(**values) if len(self.faults) == faults else None

    def name(self, value: Any, array: str, i: int, seen: dict[str, int], rule: Rule) -> None:
        """Note an item's name in its array, or say why it breaks its rule or is there already."""
        if not rule.check(value):
            expected = rule.expected
            if type(value) is not str or not value:
                expected = "a non-empty string"
            self.fault(array, i, "name", "expected %s, got %s" % (expected, _show(value)))
        elif seen.setdefault(value, i) != i:
            self.fault(
                array,
                i,
                "name",
                "duplicate name %s (also at %s[%d].name)" % (_show(value), array, seen[value]),
            )

    def account(
        self, value: Any, array: str, i: int, digests: dict[bytes, int]
    ) -> Optional[Account]:
        """Build the account at ``array[i]``, noting its token's digest in ``digests``."""
        item = self.fields(value, array, i, "accounts")
        digest = None if item is None else self.token(item, array, i)
        if digest is None:
            return None
        if digests.setdefault(digest, i) != i:
            self.fault(array, i, None, "same token as %s[%d]" % (array, digests[digest]))
        key = "token" if "token" in item else "tokenSha256"
        return self.collections(item, "%s[%d]." % (array, i), digest, (key, item[key]))

    def token(self, item: dict[str, Any], array: str, i: int) -> Optional[bytes]:
        if ("token" in item) == ("tokenSha256" in item):
            self.fault(array, i, None, "expected exactly one of 'token' or 'tokenSha256'")
            return None
        if "token" in item:
            problem = (
                check_token(item["token"]) if type(item["token"]) is str else "expected a string"
            )
            if problem is not None:
                # Never the value: it is meant to be a secret.
                self.fault(array, i, "token", problem)
            return hashlib.sha256(item["token"].encode()).digest() if problem is None else None
        value = item["tokenSha256"]
        if type(value) is str and _SHA256_HEX.fullmatch(value):
            return bytes.fromhex(value)
        # Never show the value either: it may be the token itself, pasted in the wrong field.
        got = "a string of %d characters" % len(value) if type(value) is str else _show(value)
        self.fault(
            array,
            i,
            "tokenSha256",
            "expected 64 hexadecimal digits (a SHA-256 digest, printf %%s TOKEN | "
            "sha256sum), got %s" % got,
        )
        return None

    def collections(
        self,
        item: dict[str, Any],
        prefix: str,
        digest: bytes,
        credential: Optional[tuple[str, str]],
    ) -> Account:
        arrays: dict[str, dict[str, Any]] = {}
        for key, kind, cls in ARRAYS:
            seen: dict[str, int] = {}
            build, built = _BUILDERS[cls], arrays.setdefault(kind, {})
            for i, value in enumerate(self.each(item.get(key, []), prefix + key)):
                one = build(value, seen, i)  # the short way (see _builder), else the checker's
                if one is None:
                    one = self.item(value, prefix + key, i, cls, seen)
                if one is not None:
                    built[one.name] = one
        keys, value = None, item.get("signingKeys")
        # Never the value: signing keys are secrets.
        if value is not None and type(value) is not dict:
            self.fault(
                prefix + "signingKeys", None, None, "expected an object with 'current' and 'next'"
            )
        elif (
            value is not None
            and self.fields(value, prefix + "signingKeys", None, "signingKeys") is not None
        ):
            for key in ("current", "next"):
                if not is_text(value.get(key, "-")):  # missing is said already
                    self.fault(
                        prefix + "signingKeys", None, key, "expected a non-empty printable string"
                    )
            keys = (value.get("current", ""), value.get("next", ""))
        return Account(digest, arrays["url_groups"], arrays["queues"], keys, credential)


def _show(value: Any) -> str:
    """Name a JSON value in a fault message, briefly."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():  # a line break or a lone surrogate: escape all but ASCII
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- Reading: never blocks, never half a version ------------------------------------------------
def read(path: str, max_size: int = DEFAULT_MAX_SIZE) -> tuple[bytes, Signature]:
    """Return the bytes of the data file at ``path`` (never blocking: a regular file of at most
    ``max_size`` bytes) and the signature of the version read, read again while it changes; or a
    DataError of one line."""
    for _ in range(READ_ATTEMPTS):
        fd = _open(path)
        try:
            found = _read_open(fd, path, max_size)
        finally:
            os.close(fd)
        if found is not None:
            return found
        time.sleep(0.02)  # give the writer a moment
    raise FileChanging(
        [
            "%s: changed each time it was read (%d times); looking again later"
            % (path, READ_ATTEMPTS)
        ]
    )


def _read_open(fd: int, path: str, max_size: int) -> Optional[tuple[bytes, Signature]]:
    """Read the open file ``fd`` from its start; return its bytes and signature, or None if it
    changed while it was read (a writer at work); a DataError of one line if it cannot be read."""
    try:
        before = os.fstat(fd)
        judged, limit = _signature(before), "the limit of %s" % megabytes(max_size)
        if not stat.S_ISREG(before.st_mode):
            kind = _KINDS.get(stat.S_IFMT(before.st_mode), "not a plain file")
            raise DataError(["%s: cannot read: not a regular file but %s" % (path, kind)], judged)
        if before.st_size > max_size:
            raise DataError(
                [
                    "%s: cannot read: %s, over %s (--max-size, QSTASH_LISTS_MAX_SIZE)"
                    % (path, megabytes(before.st_size), limit)
                ],
                judged,
            )
        os.lseek(fd, 0, os.SEEK_SET)
        raw = read_at_most(partial(os.read, fd), max_size)
        if raw is None:
            raise DataError(
                [
                    "%s: cannot read: grew past %s while being read (--max-size, "
                    "QSTASH_LISTS_MAX_SIZE)" % (path, limit)
                ],
                judged,
            )
        after = os.fstat(fd)
    except OSError as exc:
        raise DataError(["%s: cannot read: %s" % (path, exc.strerror or exc)]) from None
    if _rewritten(before, after) or len(raw) != after.st_size:
        return None
    return raw, judged


def _rewritten(before: os.stat_result, after: os.stat_result) -> bool:
    """Tell whether an open file's bytes may have changed between two of its stats.  Its size or
    mtime says so; its ctime too (``cp -p`` sets the mtime back, not the ctime), but for a file
    that another was renamed over meanwhile (no link left: a finished version, a writer's or an
    editor's, which nobody writes into): the rename is not a writer at work."""
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        return True
    return before.st_ctime_ns != after.st_ctime_ns and after.st_nlink > 0


def _open(path: str) -> int:
    try:
        return os.open(
            path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        )
    except OSError as exc:
        kind = None
        # A socket cannot even be opened: name it, as fstat would.
        with contextlib.suppress(OSError):
            kind = _KINDS.get(stat.S_IFMT(os.stat(path).st_mode))
        reason = "not a regular file but %s" % kind if kind else exc.strerror or str(exc)
        raise DataError(["%s: cannot read: %s" % (path, reason)]) from None


def read_at_most(read: Callable[[int], bytes], limit: int) -> Optional[bytes]:
    """Read to the end by ``read(n)`` in chunks (a file may end past what fstat said); None past
    ``limit`` bytes."""
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


# ---- Reuse: what another process's write left as it was ------------------------------------------
class _Split(NamedTuple):
    """A file of several accounts seen against the store in service: the accounts it begins and
    ends with, byte for byte, with the separators between them; and the bytes between those (the
    rest of the array, each element to be parsed)."""

    head: tuple[Account, ...]
    middle: bytes
    tail: tuple[Account, ...]
    #: Whether a separator the ends keep joins them to the middle, which must then hold an element.
    joined: bool


def _split(raw: bytes, known: tuple[Account, ...]) -> Optional[_Split]:
    """Account for every byte of ``raw`` as FILE_OPEN, the ``known`` accounts it keeps at its two
    ends (each its exact ``lines``, each followed or preceded by ACCOUNT_SEPARATOR), the middle, and
    FILE_CLOSE; or None where the layout is not the writer's.  The middle then holds the array's
    other elements (see _reuse)."""
    if not (raw.startswith(FILE_OPEN) and raw.endswith(FILE_CLOSE)):
        return None
    at, end = len(FILE_OPEN), len(raw) - len(FILE_CLOSE)
    if at > end:
        return None
    head = 0
    while head < len(known):
        lines = known[head].lines
        after = at + len(lines)
        if raw.startswith(lines, at, end) and after == end:  # the last element: all accounted for
            return _Split(known[: head + 1], b"", (), joined=False)
        if not (raw.startswith(lines, at, end) and raw.startswith(ACCOUNT_SEPARATOR, after, end)):
            break
        at, head = after + len(ACCOUNT_SEPARATOR), head + 1
    tail, stop = len(known), end
    while tail > head:
        lines = known[tail - 1].lines
        before = stop - len(lines)
        if not (raw.endswith(lines, at, stop) and raw.endswith(ACCOUNT_SEPARATOR, at, before)):
            break
        stop, tail = before - len(ACCOUNT_SEPARATOR), tail - 1
    return _Split(known[:head], raw[at:stop], known[tail:], joined=bool(head or tail < len(known)))


def _reuse(raw: bytes, known: Optional[Store]) -> Optional[Store]:
    """The store that :func:`parse` makes of ``raw`` (a file of several accounts), made by parsing
    only what is not byte for byte an account of ``known``; or None where that cannot be shown the
    same (another layout, a fault anywhere: the whole parse then says what parse says)."""
    if known is None or known.single_account:
        return None
    split = _split(raw, known.accounts)
    if split is None:
        return None
    kept = split.head + split.tail
    try:
        elements = _json(b"[" + split.middle + b"]", "")
    except DataError:
        return None
    if split.joined and not elements:  # a separator with no element after it, or before it
        return None
    checker = _Checker()
    digests = {account.token_sha256: -1 for account in kept}
    middle = [checker.account(value, "accounts", i, digests) for i, value in enumerate(elements)]
    if checker.faults:  # a token twice among them all is one (see _Checker.account)
        return None
    return Store(split.head + tuple(cast("list[Account]", middle)) + split.tail)


# ---- Writing: the one writer, for writes and --record alike --------------------------------------
class _Held(NamedTuple):
    """The data file as its writer holds it: open, with every writer's lock on that very file."""

    fd: int  # open on the file, with the flock on it (closing it lets go)
    target: str  # the path's target (its symlink resolved) when the lock was taken
    stat: os.stat_result  # the file then: the new version gets its mode and owner

    def names(self, path: str, signature: Signature) -> bool:
        """Whether ``path`` still leads to this very file, as the version ``signature`` (neither
        re-pointed, nor replaced, nor written into meanwhile)."""
        return os.path.realpath(path) == self.target and _stat(path) == signature


@contextlib.contextmanager
def _locked(
    path: str, deadline: float, waiting: Callable[[bool], None] = lambda _: None
) -> Iterator[_Held]:
    """Take every writer's lock (``flock``) on the file ``path`` leads to, until ``deadline`` at
    the most (then Busy); ``waiting(True)`` while another process holds it, ``waiting(False)`` once
    it is had.  A file replaced or re-pointed while the lock was awaited: the lock on the new
    one."""
    import fcntl  # POSIX only: writes need it, reads do not

    pause = 0.001
    while True:
        target = os.path.realpath(path)
        fd = _open(target)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Busy(
                        [
                            "%s: another process kept the file locked for %g s; nothing was written"
                            % (path, LOCK_TIMEOUT)
                        ]
                    ) from None
                waiting(True)
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                continue
            waiting(False)
            held = _Held(fd, target, os.fstat(fd))
            if held.names(path, _signature(held.stat)):
                yield held
                return
        finally:
            os.close(fd)  # lets go of the lock


@contextlib.contextmanager
def _written(
    target: str, pieces: list[bytes], old: Optional[os.stat_result], source: str, max_size: int
) -> Iterator[Callable[[], Signature]]:
    """Write ``pieces`` (TooLarge past ``max_size``) to a temporary file of its own beside
    ``target`` (fsync'd, old mode, owner); yield what renames it over ``target`` (atomic) and
    returns its signature; the temporary file goes on every way out."""
    size = sum(map(len, pieces))
    if size > max_size:
        raise TooLarge(
            [
                "%s: would be %s, over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE); it is "
                "unchanged" % (source, megabytes(size), megabytes(max_size))
            ]
        )
    directory, name = os.path.split(target)
    fd, temporary = -1, ""
    try:
        fd, temporary = tempfile.mkstemp(
            prefix=".%s." % name, suffix=".qstash-lists-tmp", dir=directory or "."
        )
        if old is not None:
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
            with contextlib.suppress(PermissionError):  # only root can give a file away
                os.fchown(fd, old.st_uid, old.st_gid)
        _write_all(fd, pieces)
        os.fsync(fd)

        def rename() -> Signature:
            nonlocal temporary
            os.replace(temporary, target)
            temporary = ""  # renamed: nothing to remove
            return _signature(os.fstat(fd))

        yield rename
        if not temporary:
            _sync_directory(directory or ".")
    except OSError as exc:
        raise DataError(
            [
                "%s: cannot write: %s (%s); it is unchanged"
                % (source, exc.strerror or exc, exc.filename or target)
            ]
        ) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _write_all(fd: int, pieces: list[bytes]) -> None:
    """Write ``pieces`` as they are (no joined copy), IOV_MAX (1024) at the most a call."""
    for start in range(0, len(pieces), _PIECES_A_CALL):
        some = pieces[start : start + _PIECES_A_CALL]
        written = os.writev(fd, some)
        if written == sum(map(len, some)):
            continue
        rest = memoryview(b"".join(some))[written:]  # a short write (a signal, a full disk):
        while rest:  # the rest, or its error
            rest = rest[os.write(fd, rest) :]


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable: best effort (not every file system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def record(
    path: str, document: dict[str, Any], token: str, max_size: int = DEFAULT_MAX_SIZE
) -> Store:
    """Check ``document`` as a one-account file for ``token`` and write it to ``path``; or
    DataError, file unchanged."""
    loaded = parse(encode(document), path, token)
    if not os.path.lexists(path):
        with _written(os.path.realpath(path), loaded.lines(), None, path, max_size) as rename:
            rename()
        return loaded
    with _locked(path, time.monotonic() + LOCK_TIMEOUT) as held:
        with _written(held.target, loaded.lines(), held.stat, path, max_size) as rename:
            rename()
    return loaded


def from_api(item: dict[str, Any], kind: str, dropped: set[str]) -> dict[str, Any]:
    """The fields of one of QStash's answers that a data file holds; the names of the others go into
    ``dropped``."""
    required, optional = KEYS[{"urlGroups": UrlGroup, "queues": Queue, "endpoints": Endpoint}[kind]]
    kept = {key: value for key, value in item.items() if key in required + optional}
    dropped.update("%s.%s" % (kind, key) for key in item if key not in kept)
    if kind == "urlGroups" and type(kept.get("endpoints")) is list:
        kept["endpoints"] = [
            from_api(e, "endpoints", dropped) if type(e) is dict else e for e in kept["endpoints"]
        ]
    if kind == "endpoints" and kept.get("name") in ("", None):
        # QStash writes an endpoint without a name as "" or null: here it has none.
        kept.pop("name", None)
    return kept


# ---- The changes a write makes to one item -----------------------------------------------------
# Each takes the item as it is (None: there is none) and the time (Unix milliseconds), and returns
# the item as it
# is to be (None: removed; the same object: nothing to write) and what it did, for the access log
# ("no such
# queue" when there is nothing to change).  updatedAt never before createdAt; each costs what the
# item holds.
def upsert_queue(
    queue: Optional[Queue], now: int, name: str, parallelism: Optional[int], paused: Optional[bool]
) -> tuple[Optional[Item], str]:
    """Create the queue ``name`` (parallelism 1 if not given), or update what is given of it;
    createdAt is kept."""
    if queue is None:
        return Queue(
            now, now, name, 1 if parallelism is None else parallelism, 0, bool(paused)
        ), "queue created"
    return dataclasses.replace(
        queue,
        updated_at=max(now, queue.created_at),
        parallelism=(queue.parallelism if parallelism is None else parallelism),
        paused=queue.paused if paused is None else paused,
    ), "queue updated"


def pause_queue(queue: Optional[Queue], now: int, paused: bool) -> tuple[Optional[Item], str]:
    """Pause or resume a queue: a change only if it was not already so."""
    if queue is None:
        return None, "no such queue"
    if queue.paused == paused:
        return queue, "already " + ("paused" if paused else "running")
    return dataclasses.replace(queue, updated_at=max(now, queue.created_at), paused=paused), (
        "paused" if paused else "resumed"
    )


def delete_item(item: Optional[Item], now: int) -> tuple[Optional[Item], str]:
    """Delete a URL group or queue: nothing to do if there is none."""
    return None, "deleted" if item is not None else "not there"


def add_endpoints(
    group: Optional[UrlGroup], now: int, name: str, endpoints: list[Endpoint]
) -> tuple[Optional[Item], str]:
    """Add ``endpoints`` to the URL group ``name``, creating it: a named one replaces the one of its
    name, an unnamed one is added unless the group has the same URL without a name (found by an
    index, not a search)."""
    have = list(group.endpoints) if group is not None else []
    where = {(e.name, e.url if e.name is None else None): i for i, e in enumerate(have)}
    for endpoint in endpoints:
        i = where.setdefault(
            (endpoint.name, endpoint.url if endpoint.name is None else None), len(have)
        )
        have[i : i + 1] = [endpoint]
    created = now if group is None else group.created_at
    return UrlGroup(created, max(now, created), name, tuple(have)), "endpoints added"


def remove_endpoints(
    group: Optional[UrlGroup], now: int, gone: list[dict[str, str]]
) -> tuple[Optional[Item], str]:
    """Remove each endpoint that has every field given (a url, a name, or both), deleting the group
    if left empty."""
    if group is None:
        return None, "no such URL group"
    names, urls = (
        {g["name"] for g in gone if "url" not in g},
        {g["url"] for g in gone if "name" not in g},
    )
    both = {(g["name"], g["url"]) for g in gone if len(g) == 2}
    kept = tuple(
        e
        for e in group.endpoints
        if e.name not in names and e.url not in urls and (e.name, e.url) not in both
    )
    if len(kept) == len(group.endpoints):
        return group, "no endpoint matched"
    if not kept:
        return None, "endpoints removed, URL group deleted"
    return dataclasses.replace(
        group, updated_at=max(now, group.created_at), endpoints=kept
    ), "endpoints removed"


# ---- Watching and writing: the version in service ------------------------------------------------
class Status(NamedTuple):
    """What a DataFile serves, for a health check: nothing from the file but its digest."""

    #: The SHA-256 of the bytes in service, as sha256sum prints it; None: none yet.
    version: Optional[str] = None
    #: When that version was put in service (a Unix time).
    loaded_at: Optional[float] = None
    #: Since when the file on disk is not what is served (a failed look).
    failed_at: Optional[float] = None


@dataclass(frozen=True)
class _Version:
    """The version in service and the last one judged: replaced whole, by DataFile._put and
    DataFile._refuse only."""

    judged: Optional[Signature] = None  # the file last judged (served, or refused); None: unread
    store: Optional[Store] = None  # the last good store; None until there is one
    pieces: tuple[bytes, ...] = ()  # the bytes that store was built from (or written as)
    loaded_at: Optional[float] = None  # when it was put in service
    failed_at: Optional[float] = None  # since when the file judged is not the one served

    @cached_property
    def digest(self) -> Optional[str]:
        """The SHA-256 of the bytes in service: made when a health check first asks."""
        if self.store is None:
            return None
        digest = hashlib.sha256()
        for piece in self.pieces:
            digest.update(piece)
        return digest.hexdigest()


#: A change of the store at a time (Unix milliseconds): the store with it made, and what it did.
Change = Callable[["Store", int], "tuple[Store, str]"]


class _Seen(NamedTuple):
    """A version on disk not yet loaded, seen against the store in service (see DataFile._kept):
    the digests of the accounts it keeps byte for byte."""

    signature: Optional[Signature] = None
    store: Optional["Store"] = None
    digests: frozenset[bytes] = frozenset()


def _kept_digests(path: str, store: Optional["Store"], max_size: int) -> frozenset[bytes]:
    """The digests of the accounts of ``store`` that the file at ``path`` keeps byte for byte, at
    its two ends (see _split); none if it cannot be read or is another layout."""
    if store is None or store.single_account:
        return frozenset()
    try:
        raw, _ = read(path, max_size)
    except DataError:
        return frozenset()
    split = _split(raw, store.accounts)
    if split is None:
        return frozenset()
    return frozenset(account.token_sha256 for account in split.head + split.tail)


@dataclass(eq=False)
class _Write:
    """One change waiting for this process's writer (see DataFile._write), then its outcome."""

    change: Change
    did: Optional[str] = None  # what it did, once written
    error: Optional[Exception] = None  # or why it was not

    @property
    def answered(self) -> bool:
        return self.did is not None or self.error is not None


class DataFile:
    """The last good :class:`Store` of a data file that may change while it is served, and its one
    writer.

    A reloader thread looks at the file's signature every ``interval`` seconds (or when woken),
    builds a changed version aside and puts it in service whole; a fault is logged when it starts
    and ends, and the last good version stays.  A forked child's first call starts its own (see
    after_fork).  ``token``, ``fallback``: see :func:`parse`.  The first load raises DataError if
    ``required``; else :meth:`current` is None until a good version appears.  ``writable``:
    :meth:`update` writes the file, and :meth:`current` first loads another process's write.
    ``waiting_writes``: see WAITING_WRITES.

    The locks, always taken in this order (none is held while waiting for a later one but by the
    writer, who waits for the flock holding ``_writing``):

    1. ``_writing``: one batch of writes at a time in this process, from the flock to the rename.
    2. the ``flock`` on the data file itself (see _locked): one writer on the machine.
    3. ``_lock``: the version in service (``_version``, ``_fault``): one load at a time, and the
       swap; a read takes it only to load a version it needs.
    4. ``_queue_lock``: the writes waiting for the writer (``_queue``, ``_contended``).
    """

    def __init__(
        self,
        path: str,
        token: Optional[str] = None,
        interval: float = 1.0,
        *,
        fallback: Optional[str] = None,
        max_size: int = DEFAULT_MAX_SIZE,
        required: bool = True,
        writable: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (immutable)
        waiting_writes: int = WAITING_WRITES,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.path = path
        self.interval = interval
        self.max_size = max_size
        self.writable = writable
        self.limits = limits
        self.waiting_writes = waiting_writes
        self._token = token
        self._fallback = fallback
        self._version = _Version()  # guarded by _lock: the one owner, _put and _refuse
        self._first: Optional[Store] = None  # the first good store (see restore): set by _put
        self._seen = _Seen()  # guarded by _lock: a version not loaded yet (see _kept)
        self._fault: Optional[str] = None  # the first line of the fault last logged, until it ends
        self._closed = False
        self._forked = False  # set in a forked child (after_fork) until its first call
        self._writing = threading.Lock()
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Write] = []  # guarded by _queue_lock
        self._contended = False  # guarded by _queue_lock: the writer awaits another process's lock
        fault = self._load()
        if fault is not None:
            if required:
                raise fault
            self._report(fault)
        self._start()
        _open_files.add(self)

    # -- Reads -------------------------------------------------------------------------------------
    def current(self, token: Optional[bytes] = None) -> Optional[Store]:
        """Return the newest good store (None only if there has never been one).  A writable one
        first loads a version another process wrote, so that a read follows every write answered;
        but for the account of ``token``, if that version keeps it byte for byte (see _kept), the
        one in service answers as the new one would (the reloader loads the rest)."""
        if self._forked:
            self._adopt()
        if self.writable:
            on_disk = _stat(self.path)
            if on_disk != self._version.judged and not self._kept(token, on_disk):
                self.refresh()
        return self._version.store

    def _kept(self, token: Optional[bytes], on_disk: Optional[Signature]) -> bool:
        """Whether the version ``on_disk`` keeps the account of ``token`` as the store in service
        has it, found by the reuse's split (exact: a version that loads gives that very account,
        and one that does not keeps the store in service); the file is read once a version."""
        if token is None or on_disk is None:
            return False
        with self._lock:
            seen, store = self._seen, self._version.store
            if seen.signature != on_disk or seen.store is not store:
                seen = self._seen = _Seen(
                    on_disk, store, _kept_digests(self.path, store, self.max_size)
                )
        return hashlib.sha256(token).digest() in seen.digests

    def status(self) -> Status:
        """Return which version is in service, since when, and when the file on disk stopped being
        it."""
        if self._forked:
            self._adopt()
        version = self._version
        status = Status(version.digest, version.loaded_at, version.failed_at)
        if version.failed_at is None and version.store is not None:
            if _stat(self.path) != version.judged:  # changed since, and not yet looked at
                return status._replace(failed_at=time.time())
        return status

    def refresh(self, force: bool = False) -> bool:
        """Look now, from this thread: load the file if it changed (always with ``force``); tell if
        it was."""
        with self._lock:
            if not force and _stat(self.path) == self._version.judged:
                return False
            fault = self._load()
            if fault is not None:
                self._report(fault)
                return False
        logger.info("%s: reloaded", self.path)
        return True

    def wake(self) -> None:
        """Have the reloader look at the file now and reload it even if it looks unchanged.  It
        takes no lock: a signal handler may call it (see wake_all)."""
        with contextlib.suppress(OSError):  # full: a look is due already; closed: none is
            self._wake_send.send(b"\0", getattr(socket, "MSG_NOSIGNAL", 0))

    def close(self) -> None:
        """Stop the reloader thread."""
        self._closed = True
        self.wake()
        if self._thread is not threading.current_thread():
            self._thread.join()

    # -- Writes ------------------------------------------------------------------------------------
    def update(
        self,
        digest: bytes,
        kind: str,
        name: str,
        change: Callable[..., tuple[Optional[Item], str]],
        *args: Any,
    ) -> str:
        """Make ``change(item, now, *args)`` to the item ``name`` of ``kind`` ("queues",
        "url_groups") of the account ``digest`` in the latest version, write the file, serve it
        and say what it did; or LookupError (no such account), LimitReached, TooLarge, Conflict (a
        file that does not load: kept), Busy (the lock not had in time), DataError (unwritable).
        The writes that come while one is written wait for it, then go in one version: one fsync
        for a burst."""
        return self._write(partial(self._item_changed, digest, kind, name, change, args))

    def restore(self, digest: bytes) -> str:
        """Put the account ``digest`` back as the first version this DataFile loaded had it (an
        account it did not have: empty), written as update writes; say what it did."""
        return self._write(partial(self._account_restored, digest))

    def replace(self, raw: bytes) -> Store:
        """Write the data file ``raw`` (checked first, as a load would: DataError) in place of the
        latest version, as update writes; return its store."""
        fresh = parse(raw, self.path, self._token, self._fallback)
        self._write(lambda store, now: (fresh, "replaced"))
        return fresh

    def _write(self, change: Change) -> str:
        """Make ``change`` in the latest version, write it and serve it; say what it did."""
        write = _Write(change)
        deadline = time.monotonic() + LOCK_TIMEOUT
        with self._queue_lock:
            # The write at work holds a thread too: it is not in the queue.
            if self._contended and len(self._queue) + 1 >= self.waiting_writes:
                raise Busy(
                    [
                        "%s: another process holds the lock, and %d writes here wait for it "
                        "already; nothing was written" % (self.path, len(self._queue) + 1)
                    ]
                )
            self._queue.append(write)
        if not self._writing.acquire(timeout=LOCK_TIMEOUT):
            with self._queue_lock:
                if write in self._queue:  # not taken by the write at work: withdrawn
                    self._queue.remove(write)
                    raise Busy(
                        [
                            "%s: the writes before this one took over %g s; nothing was written"
                            % (self.path, LOCK_TIMEOUT)
                        ]
                    )
            self._writing.acquire()  # taken: its outcome comes with that write's
        try:
            if not write.answered:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._write_batch(batch, deadline)
        finally:
            self._writing.release()
        # Hand the interpreter over: the writes answered with this one (each waiting for
        # _writing) take their answers now, not after this thread's request is done (8 clients
        # at 100 queues over HTTP: 1,660 -> 2,650 writes/s).
        time.sleep(0)
        if write.error is not None:
            raise write.error
        return cast(str, write.did)

    def _write_batch(self, batch: list[_Write], deadline: float) -> None:
        """Make every change of ``batch`` in one version of the file, written once; each gets its
        outcome.  Precondition: _writing is held."""
        try:
            for _ in range(WRITE_ATTEMPTS):
                with _locked(self.path, deadline, self._waiting) as held:
                    if self._write_held(held, batch):
                        return
            raise Conflict(
                [
                    "%s: saved by another hand %d times while a write was made; nothing was "
                    "written" % (self.path, WRITE_ATTEMPTS)
                ]
            )
        except Exception as exc:
            for write in batch:
                write.did, write.error = None, exc

    def _write_held(self, held: _Held, batch: list[_Write]) -> bool:
        """Make ``batch`` on the file ``held`` (read only if it is not the version in service),
        and rename the new version over it if the path still leads to it; tell whether that was
        done (else: again, on the new file)."""
        signature, store = _signature(os.fstat(held.fd)), None
        with self._lock:
            if self._version.judged == signature and self._version.failed_at is None:
                store = self._version.store
        if store is None:
            found = _read_open(held.fd, self.path, self.max_size)
            if found is None:  # written into meanwhile, by hand
                return False
            raw, signature = found
            store = self._take(raw, signature)
        fresh = self._apply(store, batch)
        if fresh is store:
            return True
        pieces = fresh.lines()
        # A read waits for the rename only.
        with _written(held.target, pieces, held.stat, self.path, self.max_size) as rename:
            with self._lock:
                if not held.names(self.path, signature):  # re-pointed, replaced or written into
                    return False
                self._put(rename(), fresh, tuple(pieces))
        return True

    def _waiting(self, contended: bool) -> None:
        with self._queue_lock:
            self._contended = contended

    def _take(self, raw: bytes, signature: Signature) -> Store:
        """The store of the version ``raw`` read under the lock, put in service; or Conflict where
        it does not load (never overwritten).  Precondition: the flock is held."""
        with self._lock:
            version = self._version
            if version.judged == signature and version.failed_at is None:
                return cast(Store, version.store)
            try:
                store = self._build(raw)
            except DataError as exc:
                self._refuse(signature, exc)
                self._report(exc)
                raise Conflict(
                    ["%s: does not load (the fault is logged); nothing was written" % self.path]
                ) from None
            self._put(signature, store, (raw,))
            return store

    def _apply(self, store: Store, batch: list[_Write]) -> Store:
        """``store`` with each change of ``batch`` made that can be; each notes its outcome."""
        now = int(time.time() * 1000)
        for write in batch:
            write.did, write.error = None, None
            try:
                store, write.did = write.change(store, now)
            except (LookupError, LimitReached, TooLarge) as exc:  # this change's own
                write.did, write.error = None, exc
        return store

    def _item_changed(
        self,
        digest: bytes,
        kind: str,
        name: str,
        change: Callable[..., tuple[Optional[Item], str]],
        args: tuple[Any, ...],
        store: Store,
        now: int,
    ) -> tuple[Store, str]:
        """The change of update(): ``store`` with ``change`` made to the item; LookupError (a
        KeyError) if the account is not there, LimitReached or TooLarge past a limit (an account
        or a file that holds more may keep it, or shrink: the limits are for what writes make)."""
        account = store.by_digest[digest]
        items = getattr(account, kind)
        item = items.get(name)
        new, did = change(item, now, *args)
        if new is item:
            return store, did
        self._check_limits(items, kind, item, new)
        if new is None:
            items = {key: value for key, value in items.items() if key != name}
        else:
            items = {**items, name: new}
        changed = dataclasses.replace(account, **{kind: items})  # type: ignore[arg-type]
        return self._with_account(store, account, changed), did

    def _account_restored(self, digest: bytes, store: Store, now: int) -> tuple[Store, str]:
        """The change of restore()."""
        account = store.by_digest[digest]
        first = self._first.by_digest.get(digest) if self._first is not None else None
        if first is None:
            first = dataclasses.replace(account, url_groups={}, queues={})
        if first is account:
            return store, "already as it was"
        return self._with_account(store, account, first), "put back as it was"

    def _with_account(self, store: Store, account: Account, changed: Account) -> Store:
        """``store`` with ``changed`` in place of ``account``; TooLarge past a size limit."""
        at = store.accounts.index(account)
        fresh = dataclasses.replace(
            store, accounts=store.accounts[:at] + (changed,) + store.accounts[at + 1 :]
        )
        self._check_sizes(store, account, fresh, changed)
        return fresh

    def _check_limits(
        self, items: Mapping[str, Item], kind: str, item: Optional[Item], new: Optional[Item]
    ) -> None:
        """LimitReached if ``new`` in place of ``item`` in ``items`` (of ``kind``) makes more than
        the Limits allow."""
        if item is None and len(items) >= self.limits.items:
            noun = "URL groups" if kind == "url_groups" else "queues"
            raise LimitReached(
                [
                    "this account has %d %s, the most a write may make (--max-items)"
                    % (len(items), noun)
                ]
            )
        have = len(item.endpoints) if isinstance(item, UrlGroup) else 0
        if isinstance(new, UrlGroup) and len(new.endpoints) > max(self.limits.endpoints, have):
            raise LimitReached(
                [
                    "a URL group may have %d endpoints at the most (--max-endpoints)"
                    % self.limits.endpoints
                ]
            )

    def _check_sizes(self, store: Store, account: Account, fresh: Store, changed: Account) -> None:
        """TooLarge if ``changed`` in place of ``account`` takes the account over its share of
        --max-size (none takes the others' room), or ``fresh`` over --max-size itself."""
        share = self.max_size // len(store.accounts)
        if len(changed.lines) > max(share, len(account.lines)):
            raise TooLarge(
                [
                    "%s: this account would be %s, over its share of --max-size (%s: %d accounts)"
                    % (
                        self.path,
                        megabytes(len(changed.lines)),
                        megabytes(share),
                        len(store.accounts),
                    )
                ]
            )
        if fresh.size > max(self.max_size, store.size):
            raise TooLarge(
                [
                    "%s: would be %s, over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE)"
                    % (self.path, megabytes(fresh.size), megabytes(self.max_size))
                ]
            )

    # -- The version in service --------------------------------------------------------------------
    def _build(self, raw: bytes) -> Store:
        """The store of ``raw``: what :func:`parse` makes of it, reusing the accounts of the one in
        service that it keeps byte for byte (see _reuse)."""
        reused = _reuse(raw, self._version.store)
        if reused is not None:
            return reused
        return parse(raw, self.path, self._token, self._fallback)

    def _load(self) -> Optional[DataError]:
        """Read and build the file; return its fault, if any.  Precondition: _lock is held, or
        this is the constructor."""
        signature = None
        try:
            raw, signature = read(self.path, self.max_size)
            self._put(signature, self._build(raw), (raw,))
            return None
        except DataError as exc:
            fault = exc
        except Exception:
            logger.exception("%s: cannot build a snapshot", self.path)
            fault = DataError([])
        # A version read() refused comes with its signature; one not opened, or changing, with
        # None: read again at the next look.
        self._refuse(signature or fault.signature, fault)
        return fault

    def _put(self, signature: Optional[Signature], store: Store, pieces: tuple[bytes, ...]) -> None:
        """Put ``store`` in service, as the version ``signature`` made of ``pieces``.
        Precondition: _lock is held, or this is the constructor."""
        self._version = _Version(signature, store, tuple(pieces), time.time())
        if self._first is None:
            self._first = store
        if self._fault is not None:
            logger.warning("%s: good again", self.path)  # a fault's end: shown with --quiet too
            self._fault = None

    def _refuse(self, signature: Optional[Signature], fault: DataError) -> None:
        """Note that the version ``signature`` was judged and refused: the last good one stays.
        Precondition: _lock is held, or this is the constructor."""
        self._version = dataclasses.replace(self._version, judged=signature, failed_at=time.time())

    def _report(self, fault: DataError) -> None:
        """Log a fault when it starts (not at every look while it lasts)."""
        first = fault.faults[0] if fault.faults else type(fault).__name__
        if first == self._fault:
            return
        self._fault = first
        passing = isinstance(fault, FileChanging)  # a writer busy with it: a warning
        for line in fault.faults:
            logger.log(logging.WARNING if passing else logging.ERROR, "%s", line)
        if passing:
            return
        if self._version.store is None:
            logger.error("%s: serving 503 until it is valid", self.path)
        else:
            logger.error("%s: keeping the last good version", self.path)

    # -- The reloader thread and forks -------------------------------------------------------------
    def _start(self) -> None:
        """Start this process's reloader, holding only a weak reference: a DataFile nobody uses
        stops it.  It waits on a socket pair, which wake() writes to without a lock."""
        receive, self._wake_send = socket.socketpair()
        self._wake_send.setblocking(False)
        receive.settimeout(self.interval)
        self._thread = threading.Thread(
            target=_reloader,
            args=(weakref.ref(self), receive, self._wake_send),
            daemon=True,
            name="qstash-lists reloader: %s" % self.path,
        )
        self._thread.start()

    def _adopt(self) -> None:
        """The first call in a forked child: start its reloader, and look at the file now."""
        with self._lock:
            started, self._forked = self._forked, False
            if started:
                self._start()
        if started:
            self.refresh()


def _reloader(
    ref: "weakref.ReferenceType[DataFile]", receive: socket.socket, send: socket.socket
) -> None:
    """The loop of a DataFile's reloader thread: look every interval (the socket's timeout), and
    at once when woken (``send``), while it is open; then close both sockets (a wake after that
    is an OSError that wake() ignores)."""
    looked: Optional[Signature] = None
    try:
        while True:
            try:
                force = bool(receive.recv(4096))  # what wake() sent (many wakes: one look)
            except socket.timeout:
                force = False
            except OSError:  # closed under it: uWSGI closes every descriptor to re-execute itself
                return
            data = ref()
            if data is None or data._closed:
                return
            try:
                # A writable one's reads load what they need (see current): it loads another
                # process's writes once they pause, not at every look while they come.
                before, looked = looked, _stat(data.path)
                if force or not data.writable or looked == before:
                    data.refresh(force)
            except Exception:  # never let the reloader die
                logger.exception("%s: reloader error", data.path)
            del data  # wait without holding it
    finally:
        for end in (receive, send):
            with contextlib.suppress(OSError):
                end.close()


_open_files: "weakref.WeakSet[DataFile]" = weakref.WeakSet()


def after_fork() -> None:
    """In a forked child (Python's fork runs this; uWSGI's post-fork hook too), give every open
    DataFile new locks and mark it: its first call starts its reloader and looks (no thread
    starts inside a fork hook); and the collector back if a parse had paused it."""
    _collector_paused.after_fork()
    for data in list(_open_files):
        if not data._closed:
            data._writing = threading.Lock()
            data._lock = threading.Lock()
            data._queue_lock = threading.Lock()
            data._queue = []
            data._contended = False
            data._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork)


def wake_all() -> None:
    """Have the reloader of every open DataFile look now (what SIGHUP does): no lock is taken, so
    a signal handler may call it."""
    for data in list(_open_files):
        data.wake()
