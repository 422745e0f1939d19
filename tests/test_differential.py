"""The differential tests of loading's short ways, each against the simple way, over seeded
generated inputs:

- the reuse: what a process builds from another's version of the file by reusing the accounts it
  has (store._reuse) must be exactly what a whole parse of the same bytes builds, or be refused
  (None: then the whole parse decides).  Files as the writer writes them, edited as hands and
  tools do.
- the checker's builders (store._BUILDERS, written from the schema): an item they build is the
  one the checker's rule-by-rule way builds, and one they refuse it refuses too.  Items valid and
  broken at each field, with a key unknown, missing or given twice.

The next optimisation of loading is checked by adding its path here.
"""

import hashlib
import json
import random
from typing import Any, Callable, Dict, List, Optional, Tuple

import store

SEED = 42
CASES = 6000
TOKENS = ["token-%d" % i for i in range(8)]


# ---- Files as the writer writes them -------------------------------------------------------------
def queue(rng: random.Random, name: str) -> Dict[str, Any]:
    created = rng.randrange(1700000000000, 1700001000000)
    return {
        "createdAt": created,
        "updatedAt": created + rng.randrange(0, 1000),
        "name": name,
        "parallelism": rng.randrange(1, 5),
        "lag": rng.randrange(0, 3),
        "paused": rng.random() < 0.3,
    }


def url_group(rng: random.Random, name: str) -> Dict[str, Any]:
    endpoints: List[Dict[str, str]] = []
    for i in range(rng.randrange(0, 3)):
        endpoint = {"url": "https://e%d.example.com/ü/%s" % (i, name)}
        if rng.random() < 0.5:
            endpoint["name"] = "n%d" % i
        endpoints.append(endpoint)
    return {"createdAt": 1, "updatedAt": 2, "name": name, "endpoints": endpoints}


def account(rng: random.Random, token: str) -> Dict[str, Any]:
    found: Dict[str, Any] = {}
    if rng.random() < 0.3:
        found["tokenSha256"] = hashlib.sha256(token.encode()).hexdigest()
    else:
        found["token"] = token
    if rng.random() < 0.3:
        found["signingKeys"] = {"current": "sig_c_" + token, "next": "sig_n_" + token}
    found["urlGroups"] = [url_group(rng, "g%d" % i) for i in range(rng.randrange(0, 3))]
    found["queues"] = [queue(rng, "q%d" % i) for i in range(rng.randrange(0, 4))]
    return found


def written(rng: random.Random) -> Tuple[store.Store, bytes]:
    """A store of several accounts, and its file as the writer writes it."""
    tokens = rng.sample(TOKENS, rng.randrange(1, 6))
    document = {"accounts": [account(rng, token) for token in tokens]}
    loaded = store.parse(store.encode(document), "data.json", None)
    return loaded, b"".join(loaded.lines())


# ---- Hand edits ----------------------------------------------------------------------------------
def pieces(raw: bytes) -> List[bytes]:
    """The accounts' bytes of a file the writer wrote (its layout: store.FILE_OPEN)."""
    middle = raw[len(store.FILE_OPEN) : len(raw) - len(store.FILE_CLOSE)]
    first, *rest = middle.split(store.ACCOUNT_SEPARATOR + b"{")  # only between accounts
    return [first] + [b"{" + account for account in rest]


def joined(accounts: List[bytes]) -> bytes:
    return store.FILE_OPEN + store.ACCOUNT_SEPARATOR.join(accounts) + store.FILE_CLOSE


def place(rng: random.Random, raw: bytes) -> int:
    """Where a byte is edited: anywhere, or (as often) by an edge the reuse must account for: an
    account's first or last byte, a separator, the file's opening or closing."""
    if rng.random() < 0.5:
        return rng.randrange(len(raw))
    edges = [len(store.FILE_OPEN), len(raw) - len(store.FILE_CLOSE)]
    at = raw.find(store.ACCOUNT_SEPARATOR + b"{")
    while at >= 0:
        edges.append(at)
        at = raw.find(store.ACCOUNT_SEPARATOR + b"{", at + 1)
    return min(len(raw) - 1, max(0, rng.choice(edges) + rng.randrange(-2, 3)))


