"""The data behind qstash-lists: load, validate, watch and write the JSON data file (no HTTP here).

The file holds one account (``{"urlGroups": [...], "queues": [...]}``, whose token the caller
supplies) or several (``{"accounts": [{"token": ...}, ...]}``).  It becomes dataclasses, or a
:class:`DataError` listing every problem with its place.  :class:`DataFile` keeps the last good
snapshot of a file people edit while it is served, and is its one writer.  From the shell: ``python
app.py --check --data FILE``.
"""

import contextlib
import dataclasses
import errno
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
from functools import cached_property, lru_cache, partial
from operator import attrgetter
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Union, cast
from urllib.parse import urlsplit

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
MAX_PROBLEMS = 50  # how many problems one report lists before it counts the rest
READ_ATTEMPTS = 4  # reads of a file that changes while it is read, in one look, before giving up
#: How long after a version of the file is written a later one may still carry its signature: the
#: coarsest timestamps (FAT's; ext3, HFS+ and ext4 with small inodes keep whole seconds).  A version
#: judged sooner than that is told apart by its content (see _Version.unchanged).
RACY_SECONDS = 2.0
#: How long a write waits for another's (then 503): a worker thread is held no longer.
LOCK_TIMEOUT = 1.0
#: How long a write may have its turn before the writes that wait behind it are refused at once
#: (503), leaving threads for reads: a write takes milliseconds; one that takes this long waits for
#: a flock another process keeps.
LOCK_STUCK = 0.5
#: Versions saved by hand while one write works that it redoes its change on, before a 409.
WRITE_ATTEMPTS = 3
#: What wake() sends a reloader: load the file even if unchanged (SIGHUP), or only look (a fork).
FORCE, LOOK = b"\1", b"\0"
_READ_CHUNK = 1 << 24
_MISSING: Any = object()  # a key the object does not have (its problem is said once, as missing)
_GIVEN_TWICE = "given twice in one object (only one is allowed)"
_BESIDE_ACCOUNTS = (  # the problem of a key beside "accounts"
    "unknown key next to 'accounts' (a file lists accounts, or holds 'urlGroups' and 'queues' of "
    "one account, not both)"
)
#: QStash's rule for the names of URL groups and queues (a 400 otherwise).
NAME_RULE = "only letters, digits, '-', '.' and '_', not dots alone"
_NAME = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.-]+")  # (fullmatch) not dots alone
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TOKEN = re.compile(r"[!-~]+")  # visible ASCII: what fits in "Bearer <token>"
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
    stat.S_IFBLK: "a block device",
}


class Signature(NamedTuple):
    """What stat says of a version of the file.  It may say "changed"; "unchanged" only where it
    cannot be wrong (see _Version.unchanged): inode numbers come back, and versions written
    within the timestamps' granularity share their times."""

    ino: int
    dev: int
    size: int
    mtime_ns: int
    ctime_ns: int  # cp -p and tar set an mtime back, not it


class DataError(Exception):
    """A data file that cannot be served or written: its ``problems``, and the ``signature``
    judged."""

    def __init__(self, problems: list[str], signature: Optional[Signature] = None) -> None:
        super().__init__("\n".join(problems))
        self.problems, self.signature = problems, signature


class TokenMissing(DataError):
    """A file in the one-account form, loaded without a token for that account."""


class FileChanging(DataError):
    """The file changed each time it was read: a writer is busy with it."""


class Unloadable(DataError):
    """A write found the file on disk in a state it must not overwrite (it does not load)."""


class TooLarge(DataError):
    """A write past the file's size limit, or past the account's share of it."""


class Busy(DataError):
    """A write that could not have the lock in time (another process's, or earlier writes')."""


