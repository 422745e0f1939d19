"""The data behind qstash-lists: load, validate, watch and write the JSON data file (no HTTP here).

The file holds one account (``{"urlGroups": [...], "queues": [...]}``, whose token the caller
supplies) or several (``{"accounts": [{"token": ...}, ...]}``).  It becomes dataclasses, or a
:class:`DataError` listing every fault with its place.  :class:`DataFile` keeps the last good
snapshot of a file people edit while it is served, and is its one writer.  From the shell: ``python
app.py --check --data FILE``.
"""

import contextlib
import dataclasses
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

#: The shipped data.json (``python app.py --example`` prints it): a starter file of one account.
EXAMPLE: dict[str, Any] = {
    "urlGroups": [
        {
            "createdAt": 1700000000000,
            "updatedAt": 1700000500000,
            "name": "orders",
            "endpoints": [
                {"name": "billing", "url": "https://billing.example.com/hooks/orders"},
                {"name": "shipping", "url": "https://shipping.example.com/hooks/orders"},
            ],
        },
        {
            "createdAt": 1700001000000,
            "updatedAt": 1700001000000,
            "name": "signups",
            "endpoints": [{"url": "https://crm.example.com/webhooks/signup"}],
        },
    ],
    "queues": [
        {
            "createdAt": 1700000000000,
            "updatedAt": 1700000000000,
            "name": "emails",
            "parallelism": 2,
            "lag": 0,
            "paused": False,
        },
        {
            "createdAt": 1700002000000,
            "updatedAt": 1700003000000,
            "name": "reports",
            "parallelism": 1,
            "lag": 12,
            "paused": True,
        },
    ],
}
DEFAULT_MAX_SIZE = (
    64 * 1024 * 1024
)  # a larger data file is refused (--max-size); loading takes several times it
MAX_SAFE_INTEGER = 2**53 - 1  # the largest integer a JavaScript client reads back exactly
_YEAR_2001_MS = 978307200000
MAX_FAULTS = 50  # how many faults one report lists before it counts the rest
READ_ATTEMPTS = 4  # reads of a file that changes while it is read, in one look, before giving up
LOCK_TIMEOUT = (
    1.0  # how long a write waits for another's (then 503): a worker thread is held no longer
)
WRITE_ATTEMPTS = (
    3  # versions saved by hand while one write works that it redoes its change on, before a 409
)
_READ_CHUNK = 1 << 24
NAME_RULE = (
    "only letters, digits, '-', '.' and '_'"  # QStash's for URL groups and queues (a 400 otherwise)
)
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

# : What tells versions of a file apart: inode, device, size, mtime and ctime (cp -p and tar set an
# mtime back, not it).
Signature = tuple[int, int, int, int, int]


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


def _is_flag(value: Any) -> bool:
    return type(value) is bool


#: What each rule says a value should be, in a fault's message.
EXPECTED: dict[Callable[[Any], bool], str] = {
    is_whole: "an integer from 0 to 2**53 - 1",
    is_name: NAME_RULE,
    _is_flag: "true or false",
    is_http_url: "an absolute http or https URL",
    is_text: "printable characters (no control characters, line breaks or lone surrogates)",
}


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