def byte_changed(rng: random.Random, raw: bytes) -> bytes:
    at = place(rng, raw)
    return raw[:at] + bytes([rng.choice(b'1 ,\n{}[]":ax')]) + raw[at + 1 :]


def byte_inserted(rng: random.Random, raw: bytes) -> bytes:
    at = place(rng, raw)
    return raw[:at] + bytes([rng.choice(b'1 ,\n\t{}[]":ax')]) + raw[at:]


def byte_deleted(rng: random.Random, raw: bytes) -> bytes:
    at = place(rng, raw)
    return raw[:at] + raw[at + 1 :]


def whitespace(rng: random.Random, raw: bytes) -> bytes:
    """Spaces or a line break where JSON allows them, next to a separator or an end."""
    spots = [i for i, byte in enumerate(raw) if byte in b",[]{}"]
    at = rng.choice(spots) + rng.choice((0, 1))
    return raw[:at] + rng.choice((b" ", b"\n", b"  \n", b"\t")) + raw[at:]


def accounts_moved(rng: random.Random, raw: bytes) -> bytes:
    accounts = pieces(raw)
    how = rng.choice(("swap", "duplicate", "remove", "move", "cut"))
    i, j = rng.randrange(len(accounts)), rng.randrange(len(accounts))
    if how == "swap":
        accounts[i], accounts[j] = accounts[j], accounts[i]
    elif how == "duplicate":
        accounts.insert(j, accounts[i])
    elif how == "remove" and len(accounts) > 1:
        del accounts[i]
    elif how == "cut":  # its bytes deleted, its separator left behind
        return raw.replace(accounts[i], b"", 1)
    else:
        accounts.insert(j, accounts.pop(i))
    return joined(accounts)


def keys_reordered(rng: random.Random, raw: bytes) -> bytes:
    """One account written again with its keys in another order (as an editor's formatter might)."""
    accounts = pieces(raw)
    i = rng.randrange(len(accounts))
    try:
        reordered = dict(reversed(list(json.loads(accounts[i]).items())))
    except (ValueError, AttributeError):  # a piece that an edit before this one broke
        return raw
    accounts[i] = json.dumps(reordered, ensure_ascii=False).encode()
    return joined(accounts)


def no_final_newline(rng: random.Random, raw: bytes) -> bytes:
    return raw.rstrip(b"\n")


def token_changed(rng: random.Random, raw: bytes) -> bytes:
    old, new = rng.choice(TOKENS).encode(), rng.choice(TOKENS).encode()
    return raw.replace(b'"%s"' % old, b'"%s"' % new, 1)


def item_written(rng: random.Random, raw: bytes) -> bytes:
    """What another process's write leaves: one item changed, the file written whole (a file that
    does not load is not written)."""
    try:
        loaded = store.parse(raw, "data.json", None)
    except store.DataError:
        return raw
    chosen = rng.choice(loaded.accounts)
    name = "q%d" % rng.randrange(5)
    queues = dict(chosen.queues)
    queues[name] = store.Queue(1, 2, name, rng.randrange(1, 9), 0)
    changed = store.Account(
        chosen.token_sha256, chosen.url_groups, queues, chosen.signing_keys, chosen.credential
    )
    accounts = tuple(changed if a is chosen else a for a in loaded.accounts)
    return b"".join(store.Store(accounts).lines())


EDITS: List[Callable[[random.Random, bytes], bytes]] = [
    byte_changed,
    byte_inserted,
    byte_deleted,
    whitespace,
    accounts_moved,
    keys_reordered,
    no_final_newline,
    token_changed,
    item_written,
]