# ---- The rules, each written once; the schema and the checker judge every value by them ----------
def is_whole(value: Any) -> bool:
    """A JSON integer (not true, not 1.0) from 0 to 2**53 - 1: exact in a JavaScript client."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def is_name(value: Any) -> bool:
    """A URL group's or a queue's name: letters, digits, '_', '-' and '.' only (QStash's rule), not
    dots alone (a client that normalises URLs could never address "." or ".." again)."""
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
    """What a field's values must be: its check, and what a problem's message says it expects."""

    check: Callable[[Any], bool]
    expected: str


WHOLE = Rule(is_whole, "an integer from 0 to 2**53 - 1")
NAME = Rule(is_name, NAME_RULE)
FLAG = Rule(is_flag, "true or false")
HTTP_URL = Rule(is_http_url, "an absolute http or https URL")
TEXT = Rule(is_text, "printable characters (no control characters, line breaks or lone surrogates)")


def check_token(token: str) -> Optional[str]:
    """Return why ``token`` cannot be used as a bearer token, or None if it can."""
    if _TOKEN.fullmatch(token):
        return None
    return "expected a non-empty token of visible ASCII characters, no spaces"


def megabytes(size: int) -> str:
    """A size for a message: in MB of 2**20 bytes (as ``--max-size 64M``), bytes below 0.1 MB."""
    if size < 0x19999:
        return "%d bytes" % size
    return ("%.1f" % (size / 0x100000)).removesuffix(".0") + " MB"


# ---- The items: one schema serves loading, checking, serving and writing -----------------------
# A field is declared once, as ``_rule(its Rule, or the item kind of its array[, its default if
# optional])``: loading, checking, serving and writing follow from it.  Its JSON key is its name in
# camelCase, and it is left out of the JSON while it is None.  Items are not frozen (a frozen
# dataclass's __setattr__ costs about as much as parsing the file), but nothing changes one: a
# change makes a new one (dataclasses.replace).
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
            for attr, key, _, _ in SCHEMA[type(self)]
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
        """This group in the data file: its fields, then its endpoints one a line."""
        if not self.endpoints:
            return self.raw
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


def _schema(cls: type) -> tuple[Field, ...]:
    """The fields that ``cls``'s declarations (_rule) give, in QStash's order."""
    return tuple(
        Field(f.name, re.sub("_(.)", lambda m: m.group(1).upper(), f.name), **f.metadata)
        for f in dataclasses.fields(cls)
    )


#: Each item kind's fields.
SCHEMA: dict[type, tuple[Field, ...]] = {cls: _schema(cls) for cls in (Endpoint, UrlGroup, Queue)}


#: The arrays of the file: each one's key, the Account field that holds it, its item kind.
ARRAYS = (("urlGroups", "url_groups", UrlGroup), ("queues", "queues", Queue))
#: The keys each object of the file takes: required, then optional.
KEYS: dict[Any, tuple[tuple[str, ...], tuple[str, ...]]] = {
    **{
        cls: (
            tuple(f.key for f in SCHEMA[cls] if f.required),
            tuple(f.key for f in SCHEMA[cls] if not f.required),
        )
        for cls in SCHEMA
    },
    "accounts": ((), ("token", "tokenSha256", "urlGroups", "queues", "signingKeys")),
    "signingKeys": (("current", "next"), ()),
    "(top level)": ((), ("urlGroups", "queues", "signingKeys", "accounts")),
}
#: Each kind's fields as item() judges them: attribute, key, rule and its check (None: an array).
_CHECKS = {
    cls: [
        (f.key, f.rule, getattr(f.rule, "check", None), default.default)
        for f, default in zip(fields, dataclasses.fields(cls))
    ]
    for cls, fields in SCHEMA.items()
}
#: The same as sets, as fields() compares an object's keys with them: required, and all.
_KEY_SETS = {kind: (frozenset(req), frozenset(req + opt)) for kind, (req, opt) in KEYS.items()}


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
    """The URL groups and queues that one token sees, each by name in the file's order.  Compared
    by identity (``eq=False``): a write replaces this very object in its store, and what is
    encoded of it (``cache``) is kept only while it is the one in service."""

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

    @cached_property
    def lines(self) -> bytes:
        """This account's object in the data file: a field, queue, URL group or endpoint a line."""
        fields = []
        if self.credential is not None:
            fields.append(json.dumps(dict([self.credential]))[1:-1].encode())
        if self.signing_keys is not None:
            keys = json.dumps(dict(zip(("current", "next"), self.signing_keys)))
            fields.append(b'"signingKeys": ' + keys.encode())
        # Each item encoded once, fetched in C.
        groups = b",\n  ".join(map(attrgetter("lines"), self.url_groups.values()))
        queues = b",\n  ".join(map(attrgetter("raw"), self.queues.values()))
        for key, joined in ((b"urlGroups", groups), (b"queues", queues)):
            fields.append(b'"%s": [\n  %s\n ]' % (key, joined) if joined else b'"%s": []' % key)
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
        """The account of ``token``, or None, by its SHA-256 (timing tells a probe nothing)."""
        return self.by_digest.get(hashlib.sha256(token).digest())

    @cached_property
    def lines(self) -> bytes:
        """This store's data file as the writer writes it (``--example`` prints one): its one
        account's object, or ``{"accounts": [...]}`` with an account a line; in it each queue,
        URL group and endpoint is a line of the API's compact JSON (``raw``, keys in QStash's
        order from SCHEMA)."""
        if self.single_account:
            return self.accounts[0].lines + b"\n"
        return b'{"accounts": [\n' + b",\n".join([a.lines for a in self.accounts]) + b"\n]}\n"

    @cached_property
    def compact(self) -> bytes:
        """This store's data file as compact JSON, as a tool writes it: what a write writes where
        the writer's layout would take the file past --max-size (so that a file near the limit
        can still be written, and a delete frees room)."""
        return encode(json.loads(self.lines))

    def warnings(self, source: str) -> list[str]:
        """Return what looks wrong in a valid file, one line each: no account, times in seconds."""
        if not self.accounts:
            return ["%s: warning: no account at all: every request will get 401" % source]
        early = [  # before 2001
            "%s%s[%d].%s" % ("" if self.single_account else "accounts[%d]." % i, key, j, name)
            for i, account in enumerate(self.accounts)
            for key, kind, _ in ARRAYS
            for j, item in enumerate(cast("Mapping[str, Item]", getattr(account, kind)).values())
            for name, value in (("createdAt", item.created_at), ("updatedAt", item.updated_at))
            if 0 < value < _YEAR_2001_MS
        ]
        if not early:
            return []
        more = " (and %d more)" % (len(early) - 1) if len(early) > 1 else ""
        seconds = "looks like seconds, not milliseconds (before 2001 as milliseconds)"
        return ["%s: warning: %s%s %s" % (source, early[0], more, seconds)]

    def summary(self) -> str:
        """Return "N accounts, N URL groups, N queues"."""
        groups = sum(len(account.url_groups) for account in self.accounts)
        queues = sum(len(account.queues) for account in self.accounts)
        counts = ((len(self.accounts), "account"), (groups, "URL group"), (queues, "queue"))
        return ", ".join("%d %s%s" % (n, noun, "" if n == 1 else "s") for n, noun in counts)


# ---- Loading: parse and check -------------------------------------------------------------------
def load(
    path: str,
    token: Optional[str],
    fallback: Optional[str] = None,
    max_size: int = DEFAULT_MAX_SIZE,
) -> Store:
    """Read (see :func:`_opened`) and validate (see :func:`parse`) ``path``; or DataError."""
    with _opened(path, max_size) as (_, found):
        return parse(found.raw, path, token, fallback)


def parse(
    raw: bytes,
    source: str,
    token: Optional[str],
    fallback: Optional[str] = None,
) -> Store:
    """Validate the JSON document ``raw`` (``source`` names it).  A one-account file gets ``token``,
    else ``fallback`` (then ``fallback_used``), else TokenMissing."""
    checker = _Checker()
    accounts = checker.document(_json(raw, source), fallback if token is None else token)
    if checker.problems:
        lines = ["%s: %s" % (source, problem) for problem in checker.problems[:MAX_PROBLEMS]]
        if len(checker.problems) > MAX_PROBLEMS:
            lines.append("%s: ... and %d more" % (source, len(checker.problems) - MAX_PROBLEMS))
        raise DataError(lines)
    fallback_used = checker.single_account and token is None
    if fallback_used and fallback is None:
        fix = "set it to the token its clients send"
        single = "holds a single account, and QSTASH_TOKEN is not set"
        raise TokenMissing(["%s: %s: %s" % (source, single, fix)])
    return Store(accounts, checker.single_account, fallback_used)


_TWICE: Any = object()  # the key, in an object that gave some key twice, of the keys given twice


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object as json.loads builds it, and the keys given more than once under _TWICE."""
    value = dict(pairs)
    if len(value) < len(pairs):
        counts = Counter(key for key, _ in pairs)
        value[_TWICE] = sorted(key for key, count in counts.items() if count > 1)
    return value


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object_pairs_hook: the object as json.loads builds it, or DataError for a key twice."""
    value = _pairs(pairs)
    if _TWICE in value:
        raise DataError(["%s: given twice in one object" % _show(value[_TWICE][0])[1:-1]])
    return value


def _json(raw: bytes, source: str) -> Any:
    """The JSON document ``raw`` of the data file ``source``, or a DataError saying where not."""
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is harmless
    except UnicodeDecodeError as exc:
        at = exc.start + len(raw) - len(exc.object)  # in the file: its byte-order mark counted
        raise DataError(["%s: not UTF-8 text: %s at byte %d" % (source, exc.reason, at)]) from None
    if not text or text.isspace():  # (strip would copy the whole file)
        example = "a data file is a JSON object (python app.py --example prints one)"
        raise DataError(["%s: empty: %s" % (source, example)])
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
    except ValueError:  # Python (3.11, 3.10.7, 3.9.14 on) reads no integer of over 4,300 digits
        raise DataError(["%s: invalid JSON: an integer of over 4,300 digits" % source]) from None


class _Checker:
    """Builds dataclasses from the parsed document by the fields' rules, noting every problem."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.single_account = False

    def problem(self, array: str, i: Optional[int], key: Optional[str], message: str) -> None:
        """Note a problem at ``key`` of element ``i`` of ``array`` (either may be None)."""
        where = array if i is None else "%s[%d]" % (array, i)
        if key is not None:
            # A key from the file: keep the line short and whole.
            if len(key) > 60 or not key.isprintable():
                key = _show(key)
            where = key if where == "(top level)" else "%s.%s" % (where, key)
        self.problems.append("%s: %s" % (where, message))

    def document(self, value: Any, token: Optional[str]) -> tuple[Account, ...]:
        if type(value) is dict and "accounts" in value:
            for key in value:
                if key is _TWICE:
                    for twice in value[_TWICE]:
                        self.problem("(top level)", None, twice, _GIVEN_TWICE)
                elif key != "accounts":
                    self.problem("(top level)", None, key, _BESIDE_ACCOUNTS)
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
        """The array ``value``, or [] and a problem if it is not one."""
        if type(value) is not list:
            got = _show(value, secret=array == "accounts")
            self.problem(array, None, None, "expected an array, got %s" % got)
            return []
        return value

    def fields(self, value: Any, array: str, i: Optional[int], kind: Any) -> Any:
        """``value`` if it is an object; keys unknown, missing or given twice are problems."""
        if type(value) is dict and _KEY_SETS[kind][0] <= value.keys() <= _KEY_SETS[kind][1]:
            return value
        required, optional = KEYS[kind]
        if type(value) is not dict:
            got = _show(value, secret=kind in ("accounts", "(top level)"))
            self.problem(array, i, None, "expected an object, got %s" % got)
            return None
        for key in value:
            if key is _TWICE:
                for twice in value[_TWICE]:
                    self.problem(array, i, twice, _GIVEN_TWICE)
            elif key not in required + optional:
                self.problem(
                    array, i, key, "unknown key (expected '%s')" % "', '".join(required + optional)
                )
        for key in (key for key in required if key not in value):
            self.problem(array, i, key, "missing")
        return value  # what is there is judged too: every problem of an item is reported

    def item(self, value: Any, array: str, i: int, cls: Any, seen: dict[str, int]) -> Any:
        """Build the item of kind ``cls`` at ``array[i]`` by its schema, rule by rule, or note its
        problems and return None."""
        before, (required, known) = len(self.problems), _KEY_SETS[cls]
        item = value  # the keys as the schema has them, or each problem said by fields():
        if type(value) is not dict or not required <= value.keys() <= known:
            item = self.fields(value, array, i, cls)
            if item is None:
                return None
        values: list[Any] = []  # in the schema's order, as the dataclass takes them
        for key, rule, check, default in _CHECKS[cls]:
            found = item.get(key, _MISSING)
            if found is _MISSING:  # its default (a required key missing: said by fields)
                found = default
            elif check is None:  # an array of items of that kind
                where, names = "%s[%d].%s" % (array, i, key), cast("dict[str, int]", {})
                each = self.each(found, where)
                found = tuple([self.item(v, where, j, rule, names) for j, v in enumerate(each)])
            elif not check(found):
                if key == "name":
                    self.name(found, array, i, seen, rule)
                else:
                    self.problem(
                        array, i, key, "expected %s, got %s" % (rule.expected, _show(found))
                    )
            elif key == "name" and seen.setdefault(found, i) != i:
                self.name(found, array, i, seen, rule)
            # createdAt, the schema's first field of each kind that has both (UrlGroup, Queue).
            elif key == "updatedAt" and is_whole(values[0]) and values[0] > found:
                created = "not before createdAt (%d)" % values[0]
                self.problem(array, i, key, "expected a time %s, got %d" % (created, found))
            values.append(found)
        return cls(*values) if len(self.problems) == before else None

    def name(self, value: Any, array: str, i: int, seen: dict[str, int], rule: Rule) -> None:
        """Say why an item's name breaks its rule or is there already in its array."""
        if not rule.check(value):
            expected = rule.expected
            if type(value) is not str or not value:
                expected = "a non-empty string"
            self.problem(array, i, "name", "expected %s, got %s" % (expected, _show(value)))
        elif seen.setdefault(value, i) != i:
            also = "%s[%d].name" % (array, seen[value])
            self.problem(array, i, "name", "duplicate name %s (also at %s)" % (_show(value), also))

    def account(
        self, value: Any, array: str, i: int, digests: dict[bytes, int]
    ) -> Optional[Account]:
        """Build the account at ``array[i]``, noting its token's digest in ``digests``."""
        item = self.fields(value, array, i, "accounts")
        digest = None if item is None else self.token(item, array, i)
        if digest is None:
            return None
        if digests.setdefault(digest, i) != i:
            self.problem(array, i, None, "same token as %s[%d]" % (array, digests[digest]))
        key = "token" if "token" in item else "tokenSha256"
        return self.collections(item, "%s[%d]." % (array, i), digest, (key, item[key]))

    def token(self, item: dict[str, Any], array: str, i: int) -> Optional[bytes]:
        if ("token" in item) == ("tokenSha256" in item):
            self.problem(array, i, None, "expected exactly one of 'token' or 'tokenSha256'")
            return None
        if "token" in item:
            token = item["token"]
            problem = check_token(token) if type(token) is str else "expected a string"
            if problem is None:
                return hashlib.sha256(token.encode()).digest()
            self.problem(array, i, "token", problem)  # never the value: it is meant to be a secret
            return None
        value = item["tokenSha256"]
        if type(value) is str and _SHA256_HEX.fullmatch(value):
            return bytes.fromhex(value)
        # Never show the value either: it may be the token itself, pasted in the wrong field.
        got = "a string of %d characters" % len(value) if type(value) is str else _show(value, True)
        digest = "64 hexadecimal digits (a SHA-256 digest, printf %s TOKEN | sha256sum)"
        self.problem(array, i, "tokenSha256", "expected %s, got %s" % (digest, got))
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
            built = arrays.setdefault(kind, {})
            for i, value in enumerate(self.each(item.get(key, []), prefix + key)):
                one = self.item(value, prefix + key, i, cls, seen)
                if one is not None:
                    built[one.name] = one
        keys, value, where = None, item.get("signingKeys"), prefix + "signingKeys"
        if value is not None and type(value) is not dict:  # never the value: keys are secrets
            self.problem(where, None, None, "expected an object with 'current' and 'next'")
        elif value is not None and self.fields(value, where, None, "signingKeys") is not None:
            for key in ("current", "next"):
                if not is_text(value.get(key, "-")):  # missing is said already
                    self.problem(where, None, key, "expected a non-empty printable string")
            keys = (value.get("current", ""), value.get("next", ""))
        return Account(digest, arrays["url_groups"], arrays["queues"], keys, credential)


def _show(value: Any, secret: bool = False) -> str:
    """Name a JSON value in a problem message, briefly; by its kind alone if it may be a
    ``secret`` (a token where an account goes)."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    if secret and type(value) in (str, int, float):
        return "a string" if type(value) is str else "a number"
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():  # a line break or a lone surrogate: escape all but ASCII
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- Reading: never blocks, never half a version ------------------------------------------------
class Read(NamedTuple):
    """A version of the file as read: its bytes, and what stat said of it."""

    raw: bytes
    signature: Signature


@contextlib.contextmanager
def _opened(path: str, max_size: int) -> Iterator[tuple[int, Read]]:
    """The data file at ``path`` (never blocking: a regular file of at most ``max_size`` bytes),
    open, and the version read, read again while it changes; or a DataError of one line."""
    for _ in range(READ_ATTEMPTS):
        fd = _open(path)
        try:
            found = _read_open(fd, path, max_size)
            if found is not None:
                yield fd, found
                return
        finally:
            os.close(fd)
        time.sleep(0.02)  # give the writer a moment
    changing = "changed each time it was read (%d times)" % READ_ATTEMPTS
    raise FileChanging(["%s: %s; looking again later" % (path, changing)])


def _read_open(fd: int, path: str, max_size: int) -> Optional[Read]:
    """Read the open file ``fd`` from its start; return its bytes and signature, or None if it
    changed while it was read (a writer at work); a DataError of one line if it cannot be read."""
    try:
        before = os.fstat(fd)
        judged, cannot = _signature(before), "%s: cannot read: " % path
        limit = "over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE)" % megabytes(max_size)
        if not stat.S_ISREG(before.st_mode):
            kind = _KINDS.get(stat.S_IFMT(before.st_mode), "not a plain file")
            raise DataError([cannot + "not a regular file but " + kind], judged)
        if before.st_size > max_size:
            raise DataError([cannot + "%s, %s" % (megabytes(before.st_size), limit)], judged)
        os.lseek(fd, 0, os.SEEK_SET)
        raw = read_at_most(partial(os.read, fd), max_size)
        if raw is None:
            raise DataError([cannot + "it grew while being read, " + limit], judged)
        after = os.fstat(fd)
    except OSError as exc:
        raise DataError(["%s: cannot read: %s" % (path, exc.strerror or exc)]) from None
    if _rewritten(before, after) or len(raw) != after.st_size:
        return None
    return Read(raw, judged)


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
    """Read to the end by ``read(n)`` (past what fstat said, too); None past ``limit`` bytes."""
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
    return Signature(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# ---- Writing: a new version beside the file, renamed over it -------------------------------------
class _Held(NamedTuple):
    """The data file as its writer holds it: open, with every writer's lock on that very file."""

    fd: int  # open on the file (another descriptor of it has the flock)
    target: str  # the path's target (its symlink resolved) when the lock was taken
    stat: os.stat_result  # the file then: the new version gets its mode, group and owner

    def leads_to(self, path: str) -> bool:
        """Whether ``path`` still leads to this very file: neither re-pointed nor replaced (its
        inode is held open, so none other takes its number)."""
        try:
            on_disk = os.stat(path)
        except OSError:
            return False
        return os.path.realpath(path) == self.target and _same_file(on_disk, self.stat)


#: The descriptors _locked takes every writer's flock through, while it does: a child forked
#: meanwhile closes its copies (after_fork), or it would keep the lock for as long as it lives.
#: Changed by one set operation at a time (atomic under the GIL).
_flocked: set[int] = set()


@contextlib.contextmanager
def _locked(path: str, deadline: float) -> Iterator[_Held]:
    """Take every writer's lock (``flock``) on the file ``path`` leads to, by ``deadline`` at the
    most (then Busy).  A file replaced or re-pointed while the lock was awaited: the lock on the
    new one (no flock waits with a timeout: it is tried each millisecond)."""
    import fcntl  # POSIX only: writes need it, reads do not

    while True:
        with contextlib.ExitStack() as opened:  # each closed on every way out: the lock let go
            target = os.path.realpath(path)
            fd = _open(target)
            opened.callback(os.close, fd)
            _flocked.add(fd)  # from here on, a forked child closes its copy (after_fork)
            opened.callback(_flocked.discard, fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            except OSError as exc:  # ENOLCK: a network file system's lock manager, say
                cannot = "%s: cannot lock: %s; nothing was written"
                raise DataError([cannot % (path, exc.strerror or exc)]) from None
            else:
                # Read through a description of its own, which may be held open after the lock is
                # let go (see DataFile._keep_open): a copy of this one would keep the lock.
                held = _Held(_open(target), target, os.fstat(fd))
                opened.callback(os.close, held.fd)
                if _same_file(os.fstat(held.fd), held.stat) and held.leads_to(path):
                    yield held
                    return
        if time.monotonic() > deadline:
            raise _busy(path, "another process kept the file locked for %g s" % LOCK_TIMEOUT)
        time.sleep(0.001)  # a lock another process lets go of is taken within a millisecond


class _Turns:
    """This process's writes to one file, one at a time.  A write waits for its turn until its
    deadline, but not behind a write at work that has had its turn for LOCK_STUCK (a write takes
    milliseconds: that one waits for a flock another process keeps), nor after a write that ended
    Busy until one has the flock again: those are Busy at once, so that the writes that wait never
    hold the threads a read needs."""

    def __init__(self) -> None:
        self._changed = threading.Condition()  # guards since and stuck
        self.since: Optional[float] = None  # when the write at work took its turn; None: none
        self.stuck = False  # the last write ended Busy (then only the next one waits)

    @contextlib.contextmanager
    def take(self, path: str, deadline: float) -> Iterator[None]:
        """Wait for this write's turn and hold it, until ``deadline`` (then Busy)."""
        with self._changed:
            while self.since is not None:
                stuck_at = self.since + LOCK_STUCK
                if self.stuck or time.monotonic() >= stuck_at:
                    raise _busy(path, "another process holds the lock")
                if time.monotonic() >= deadline:
                    raise _busy(path, "the writes before this one took over %g s" % LOCK_TIMEOUT)
                self._changed.wait(min(deadline, stuck_at) - time.monotonic())
            self.since, busy = time.monotonic(), False
        try:
            yield
        except Busy:  # the flock not had in time
            busy = True
            raise
        finally:
            with self._changed:
                self.since, self.stuck = None, busy
                self._changed.notify()


def _busy(path: str, why: str) -> Busy:
    return Busy(["%s: %s; nothing was written" % (path, why)])


def _same_file(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_ino, one.st_dev) == (other.st_ino, other.st_dev)


class _Temporary:
    """A new version written beside its target (see _new_version), until rename() puts it there."""

    def __init__(self, fd: int, path: str, target: str) -> None:
        self.fd, self.path, self.target = fd, path, target  # open on it; its name; its target
        self.renamed = False

    def rename(self) -> Signature:
        """Rename it over its target (the path's version, under DataFile._lock); its signature."""
        os.replace(self.path, self.target)
        self.renamed = True
        return _signature(os.fstat(self.fd))


@contextlib.contextmanager
def _new_version(
    target: str, data: bytes, old: Optional[os.stat_result], source: str
) -> Iterator[_Temporary]:
    """Write ``data`` to a temporary file of its own beside ``target`` (fsync'd, with the old
    file's mode, group and owner) and yield it for the caller to rename (or not).  The temporary
    file goes on every way out but a rename; the directory is synced after one."""
    directory, name = os.path.split(target)
    fd, temporary = -1, ""
    try:
        fd, temporary = tempfile.mkstemp(
            prefix=".%s." % name, suffix=".qstash-lists-tmp", dir=directory or "."
        )
        try:  # the old file's group, owner and mode, where the file system keeps them
            if old is not None:
                # A member of the file's group may give it that group; only root the owner.
                for uid, gid in ((-1, old.st_gid), (old.st_uid, -1)):
                    with contextlib.suppress(PermissionError):
                        os.fchown(fd, uid, gid)
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
        except OSError as exc:  # FAT, some network shares: none; said once
            _say_once(
                "%s: the file system keeps no mode or owner (%s): a new version gets its "
                "own" % (source, exc.strerror or exc)
            )
        view = memoryview(data)
        while view:  # a short write (a signal, a full disk): the rest, or its error
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        new = _Temporary(fd, temporary, target)
        yield new
        if new.renamed:
            temporary = ""
            _sync_directory(directory or ".")
    except OSError as exc:
        raise DataError([_unwritable(source, exc, target)]) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


@lru_cache(maxsize=None)
def _say_once(line: str) -> None:
    """Log ``line`` the first time it is said in this process (a warning)."""
    logger.warning("%s", line)


def _unwritable(source: str, exc: OSError, target: str) -> str:
    """The log line of a write that the system refused, with its fix."""
    if exc.errno == errno.EBUSY:  # a rename over a mount point
        return (
            "%s: cannot write: the file is a mount point (a single-file bind mount, such as docker "
            "-v ./data.json:/app/data.json); mount its folder instead and point --data at the file "
            "in it; it is unchanged" % source
        )
    where = exc.filename or target
    return "%s: cannot write: %s (%s); it is unchanged" % (source, exc.strerror or exc, where)


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable: best effort (not every file system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _too_large(source: str, size: int, max_size: int) -> TooLarge:
    over = "over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE)" % megabytes(max_size)
    return TooLarge(["%s: would be %s, %s; it is unchanged" % (source, megabytes(size), over)])


# ---- The edits a write makes to one account ---------------------------------------------------
# Each takes the account as it is and the time (Unix milliseconds), and returns the account as it
# is to be (the very same object: nothing to write, the file left byte for byte) and what it did,
# for the access log; NoSuchItem where there is nothing to change.  updatedAt never before
# createdAt; each costs what the account's items are (unchanged ones keep their encoded bytes).
#: An edit of an account at a time: the account as it is to be, and what it did.
Edit = Callable[["Account", int], "tuple[Account, str]"]


class NoSuchItem(Exception):
    """A write that changes an item the account does not have (a 404)."""


class NoSuchAccount(Exception):
    """A write for an account the file no longer has (its token was taken out meanwhile)."""


def _with_item(account: Account, kind: str, name: str, item: Optional[Item]) -> Account:
    """``account`` with its item ``name`` of ``kind`` ("queues", "url_groups") made ``item``
    (None: removed); a new Account, so that what is encoded of the old one (its cache) is not
    served for it."""
    items = getattr(account, kind)
    if item is None:
        items = {key: value for key, value in items.items() if key != name}
    else:
        items = {**items, name: item}  # in its place, if it was there
    return dataclasses.replace(account, **{kind: items})  # type: ignore[arg-type]


def upsert_queue(
    account: Account, now: int, name: str, parallelism: Optional[int], paused: Optional[bool]
) -> tuple[Account, str]:
    """Create or update the queue ``name``: ``parallelism`` 1 if not given (QStash's documented
    default, what both SDKs send), ``paused`` its own if not given (false for a new one).  A queue
    that it leaves as it was keeps its updatedAt, so that a file under version control stays clean
    when an app upserts its queue at each start."""
    parallelism = 1 if parallelism is None else parallelism
    queue = account.queues.get(name)
    if queue is None:
        created = Queue(now, now, name, parallelism, 0, bool(paused))
        return _with_item(account, "queues", name, created), "queue created"
    paused = queue.paused if paused is None else paused
    if (parallelism, paused) == (queue.parallelism, queue.paused):
        return account, "queue unchanged"
    updated = dataclasses.replace(
        queue, updated_at=max(now, queue.created_at), parallelism=parallelism, paused=paused
    )
    return _with_item(account, "queues", name, updated), "queue updated"


def pause_queue(account: Account, now: int, name: str, paused: bool) -> tuple[Account, str]:
    """Pause or resume the queue ``name``: a change only if it was not already so."""
    queue = account.queues.get(name)
    if queue is None:
        raise NoSuchItem()
    if queue.paused == paused:
        return account, "already " + ("paused" if paused else "running")
    changed = dataclasses.replace(queue, updated_at=max(now, queue.created_at), paused=paused)
    return _with_item(account, "queues", name, changed), "paused" if paused else "resumed"


def delete_queue(account: Account, now: int, name: str) -> tuple[Account, str]:
    """Delete the queue ``name``: nothing to do if there is none."""
    if name not in account.queues:
        return account, "not there"
    return _with_item(account, "queues", name, None), "deleted"


def delete_url_group(account: Account, now: int, name: str) -> tuple[Account, str]:
    """Delete the URL group ``name``: nothing to do if there is none."""
    if name not in account.url_groups:
        return account, "not there"
    return _with_item(account, "url_groups", name, None), "deleted"


def add_endpoints(
    account: Account, now: int, name: str, endpoints: list[Endpoint]
) -> tuple[Account, str]:
    """Add ``endpoints`` to the URL group ``name``, creating it: a named one replaces the one of its
    name, an unnamed one is added unless the group has the same URL without a name (found by an
    index, not a search)."""
    group = account.url_groups.get(name)
    have = list(group.endpoints) if group is not None else []
    where = {(e.name, e.url if e.name is None else None): i for i, e in enumerate(have)}
    for endpoint in endpoints:
        i = where.setdefault(
            (endpoint.name, endpoint.url if endpoint.name is None else None), len(have)
        )
        have[i : i + 1] = [endpoint]
    if group is not None and tuple(have) == group.endpoints:
        return account, "endpoints there already"
    created = now if group is None else group.created_at
    added = UrlGroup(created, max(now, created), name, tuple(have))
    return _with_item(account, "url_groups", name, added), "endpoints added"


def remove_endpoints(
    account: Account, now: int, name: str, gone: list[dict[str, str]]
) -> tuple[Account, str]:
    """Remove each endpoint with every field given (url, name or both); an emptied group goes."""
    group = account.url_groups.get(name)
    if group is None:
        raise NoSuchItem()
    names = {g["name"] for g in gone if "url" not in g}
    urls = {g["url"] for g in gone if "name" not in g}
    both = {(g["name"], g["url"]) for g in gone if len(g) == 2}
    kept = tuple(
        e
        for e in group.endpoints
        if e.name not in names and e.url not in urls and (e.name, e.url) not in both
    )
    if len(kept) == len(group.endpoints):
        return account, "no endpoint matched"
    if not kept:
        return _with_item(account, "url_groups", name, None), "endpoints removed, URL group deleted"
    changed = dataclasses.replace(group, updated_at=max(now, group.created_at), endpoints=kept)
    return _with_item(account, "url_groups", name, changed), "endpoints removed"


def put_back(account: Account, now: int, first: Optional[Store]) -> tuple[Account, str]:
    """The account as the store ``first`` has it (a test double's reset; an account it does not
    have: empty)."""
    kept = first.by_digest.get(account.token_sha256) if first is not None else None
    if kept is None:
        kept = dataclasses.replace(account, url_groups={}, queues={})
    if kept.lines == account.lines:
        return account, "already as it was"
    return kept, "put back as it was"


# ---- The version in service: what the file held when it was last judged -------------------------
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
    """The file as last judged and the version in service: replaced whole, under DataFile._lock."""

    signature: Optional[Signature] = None  # the file last judged (served, or refused); None: unread
    judged_at: float = (
        0.0  # when its read (or write) began, a Unix time: never later (see unchanged)
    )
    store: Optional[Store] = None  # the last good store; None until there is one
    raw: bytes = b""  # the bytes that store was built from (or written as)
    loaded_at: Optional[float] = None  # when it was put in service
    failed_at: Optional[float] = None  # since when the file judged is not the one served

    @cached_property
    def digest(self) -> Optional[str]:
        """The SHA-256 of the bytes in service: made when a health check first asks."""
        return None if self.store is None else hashlib.sha256(self.raw).hexdigest()

    def unchanged(self, on_disk: Optional[Signature]) -> bool:
        """Whether stat alone shows the file to be the version judged: the same signature, judged
        RACY_SECONDS or more after the file was last changed (git's racy-clean rule: a later
        version written within the timestamps' granularity may carry the same signature)."""
        if on_disk is None or on_disk != self.signature:
            return False
        return self.judged_at - max(on_disk.mtime_ns, on_disk.ctime_ns) / 1e9 >= RACY_SECONDS

    def has_bytes(self, raw: bytes) -> bool:
        """Whether ``raw`` is, byte for byte, the version in service."""
        return self.store is not None and raw == self.raw


# ---- DataFile: the version in service, its reloader and its writer -------------------------------
class DataFile:
    """The last good :class:`Store` of a data file that may change while it is served, and its one
    writer.

    A reloader thread looks at the file every ``interval`` seconds (or when woken) and puts a
    changed version in service whole; a problem is logged when it starts and ends, and the last
    good version stays.  ``token``, ``fallback``: see :func:`parse`.  The first load raises
    DataError if ``required``; else :meth:`current` is None until a good version appears.
    ``writable``: :meth:`update` writes the file, and :meth:`current` first loads another
    process's write.

    The version judged is held open (``_file``): its inode cannot come back for a later version
    while it is held, so a version renamed over it always has another signature; one written into
    in place within the timestamps' granularity is found by its content (see _Version.unchanged).

    The locks, in the order they are taken: a write's turn (``_turns``: this process's writes one
    at a time; its own lock is held only for a moment), the ``flock`` on the data file (every
    process's, see _locked), then ``_lock``: the version in service, which a read takes only to
    load a version it needs, and a write to judge the file it holds the flock on and to swap in
    what it wrote."""

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
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.path, self.interval, self.max_size = path, interval, max_size
        self.writable = writable
        self._token, self._fallback = token, fallback
        self._lock = threading.Lock()  # guards _version, _file and _problem (see the docstring)
        self._version = _Version()
        self._file = -1  # the version judged, held open
        self._problem: Optional[str] = None  # the first line of the problem logged, until it ends
        self._turns = _Turns()
        self._closed = False
        self._starting = threading.Lock()  # guards _forked, for a moment only
        self._forked = False  # set in a forked child (after_fork) until its first call
        self._wake_receive: Optional[socket.socket] = None
        self._wake_send: Optional[socket.socket] = None
        problem = self._load()
        if problem is not None:
            if required:
                self._keep_open(-1)
                raise problem
            self._log_problem(problem)
        self._start()
        _open_files.add(self)

    # -- Reads -------------------------------------------------------------------------------------
    def current(self) -> Optional[Store]:
        """Return the newest good store (None only if there has never been one).  A writable one
        first loads a version another process wrote, so that a read follows every write answered:
        every write renames a new file over the path, whose inode differs from the one in service
        (held open, so no new file takes its number); the path's stat equal to the version's means
        no write since.  A save in place by hand is the reloader's to find."""
        if self._forked:
            self._start_in_child()
        # Both are what stat says: of the path now, and of the file this process last read or
        # wrote (set by _load_version and _serve); equal unless another process wrote since.
        if self.writable and _stat(self.path) != self._version.signature:
            self.refresh(renamed=True)
        return self._version.store

    def status(self) -> Status:
        """Which version is in service, since when, and since when the file on disk is not it."""
        if self._forked:
            self._start_in_child()
        version = self._version
        status = Status(version.digest, version.loaded_at, version.failed_at)
        if version.failed_at is None and version.store is not None:
            if _stat(self.path) != version.signature:  # changed since, and not yet looked at
                return status._replace(failed_at=time.time())
        return status

    def refresh(self, force: bool = False, renamed: bool = False) -> bool:
        """Look now, from this thread: load the file unless stat shows it to be the version judged
        (``renamed``: a version renamed over it, which always has another signature, is the only
        change looked for); parse it unless it holds the bytes in service (``force``: whatever it
        holds); tell whether it was parsed and put in service.  A problem is logged when it
        starts."""
        with self._lock:
            on_disk = _stat(self.path)
            if renamed and on_disk == self._version.signature:
                return False  # a look or a write this one waited for had it
            if not force and self._version.unchanged(on_disk):
                return False
            before = self._version.store
            problem = self._load(force)
            if problem is not None:
                self._log_problem(problem)
                return False
            loaded = self._version.store is not before
        if loaded:
            logger.info("%s: reloaded", self.path)
        return loaded

    def wake(self, force: bool = True) -> None:
        """Have the reloader look now (``force``: reloading even an unchanged file); no lock:
        signal-safe."""
        with contextlib.suppress(OSError, AttributeError):  # full: a look is due; closed: none is
            sent = FORCE if force else LOOK
            cast(socket.socket, self._wake_send).send(sent, getattr(socket, "MSG_NOSIGNAL", 0))

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # Nobody holds it (its reloader holds a weak reference, and stops): let go of the file
        # (os.close bound early: at the interpreter's exit this module's globals may be gone).
        if getattr(self, "_file", -1) >= 0:
            _close(self._file)

    def close(self) -> None:
        """Stop the reloader thread, and let go of the file."""
        self._closed = True
        self.wake()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            self._keep_open(-1)

    # -- The version in service: judged, refused and put in service here alone, under _lock -------
    def _load(self, force: bool = False) -> Optional[DataError]:
        """Read and load the file (see _load_version), read again while it changes; return its
        problem, noted (see _set_failed), if any."""
        started = time.time()  # when the version read was judged: no later (see _Version)
        try:
            with _opened(self.path, self.max_size) as (fd, found):
                self._load_version(fd, found, started, force)
            return None
        except DataError as exc:
            problem = exc
        except Exception:  # a bug: the last good version stays, as for a bad file
            logger.exception("%s: cannot build a snapshot", self.path)
            problem = DataError([])
        self._set_failed(problem.signature, problem, started)
        return problem

    def _load_version(self, fd: int, found: Read, started: float, force: bool = False) -> Store:
        """The store of the version ``found``, read from ``fd`` from the time ``started`` on: the
        one in service if it holds the same bytes (unless ``force``), else a new one put in
        service; a DataError (with its signature) where it does not load."""
        version = self._version
        if not force and version.failed_at is None and version.has_bytes(found.raw):
            self._keep_open(fd)
            self._version = dataclasses.replace(
                version, signature=found.signature, judged_at=started
            )
            return cast(Store, version.store)
        try:
            store = parse(found.raw, self.path, self._token, self._fallback)
        except DataError as exc:
            raise type(exc)(exc.problems, found.signature) from None
        self._serve(fd, found.signature, store, found.raw, started)
        return store

    def _serve(
        self, fd: int, signature: Signature, store: Store, raw: bytes, judged_at: float
    ) -> None:
        """Put ``store`` in service, as the version ``signature`` holding ``raw``, open as ``fd``,
        read (or written) from the time ``judged_at`` on."""
        self._keep_open(fd)
        self._version = _Version(signature, judged_at, store, raw, loaded_at=time.time())
        if self._problem is not None:
            logger.warning("%s: good again", self.path)  # a problem's end: shown with --quiet too
            self._problem = None

    def _set_failed(
        self, signature: Optional[Signature], problem: DataError, judged_at: float
    ) -> None:
        """Note that the version ``signature``, read from the time ``judged_at`` on, was refused
        (None: it is read again at the next look): the last good version stays."""
        self._keep_open(-1)
        since = self._version.failed_at or time.time()
        self._version = dataclasses.replace(
            self._version, signature=signature, judged_at=judged_at, failed_at=since
        )

    def _log_problem(self, problem: DataError) -> None:
        """Log a problem when it starts (not at every look while it lasts)."""
        first = problem.problems[0] if problem.problems else type(problem).__name__
        if first == self._problem:
            return
        self._problem = first
        passing = isinstance(problem, FileChanging)  # a writer busy with it: a warning
        for line in problem.problems:
            logger.log(logging.WARNING if passing else logging.ERROR, "%s", line)
        if passing:
            return
        if self._version.store is None:
            logger.error("%s: serving 503 until it is valid", self.path)
        else:
            logger.error("%s: keeping the last good version", self.path)

    def _keep_open(self, fd: int) -> None:
        """Hold a copy of ``fd`` (-1: none) open as the version judged, letting the last go (a copy
        of _Held.fd shares no flock: _locked takes it through another description)."""
        if self._file >= 0:
            os.close(self._file)
        self._file = os.dup(fd) if fd >= 0 else -1

    # -- Writes ------------------------------------------------------------------------------------
    def update(self, digest: bytes, edit: Edit) -> str:
        """Make ``edit`` to the account ``digest`` in the latest version, write the file, serve it
        and say what it did; or NoSuchAccount, NoSuchItem, TooLarge, Unloadable (a file that does
        not load: kept), Busy (the lock not had in time, or its turn: see _Turns), DataError
        (unwritable).  In order: this process's turn (_Turns.take); every process's flock on the
        file (_locked); then _write_held: the locked file read, its store (the one in service if
        the same bytes), the edit, the new bytes (Store.lines), a new version written beside the
        file (_new_version) and, under _lock, renamed over it and served.  A try whose file
        changed meanwhile (None) lets the flock go and starts again; on the way out the flock is
        let go, then the turn."""
        deadline = time.monotonic() + LOCK_TIMEOUT
        with self._turns.take(self.path, deadline):
            for _ in range(WRITE_ATTEMPTS):
                with _locked(self.path, deadline) as held:
                    did = self._write_held(held, digest, edit)
                    if did is not None:
                        return did  # the flock let go, then the turn
        saved = "saved by another hand %d times while a write was made" % WRITE_ATTEMPTS
        raise FileChanging(["%s: %s; nothing was written" % (self.path, saved)])

    def _write_held(self, held: _Held, digest: bytes, edit: Edit) -> Optional[str]:
        """Make ``edit`` on the bytes of the file ``held`` (the store in service if it holds them,
        else their own, put in service; Unloadable if they do not load: never overwritten), and
        rename the new version over it if the path still leads to that file as it was read; say
        what the edit did, or None if the file changed meanwhile (then again, on the new file).
        TooLarge past the account's share of --max-size, or past --max-size (it would not load
        again)."""
        with self._lock:
            started = time.time()
            try:  # the store in service if the same bytes (renewed as judged now), else theirs
                found = _read_open(held.fd, self.path, self.max_size)
                if found is None:  # written into meanwhile, by hand
                    return None
                store = self._load_version(held.fd, found, started)
            except DataError as exc:
                if exc.signature is None:  # not read (an I/O error): not the file's fault
                    raise
                self._set_failed(exc.signature, exc, started)
                self._log_problem(exc)
                raise Unloadable(
                    ["%s: does not load (the problem is logged); nothing was written" % self.path]
                ) from None
        account = store.by_digest.get(digest)
        if account is None:
            raise NoSuchAccount()
        changed, did = edit(account, int(time.time() * 1000))
        if changed is account:
            return did
        # Account compares by identity: this very object is replaced.
        accounts = tuple(changed if each is account else each for each in store.accounts)
        fresh = dataclasses.replace(store, accounts=accounts)
        # An account may grow to its share of --max-size, so that none takes the others' room (one
        # that holds more may shrink); its size is its bytes in the file (lines: encoded once).
        share, size = self.max_size // len(accounts), len(changed.lines)
        if len(accounts) > 1 and size > max(share, len(account.lines)):  # one: the file's limit
            over = "this account would be %s, over its share of --max-size" % megabytes(size)
            share_is = "(%s: %d accounts)" % (megabytes(share), len(accounts))
            raise TooLarge(["%s: %s %s" % (self.path, over, share_is)])
        # Where the writer's layout would not fit, the same data without it.
        data = fresh.lines if len(fresh.lines) <= self.max_size else fresh.compact
        if len(data) > self.max_size:
            raise _too_large(self.path, len(data), self.max_size)
        with _new_version(held.target, data, held.stat, self.path) as new:
            with self._lock:  # a read waits for the rename only
                # Still that file, its bytes read again: stat cannot tell a save in place within
                # the timestamps' granularity (a second on ext3, HFS+, exFAT); one in the
                # microseconds between this read and the rename is overwritten (as git's and
                # editors' own writes would be).
                if not held.leads_to(self.path):
                    return None
                again = _read_open(held.fd, self.path, self.max_size)
                if again is None or again.raw != found.raw:
                    return None
                started = time.time()
                signature = new.rename()
                self._serve(new.fd, signature, fresh, data, started)
        return did  # _new_version synced the directory (renamed) or removed its file (not)

    def replace(self, raw: bytes) -> Store:
        """Write the data file ``raw`` (checked first, as a load would: DataError) whole, under
        every writer's lock, whatever the file holds now (one that does not load too: a test
        double's put-back), serve it, and return its store."""
        fresh = parse(raw, self.path, self._token, self._fallback)
        if len(fresh.lines) > self.max_size:
            raise _too_large(self.path, len(fresh.lines), self.max_size)
        with _locked(self.path, time.monotonic() + LOCK_TIMEOUT) as held:
            with _new_version(held.target, fresh.lines, held.stat, self.path) as new:
                with self._lock:
                    started = time.time()
                    signature = new.rename()
                    self._serve(new.fd, signature, fresh, fresh.lines, started)
        return fresh

    # -- The reloader thread and forks -------------------------------------------------------------
    def _start(self) -> None:
        """Start this process's reloader, holding only a weak reference: a DataFile nobody uses
        stops it.  It waits on a socket pair of its own, which wake() writes to without a lock."""
        if self._wake_receive is None:
            self._pair()
        args, name = (weakref.ref(self), self._wake_receive, self._wake_send), self.path
        self._thread = threading.Thread(
            target=_reloader, args=args, daemon=True, name="qstash-lists reloader: " + name
        )
        self._thread.start()

    def _pair(self) -> None:
        """A new socket pair for the reloader to wait on; this process's copies of the last one
        closed (a forked child's: the parent's pair stays the parent's)."""
        for end in (self._wake_receive, self._wake_send):
            if end is not None:
                end.close()
        self._wake_receive, self._wake_send = socket.socketpair()
        self._wake_send.setblocking(False)
        self._wake_receive.settimeout(self.interval)

    def _start_in_child(self) -> None:
        """The first call in a forked child: start its reloader, woken to look now (a look, not a
        reload: an unchanged file is not parsed again); the call waits for no load."""
        with self._starting:
            if self._forked:
                self._forked = False
                self._start()
                self.wake(force=False)


def _reloader(
    ref: "weakref.ReferenceType[DataFile]", receive: socket.socket, send: socket.socket
) -> None:
    """The loop of a DataFile's reloader thread: look every interval (the socket's timeout), and
    at once when woken (``send``), while it is open; then close both sockets (a wake after that
    is an OSError that wake() ignores)."""
    try:
        while True:
            try:
                force = FORCE in receive.recv(4096)  # what wake() sent (many wakes: one look)
            except socket.timeout:
                force = False
            except OSError:  # closed under it: uWSGI closes every descriptor to re-execute itself
                return
            data = ref()
            if data is None or data._closed:
                return
            try:
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
    """In a forked child (Python's fork runs this; uWSGI's post-fork hook too, once or more),
    start every open DataFile afresh from the parent's last good version.

    The child keeps ``DataFile._version``: a finished value, replaced whole under the lock, never
    changed in place, so it is the version in service or the one before, never half of one (a
    load under way in the parent holds its store in its own thread's locals).  It drops what
    only the parent's threads, which are not in the child, could end: its ``_lock``, the writes'
    turns and the flock of a write under way (its descriptor, ``_flocked``), the lock of
    ``_forked``, and the reloader's socket pair (the parent's).  Its first call starts its own
    reloader (no thread starts inside a fork hook: a fork to exec needs none).  The reloader
    computes no ``cached_property`` (whose lock, before Python 3.12, a fork could leave held)."""
    for fd in list(_flocked):  # a write's under way in the parent: its flock is not ours
        with contextlib.suppress(OSError):
            os.close(fd)
    _flocked.clear()
    for data in list(_open_files):
        if not data._closed:
            data._lock = threading.Lock()
            data._turns, data._starting = _Turns(), threading.Lock()
            data._pair()  # a wake in the child, even before its first call, is its own
            data._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork)


def wake_all() -> None:
    """Have every open DataFile's reloader look now (SIGHUP's): no lock taken (signal-safe)."""
    for data in list(_open_files):
        data.wake()