# ---- The items: one schema serves loading, checking, serving, writing and recording
# ---------------
# A field is declared once, as _rule(its rule, or the item kind of its array[, its default if
# optional]); its JSON
# key is its name in camelCase, and it is left out of the JSON while it is None.  Items are not
# frozen (a frozen
# dataclass's object.__setattr__ costs about as much as parsing the file), but nothing changes one.
def _rule(check: Any, default: Any = dataclasses.MISSING, required: bool = False) -> Any:
    return field(
        default=default,
        metadata={"rule": check, "required": required or default is dataclasses.MISSING},
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

    name: Optional[str] = _rule(is_text, None)
    url: str = _rule(
        is_http_url, "", required=True
    )  # a default only so that it may follow name, as in QStash's


@dataclass
class UrlGroup(_Item):
    """A URL group (the API's "topic") and its endpoints."""

    created_at: int = _rule(is_whole)
    updated_at: int = _rule(is_whole)
    name: str = _rule(is_name)
    endpoints: tuple[Endpoint, ...] = _rule(Endpoint)  # an array of items of that kind

    @cached_property
    def lines(self) -> bytes:
        if not self.endpoints:
            return self.raw
        head = encode({**self.to_dict(), "endpoints": []})[:-2]  # up to the array's "["
        return (
            head
            + b"\n    "
            + b",\n    ".join([endpoint.raw for endpoint in self.endpoints])
            + b"\n  ]}"
        )


@dataclass
class Queue(_Item):
    """A queue."""

    created_at: int = _rule(is_whole)
    updated_at: int = _rule(is_whole)
    name: str = _rule(is_name)
    parallelism: int = _rule(is_whole)
    lag: int = _rule(is_whole)
    paused: bool = _rule(_is_flag, False)


Item = Union[UrlGroup, Queue]
#: Each item kind's fields: (attribute, JSON key, rule or item kind, required), in QStash's order.
SCHEMA: dict[type, tuple[tuple[str, str, Any, bool], ...]] = {
    cls: tuple(
        (
            f.name,
            re.sub("_(.)", lambda m: m.group(1).upper(), f.name),
            f.metadata["rule"],
            f.metadata["required"],
        )
        for f in dataclasses.fields(cls)
    )
    for cls in (Endpoint, UrlGroup, Queue)
}
#: The arrays of the file: each one's key, the Account field that holds it, its item kind.
ARRAYS = (("urlGroups", "url_groups", UrlGroup), ("queues", "queues", Queue))
#: The keys each object of the file takes: required, then optional.
KEYS: dict[Any, tuple[tuple[str, ...], tuple[str, ...]]] = {
    **{
        cls: (
            tuple(key for _, key, _, required in SCHEMA[cls] if required),
            tuple(key for _, key, _, required in SCHEMA[cls] if not required),
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

    token_sha256: bytes = field(
        repr=False
    )  # only the digest, and not in repr: a weak token could be guessed
    url_groups: Mapping[str, UrlGroup] = field(default_factory=dict)
    queues: Mapping[str, Queue] = field(default_factory=dict)
    signing_keys: Optional[tuple[str, str]] = field(
        default=None, repr=False
    )  # (current, next); secrets
    credential: Optional[tuple[str, str]] = field(
        default=None, repr=False
    )  # its key and value in a file of accounts
    #: Answers encoded for this account, kept while it is unchanged (a write makes a new Account).
    cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)

    def item(self, kind: str, name: str) -> Optional[Item]:
        """Return the item of ``kind`` ("url_groups" or "queues") named ``name``, or None."""
        return cast("Mapping[str, Item]", getattr(self, kind)).get(name)

    @cached_property
    def lines(self) -> bytes:
        """This account's object in the data file: a queue, URL group or endpoint a line."""
        head = [json.dumps(dict([self.credential]))[1:-1]] if self.credential else []
        if self.signing_keys is not None:
            head.append(
                json.dumps({"signingKeys": dict(zip(("current", "next"), self.signing_keys))})[1:-1]
            )
        parts = [b"{", ",\n ".join(head + [""]).encode()]
        for key, items, attr in (
            ("urlGroups", self.url_groups, "lines"),
            ("queues", self.queues, "raw"),
        ):
            lines = list(map(attrgetter(attr), items.values()))  # each encoded once, fetched in C
            parts += (
                [b'"%s": [\n  ' % key.encode(), b",\n  ".join(lines), b"\n ],\n "]
                if lines
                else [b'"%s": [],\n ' % key.encode()]
            )
        parts[-1] = parts[-1][:-3] + b"}"  # no comma after the last array
        return b"".join(parts)


@dataclass(frozen=True)
class Store:
    """Every account of one loaded data file, found by the SHA-256 digest of its token."""

    accounts: tuple[Account, ...]
    single_account: bool = False  # the file holds one account ({"urlGroups": ..., "queues": ...})
    fallback_used: bool = (
        False  # ... served with the fallback token, as no token was given (see parse)
    )

    @cached_property
    def by_digest(self) -> Mapping[bytes, Account]:
        """Each account by the SHA-256 digest of its token (a write's store has it from the one
        before it)."""
        return {account.token_sha256: account for account in self.accounts}

    def find(self, token: bytes) -> Optional[Account]:
        """Return the account whose token is ``token``, or None, by its SHA-256: timing tells a
        probe no token."""
        return self.by_digest.get(hashlib.sha256(token).digest())

    def lines(self) -> list[bytes]:
        """The data file of this store in pieces, written as they are: each account's bytes, and
        what goes between."""
        if self.single_account:
            return [self.accounts[0].lines, b"\n"]
        parts = [piece for account in self.accounts for piece in (b",\n", account.lines)][
            1:
        ]  # between them: ",\n"
        return [b'{"accounts": [\n'] + parts + [b"\n]}\n"]

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


# ---- Loading: parse and check
# ---------------------------------------------------------------------
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
    known: Optional[Iterator[Account]] = None,
) -> Store:
    """Validate the JSON document ``raw`` (``source`` names it).  A one-account file gets ``token``,
    else ``fallback`` (then ``fallback_used``), else TokenMissing.  ``known``: see
    DataFile._parse."""
    checker = _Checker(known)
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
    if not text.strip():
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
        pos = exc.pos + (
            text[exc.pos : exc.pos + 1] == ","
        )  # 3.13 points at the comma, earlier ones after it
        closing = len(text) - len(text[pos:].lstrip())
        if text[:pos].rstrip().endswith(",") and text[closing : closing + 1] in ("]", "}"):
            line, column = text.count("\n", 0, closing) + 1, closing - text.rfind("\n", 0, closing)
            message = "a comma before the closing '%s' (JSON allows none)" % text[closing]
        raise DataError(
            ["%s: line %d, column %d: invalid JSON: %s" % (source, line, column, message)]
        ) from None
    except RecursionError:
        raise DataError(["%s: invalid JSON: nested too deeply" % source]) from None
    except (
        ValueError
    ):  # Python (3.11, 3.10.7, 3.9.14 on) reads no integer of over 4,300 digits, and says not where
        raise DataError(
            ["%s: invalid JSON: an integer of more than 4,300 digits" % source]
        ) from None


class _Checker:
    """Turns the parsed document into dataclasses, judging each value by its field's rule and noting
    every fault (its place spelled out only then).  ``known``: the accounts the 0s stand for, in
    order (see DataFile._parse)."""

    def __init__(self, known: Optional[Iterator[Account]] = None) -> None:
        self.faults: list[str] = []
        self.single_account, self.known = False, known

    def fault(self, array: str, i: Optional[int], key: Optional[str], message: str) -> None:
        """Note a fault at ``key`` of element ``i`` of ``array`` (either may be None)."""
        where = array if i is None else "%s[%d]" % (array, i)
        if key is not None:
            if (
                len(key) > 60 or not key.isprintable()
            ):  # a key from the file: keep the line short and whole
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
                        "unknown key next to 'accounts' (a file lists accounts, "
                        "or holds 'urlGroups' and 'queues' of one account, not both)",
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
        """Build the item of kind ``cls`` at ``array[i]`` by its schema, or note its faults and
        return None."""
        faults, item = len(self.faults), self.fields(value, array, i, cls)
        if item is None:
            return None
        values: dict[str, Any] = {}
        for attr, key, rule, _ in SCHEMA[cls]:  # a required key missing: said by fields
            found = item.get(key, _MISSING)
            if found is _MISSING:
                continue
            if isinstance(rule, type):  # an array of items
                where, names = "%s[%d].%s" % (array, i, key), cast("dict[str, int]", {})
                found = tuple(
                    [
                        self.item(v, where, j, rule, names)
                        for j, v in enumerate(self.each(found, where))
                    ]
                )
            elif key == "name":
                self.name(found, array, i, seen, rule)
            elif not rule(found):
                self.fault(array, i, key, "expected %s, got %s" % (EXPECTED[rule], _show(found)))
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

    def name(
        self, value: Any, array: str, i: int, seen: dict[str, int], rule: Callable[[Any], bool]
    ) -> None:
        """Note an item's name in its array, or say why it breaks its rule or is there already."""
        if not rule(value):
            self.fault(
                array,
                i,
                "name",
                "expected %s, got %s"
                % (
                    "a non-empty string" if type(value) is not str or not value else EXPECTED[rule],
                    _show(value),
                ),
            )
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
        if (
            type(value) is int and self.known is not None
        ):  # an account the DataFile knew: itself, checked already
            known = next(self.known, None)
            if known is None or digests.setdefault(known.token_sha256, i) != i:
                self.fault(
                    array, i, None, "an account out of place, or a token twice"
                )  # the whole parse says which
            return known
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
                self.fault(
                    array, i, "token", problem
                )  # never the value: it is meant to be a secret
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
        arrays = {}
        for key, kind, cls in ARRAYS:
            seen: dict[str, int] = {}
            arrays[kind] = {
                one.name: one
                for i, v in enumerate(self.each(item.get(key, []), prefix + key))
                for one in (self.item(v, prefix + key, i, cls, seen),)
                if one is not None
            }
        keys, value = None, item.get("signingKeys")
        if (
            value is not None and type(value) is not dict
        ):  # never the value: signing keys are secrets
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


_MISSING: Any = object()  # a key the object does not have (its fault is said once, as missing)


def _show(value: Any) -> str:
    """Name a JSON value in a fault message, briefly."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():  # a line break or a lone surrogate: escape all but ASCII
        text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- Reading: never blocks, never half a version
# --------------------------------------------------
def read(path: str, max_size: int = DEFAULT_MAX_SIZE) -> tuple[bytes, Signature]:
    """Return the bytes of the data file at ``path`` (never blocking: a regular file of at most
    ``max_size`` bytes) and the signature of the version read, read again while it changes; or a
    DataError of one line."""
    for _ in range(READ_ATTEMPTS):
        fd = _open(path)
        try:
            before = os.fstat(fd)
            judged, limit = _signature(before), "the limit of %s" % megabytes(max_size)
            if not stat.S_ISREG(before.st_mode):
                kind = _KINDS.get(stat.S_IFMT(before.st_mode), "not a plain file")
                raise DataError(
                    ["%s: cannot read: not a regular file but %s" % (path, kind)], judged
                )
            if before.st_size > max_size:
                raise DataError(
                    [
                        "%s: cannot read: %s, over %s (--max-size, QSTASH_LISTS_MAX_SIZE)"
                        % (path, megabytes(before.st_size), limit)
                    ],
                    judged,
                )
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
        finally:
            os.close(fd)
        # A writer at work shows in the signature, or (within one tick of a coarse clock) in the
        # length.
        if _signature(after) == judged and len(raw) == after.st_size:
            return raw, judged
        time.sleep(0.02)  # give the writer a moment
    raise FileChanging(
        [
            "%s: changed each time it was read (%d times); looking again later"
            % (path, READ_ATTEMPTS)
        ]
    )


def _open(path: str) -> int:
    try:
        return os.open(
            path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        )
    except OSError as exc:
        kind = None
        with contextlib.suppress(
            OSError
        ):  # a socket cannot even be opened: name it, as fstat would
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


# ---- Writing: the one writer, for writes and --record alike
# ---------------------------------------
@contextlib.contextmanager
def _locked(path: str, deadline: float) -> Iterator[tuple[str, os.stat_result]]:
    """Take every writer's lock (``flock`` on the symlink's target; a version replaced meanwhile:
    again) until ``deadline`` at the most; yield the target and its stat."""
    import fcntl  # POSIX only: writes need it, reads do not

    target, pause = os.path.realpath(path), 0.001
    while True:
        fd = _open(target)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DataError(
                        [
                            "%s: another process kept the file locked for %g s; nothing was written"
                            % (path, LOCK_TIMEOUT)
                        ]
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                continue
            st = os.fstat(fd)
            if _stat(target) == _signature(
                st
            ):  # else a writer replaced the file since it was opened: take the new one
                yield target, st
                return
        finally:
            os.close(fd)  # lets go of the lock


@contextlib.contextmanager
def _written(
    target: str, raw: list[bytes], old: Optional[os.stat_result], source: str, max_size: int
) -> Iterator[Callable[[], Signature]]:
    """Write ``raw`` (TooLarge past ``max_size``) to a temporary file of its own beside ``target``
    (fsync'd, old mode, owner); yield what renames it over ``target`` (atomic) and returns its
    signature; it goes on every way out."""
    if sum(map(len, raw)) > max_size:
        raise TooLarge(
            [
                "%s: would be %s, over the limit of %s (--max-size, QSTASH_LISTS_MAX_SIZE); it is "
                "unchanged" % (source, megabytes(sum(map(len, raw))), megabytes(max_size))
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
        for start in range(
            0, len(raw), 1000
        ):  # as they are (no joined copy), IOV_MAX (1024) pieces a call
            pieces = raw[start : start + 1000]
            written = os.writev(fd, pieces)
            view = (
                memoryview(b"".join(pieces))[written:] if written < sum(map(len, pieces)) else b""
            )
            while view:  # a short write (a signal, a full disk): the rest, or its error
                view = view[os.write(fd, view) :]
        os.fsync(fd)

        def rename() -> Signature:
            nonlocal temporary
            os.replace(temporary, target)
            temporary = ""  # renamed: nothing to remove
            return _signature(os.fstat(fd))

        yield rename
        if not temporary:
            with contextlib.suppress(
                OSError
            ):  # the rename itself on disk: best effort (not every file system)
                dir_fd = os.open(directory or ".", os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
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


def record(
    path: str, document: dict[str, Any], token: str, max_size: int = DEFAULT_MAX_SIZE
) -> Store:
    """Check ``document`` as a one-account file for ``token`` and write it to ``path``; or
    DataError, file unchanged."""
    loaded = parse(encode(document), path, token)
    with contextlib.ExitStack() as stack:
        target, old = (
            stack.enter_context(_locked(path, time.monotonic() + LOCK_TIMEOUT))
            if os.path.lexists(path)
            else (os.path.realpath(path), None)
        )
        stack.enter_context(_written(target, loaded.lines(), old, path, max_size))()
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
        kept.pop(
            "name", None
        )  # QStash writes an endpoint without a name as "" or null: here it has none
    return kept


# ---- The changes a write makes to one item
# ---------------------------------------------------------
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


# ---- Watching: the snapshot in service
# ------------------------------------------------------------
class Status(NamedTuple):
    """What a DataFile serves, for a health check: nothing from the file but its digest."""

    version: Optional[str] = (
        None  # the SHA-256 of the bytes in service, as sha256sum prints it; None: none yet
    )
    loaded_at: Optional[float] = None  # when that version was put in service (a Unix time)
    failed_at: Optional[float] = (
        None  # since when the file on disk is not what is served (a failed look)
    )


class DataFile:
    """The last good :class:`Store` of a data file that may change while it is served, and its one
    writer.

    A reloader thread looks at the file's signature every ``interval`` seconds (or when woken),
    builds a changed version aside and puts it in service whole; a fault is logged when it starts
    and ends, and the last good version stays.  A forked child's first call starts its own (see
    after_fork).  ``token``, ``fallback``: see :func:`parse`. The first load raises DataError if
    ``required``; else :meth:`current` is None until a good version appears. ``writable``:
    :meth:`update` writes the file, and :meth:`current` first looks whether another process has.
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
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.path, self.interval, self.max_size, self.writable, self.limits = (
            path,
            interval,
            max_size,
            writable,
            limits,
        )
        self._token, self._fallback = token, fallback
        # : The signature of the version last judged, the store in service and its Status: one
        # owner, _put.
        self._state: tuple[Optional[Signature], Optional[Store], Status] = (None, None, Status())
        self._raw: list[
            bytes
        ] = []  # the bytes of the version in service, whose digest its Status gets when asked
        self._fault: Optional[str] = None  # the first line of the fault last logged, until it ends
        # : A version on disk not yet loaded: its signature, the store it was compared with, and the
        # digests of the
        #: accounts of that store it keeps (see _unchanged).
        self._seen: tuple[Optional[Signature], Optional[Store], set[bytes]] = (None, None, set())
        self._closed = self._forked = False
        self._lock, self._writing = (
            threading.Lock(),
            threading.Lock(),
        )  # writing: one write at a time here
        self._queued: dict[int, list[Any]] = {}  # the writes waiting for it, by id (see update)
        fault = self._load()
        if fault is not None:
            if required:
                raise fault
            self._report(fault)
        self._start()
        _open_files.add(self)

    def current(self, token: Optional[bytes] = None) -> Optional[Store]:
        """Return the newest good store (None only if there has never been one); with ``token``, one
        whose account of that token is the newest (another process's write to other accounts is
        loaded at the next look)."""
        if self._forked:
            self._adopt()
        if (
            self.writable
            and (on_disk := _stat(self.path)) != self._state[0]
            and not self._unchanged(token, on_disk)
        ):
            self.refresh()  # a write from another process: the next read sees it
        return self._state[1]

    def _unchanged(self, token: Optional[bytes], on_disk: Optional[Signature]) -> bool:
        """Whether the file on disk keeps the account of ``token`` as in service (see _kept; in a
        valid file it is then that account, and a bad one keeps the version in service): a read
        and a compare a version, no parse."""
        store, seen = self._state[1], self._seen
        if token is not None and (seen[0] != on_disk or seen[1] is not store):
            with contextlib.suppress(
                DataError
            ):  # unreadable: what a reload would keep serving, and it logs why
                raw, signature = read(self.path, self.max_size)
                seen = self._seen = (
                    signature,
                    store,
                    {account.token_sha256 for _, account in _kept(store, raw)[0]},
                )
        return token is not None and seen[1] is store and hashlib.sha256(token).digest() in seen[2]

    def status(self) -> Status:
        """Return which version is in service, since when, and when the file on disk stopped being
        it."""
        if self._forked:
            self._adopt()
        with self._lock:
            signature, store, status = self._state
            if (
                status.version is None and store is not None
            ):  # a health check pays for it, once a version
                status = status._replace(version=hashlib.sha256(b"".join(self._raw)).hexdigest())
                self._state = (signature, store, status)
        if (
            status.failed_at is None
            and status.version is not None
            and _stat(self.path) != signature
        ):
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
        """Look now, from this thread: load the file if it changed (always with ``force``); tell if
        it was."""
        with self._lock:
            if not force and _stat(self.path) == self._state[0]:
                return False
            fault = self._load()
            if fault is None:
                logger.info("%s: reloaded", self.path)
                return True
            self._report(fault)
            return False

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
        and say what it did; or LookupError (no such account), LimitReached, TooLarge, Conflict
        (a file that does not load: kept), DataError (locked, unwritable). The writes that come
        while one is written wait for it, then go in one version: one fsync for a burst."""
        deadline, mine = (
            time.monotonic() + LOCK_TIMEOUT,
            [(digest, kind, name, change, args)],
        )  # then its answer
        with self._lock:
            self._queued[id(mine)] = mine
        if not self._writing.acquire(timeout=LOCK_TIMEOUT):
            with self._lock:
                if (
                    self._queued.pop(id(mine), None) is not None
                ):  # not taken by a write at work: withdrawn
                    raise DataError(
                        [
                            "%s: the writes before this one took over %g s; nothing was written"
                            % (self.path, LOCK_TIMEOUT)
                        ]
                    )
            self._writing.acquire()  # taken: its answer comes with that write's
        try:
            if len(mine) == 1:  # not made with the writes before: make it, with those waiting
                with self._lock:
                    batch, self._queued = list(self._queued.values()), {}
                try:
                    self._write(batch, deadline)
                except Exception as exc:
                    for each in batch:
                        each[1:] = [exc]
        finally:
            self._writing.release()
        if isinstance(mine[1], Exception):
            raise mine[1]
        return cast(str, mine[1])

    def _write(self, batch: list[list[Any]], deadline: float) -> None:
        """Make each change of ``batch`` (its answer appended to it) in one version of the file,
        written once."""
        with _locked(self.path, deadline) as (target, old):
            for _ in range(WRITE_ATTEMPTS):
                self.refresh()  # the version on disk: the one in service, or the file read again
                signature, fresh, status = self._state
                if (
                    fresh is None or status.failed_at is not None
                ):  # never overwrite a version that does not load
                    raise Conflict(
                        ["%s: does not load (the fault is logged); nothing was written" % self.path]
                    )
                store, now = fresh, int(time.time() * 1000)
                for each in batch:
                    digest, kind, name, change, args = each[0]
                    try:
                        account = fresh.by_digest[
                            digest
                        ]  # KeyError, a LookupError: no such account (any more)
                        item = account.item(kind, name)
                        new, did = change(item, now, *args)
                        if new is not item:
                            fresh = self._changed(fresh, account, kind, name, item, new)
                        each[1:] = [did]
                    except (LookupError, LimitReached, TooLarge) as exc:  # this change's own
                        each[1:] = [exc]
                if fresh is store:
                    return
                raw = fresh.lines()  # a read waits for the rename only:
                with _written(target, raw, old, self.path, self.max_size) as rename, self._lock:
                    if (
                        _stat(self.path) == signature
                    ):  # else saved by hand meanwhile: the changes again on it
                        self._put(rename(), fresh, raw)
                        return
            raise Conflict(
                [
                    "%s: saved by another hand %d times while a write was made; nothing was written"
                    % (self.path, WRITE_ATTEMPTS)
                ]
            )

    def _changed(
        self,
        store: Store,
        account: Account,
        kind: str,
        name: str,
        item: Optional[Item],
        new: Optional[Item],
    ) -> Store:
        """``store`` with ``new`` in place of ``item``; LimitReached or TooLarge past a limit (an
        account that holds more may keep it, or shrink: the limits are for what writes make)."""
        items, limits = getattr(account, kind), self.limits
        if item is None and len(items) >= limits.items:
            raise LimitReached(
                [
                    "this account has %d %s, the most a write may make (--max-items)"
                    % (len(items), "URL groups" if kind == "url_groups" else "queues")
                ]
            )
        have = len(item.endpoints) if isinstance(item, UrlGroup) else 0
        if isinstance(new, UrlGroup) and len(new.endpoints) > max(limits.endpoints, have):
            raise LimitReached(
                [
                    "a URL group may have %d endpoints at the most (--max-endpoints)"
                    % limits.endpoints
                ]
            )
        items = (
            {**items, name: new}
            if new is not None
            else {key: it for key, it in items.items() if key != name}
        )
        changed = dataclasses.replace(account, **{kind: items})  # type: ignore[arg-type]
        if (
            item is not None and new is not None
        ):  # its bytes: the account's with the item's line swapped, not joined
            old, line = map(attrgetter("lines" if kind == "url_groups" else "raw"), (item, new))
            at = account.lines.find(b"\n  " + old) + 3  # a line is unique: the name is in it
            if at > 2 and account.lines[at + len(old) : at + len(old) + 1] in (b",", b"\n"):
                vars(changed)["lines"] = b"".join(
                    (account.lines[:at], line, account.lines[at + len(old) :])
                )
        share, at = self.max_size // len(store.accounts), store.accounts.index(account)
        if len(changed.lines) > max(
            share, len(account.lines)
        ):  # no account takes the room of the others
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
        fresh = dataclasses.replace(
            store, accounts=store.accounts[:at] + (changed,) + store.accounts[at + 1 :]
        )
        vars(fresh)["by_digest"] = {
            **store.by_digest,
            changed.token_sha256: changed,
        }  # a copy in C, not a loop
        return fresh

    def _parse(self, raw: bytes) -> Store:
        """The store of ``raw``, reusing what it keeps of the one in service (see _kept; each
        account read as a 0 that stands for it, see _Checker.account): another process's write
        costs a compare and the parsing of what it changed.  A file edited by hand may be parsed
        whole."""
        (kept, changed, between), parts, at = _kept(self._state[1], raw), [], 0
        for found, account in kept:
            parts += [raw[at:found], b"0"]
            at = found + len(account.lines)
        if kept:
            with contextlib.suppress(DataError):  # a fault: the whole parse says where
                fresh = parse(
                    b"".join(parts + [raw[at:]]),
                    self.path,
                    self._token,
                    self._fallback,
                    iter(account for _, account in kept),
                )
                if (
                    len(fresh.accounts) == len(kept) + 1 and between[:1] + between[-1:] == b"{}"
                ):  # one changed:
                    vars(fresh.accounts[changed])["lines"] = (
                        between  # its bytes are the file's, not encoded again
                    )
                return fresh
        return parse(raw, self.path, self._token, self._fallback)

    def _load(self) -> Optional[DataError]:
        """Read and build the file; return its fault, if any (callers hold the lock, or are the
        constructor)."""
        signature = None
        try:
            raw, signature = read(self.path, self.max_size)
            self._put(signature, self._parse(raw), [raw])
            return None
        except DataError as exc:
            fault = exc
        except Exception:
            logger.exception("%s: cannot build a snapshot", self.path)
            fault = DataError([])
        # A version read() refused comes with its signature; one not opened, or changing, with None:
        # read again.
        self._state = (
            signature or fault.signature,
            self._state[1],
            self._state[2]._replace(failed_at=time.time()),
        )
        return fault

    def _put(self, signature: Optional[Signature], store: Store, raw: list[bytes]) -> None:
        """Put ``store`` in service, with the signature and the bytes it was built from: the one
        place."""
        self._state, self._raw, self._seen = (
            (signature, store, Status(None, time.time())),
            raw,
            (None, None, set()),
        )
        if self._fault is not None:
            logger.info("%s: good again", self.path)
            self._fault = None

    def _report(self, fault: DataError) -> None:
        """Log a fault when it starts (not at every look while it lasts)."""
        first = fault.faults[0] if fault.faults else type(fault).__name__
        if first != self._fault:
            self._fault, passing = (
                first,
                isinstance(fault, FileChanging),
            )  # a writer busy with it: a warning
            for line in fault.faults:
                logger.log(logging.WARNING if passing else logging.ERROR, "%s", line)
            if not passing:
                logger.error(
                    "%s: %s",
                    self.path,
                    "serving 503 until it is valid"
                    if self._state[1] is None
                    else "keeping the last good version",
                )

    def _start(self) -> None:
        """Start this process's reloader, holding only a weak reference: a DataFile nobody uses
        stops it."""
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=_reloader,
            args=(weakref.ref(self), self._wake, self.interval),
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


def _kept(store: Optional[Store], raw: bytes) -> tuple[list[tuple[int, Account]], int, bytes]:
    """The accounts of ``store`` (of several) that ``raw`` begins and ends with, byte for byte and
    where the writer puts them, each with its offset, in order; and what is between them (what
    changed): its first account's index, its bytes."""
    accounts = (
        store.accounts
        if store is not None and len(store.accounts) > 1 and raw.startswith(b'{"accounts": [\n{')
        else ()
    )
    head, tail = [], []
    i, j, at, end = 0, len(accounts), 15, len(raw) - 4  # after '{"accounts": [\n', before '\n]}\n'
    while i < j and raw.startswith(accounts[i].lines, at):
        head.append((at, accounts[i]))
        i, at = i + 1, at + len(accounts[i].lines) + 2  # and ',\n'
    while j > i and raw.endswith(accounts[j - 1].lines, at, end):
        j, end = j - 1, end - len(accounts[j - 1].lines) - 2  # and ',\n'
        tail.append((end + 2, accounts[j]))
    return head + tail[::-1], i, raw[at:end]


def _reloader(
    ref: "weakref.ReferenceType[DataFile]", wake: threading.Event, interval: float
) -> None:
    """The loop of a DataFile's reloader thread: look every ``interval`` seconds or when woken,
    while it is open.  A writable one loads another process's writes when a request needs them
    (see current), else once they pause."""
    looked: Optional[Signature] = None
    while True:
        force = wake.wait(interval)
        wake.clear()
        data = ref()
        if data is None or data._closed:
            return
        try:
            before, looked = looked, _stat(data.path)
            if force or not data.writable or looked == before:
                data.refresh(force)
        except Exception:  # never let the reloader die
            logger.exception("%s: reloader error", data.path)
        del data  # wait without holding it


_open_files: "weakref.WeakSet[DataFile]" = weakref.WeakSet()


def after_fork() -> None:
    """In a forked child (Python's fork runs this; uWSGI's post-fork hook too), give every open
    DataFile new locks and mark it: its first call starts its reloader and looks (no thread
    starts inside a fork hook)."""
    for data in list(_open_files):
        if not data._closed:
            data._lock, data._writing, data._queued, data._forked = (
                threading.Lock(),
                threading.Lock(),
                {},
                True,
            )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork)


def wake_all() -> None:
    """Have the reloader of every open DataFile look now (what SIGHUP does)."""
    for data in list(_open_files):
        data.wake()