# ---- The two ways, compared ----------------------------------------------------------------------
def canonical(loaded: store.Store) -> Any:
    """Everything a store serves and writes, in a form two stores compare by."""
    return (
        loaded.single_account,
        loaded.fallback_used,
        [
            (
                account.token_sha256,
                account.credential,
                account.signing_keys,
                [(name, item.to_dict()) for name, item in account.url_groups.items()],
                [(name, item.to_dict()) for name, item in account.queues.items()],
            )
            for account in loaded.accounts
        ],
    )


def whole(raw: bytes) -> Optional[Any]:
    try:
        return canonical(store.parse(raw, "data.json", None))
    except store.DataError:
        return None


def test_the_reuse_builds_what_a_whole_parse_builds_or_refuses() -> None:
    rng = random.Random(SEED)
    reused = refused_both = 0
    for case in range(CASES):
        known, raw = written(rng)
        edited = raw
        for _ in range(rng.choice((1, 1, 2))):
            edited = rng.choice(EDITS)(rng, edited)
        expected = whole(edited)
        built = store._reuse(edited, known)
        if built is not None:
            reused += 1
            assert canonical(built) == expected, (case, edited)
        elif expected is None:
            refused_both += 1
    # The generator reaches both sides: many reused, many that no parse takes.
    assert reused > CASES // 10 and refused_both > CASES // 10, (reused, refused_both)


def test_what_the_writer_writes_loads_as_the_store_it_wrote() -> None:
    """Every store's file (its lines) parses to that store: what the reuse compares by."""
    rng = random.Random(SEED + 1)
    for _ in range(500):
        known, raw = written(rng)
        assert whole(raw) == canonical(known)
        assert whole(item_written(rng, raw)) is not None


# ---- The checker's builders ---------------------------------------------------------------------
def broken(rng: random.Random, item: Dict[str, Any]) -> Dict[str, Any]:
    """``item`` with one key or value changed as a hand would get it wrong (or left right)."""
    item = json.loads(json.dumps(item))
    key = rng.choice(list(item) + ["extra"])
    how = rng.choice(("drop", "value", "value", "value", "keep"))
    if how == "drop":
        item.pop(key, None)
    elif how == "value":
        item[key] = rng.choice(
            [None, True, False, -1, 0, 1.0, 2**53, "", "a b", "x", "https://x.example/", [], {}]
            + [item.get("createdAt", 5) - 1, "\u00e9t\u00e9", "q0"]
        )
    return item


def by_rules(checker: Any, value: Any, cls: type, seen: Dict[str, int], i: int) -> Any:
    """The checker's rule-by-rule way (no builder in it, nested arrays included)."""
    return checker.item(value, "queues", i, cls, seen)


def test_the_builders_build_what_the_rules_build() -> None:
    rng = random.Random(SEED + 2)
    built_by_both = 0
    for case in range(CASES):
        cls = rng.choice([store.Queue, store.UrlGroup])
        good = queue(rng, "q%d" % rng.randrange(3)) if cls is store.Queue else url_group(rng, "g")
        if cls is store.UrlGroup and good["endpoints"] and rng.random() < 0.5:
            j = rng.randrange(len(good["endpoints"]))
            good["endpoints"][j] = broken(rng, good["endpoints"][j])
        value = broken(rng, good) if rng.random() < 0.7 else good
        if value and rng.random() < 0.1:  # a key given twice, as the parser hands it on
            twice = rng.choice(list(value.items()))
            value = store._pairs(list(value.items()) + [twice])
        seen = {"q0": 7} if rng.random() < 0.2 else {}  # a name given before, at 7
        fast = store._BUILDERS[cls](value, dict(seen), 0)
        slow = by_rules(store._Checker(), value, cls, dict(seen), 0)
        if fast is not None:
            built_by_both += 1
            assert slow is not None and slow.to_dict() == fast.to_dict(), (case, value)
        elif slow is not None:  # refused by the short way, built by the rules: the same item
            raise AssertionError((case, value, slow))
    assert CASES // 10 < built_by_both < CASES * 9 // 10, built_by_both
