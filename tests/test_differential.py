"""The differential tests of the short ways, each against the simple way, over seeded generated
inputs: the writer's, what it serves after each write, built on the store in service (unchanged
items keep their encoded bytes), is what a whole parse of the file it wrote builds; a store's
size, summed from its accounts', is its file's.

The next optimisation is checked by adding its path here.
"""

import hashlib
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
    return loaded, loaded.lines


# ---- The two ways, compared ----------------------------------------------------------------------
def canonical(loaded: Optional[store.Store]) -> Any:
    """Everything a store serves and writes, in a form two stores compare by."""
    assert loaded is not None
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


def test_the_writer_serves_what_a_whole_parse_of_the_file_it_wrote_builds(tmp_path: Any) -> None:
    """The writer builds each version on the store in service (unchanged items keep their
    bytes) and serves it without reading it back: what it serves is what a whole parse of the
    file it wrote builds, after every write of a seeded run of them."""
    rng = random.Random(SEED)
    _, raw = written(rng)
    path = tmp_path / "data.json"
    path.write_bytes(raw)
    data = store.DataFile(str(path), None, 3600, writable=True)
    for case in range(400):
        loaded = data.current()
        assert loaded is not None
        account = rng.choice(loaded.accounts)
        name = "q%d" % rng.randrange(8)
        changes: List[Tuple[Callable[..., Any], Tuple[Any, ...]]] = [
            (store.upsert_queue, (name, rng.choice([None, 1, 7]), rng.choice([None, True]))),
            (store.pause_queue, (name, rng.random() < 0.5)),
            (store.delete_queue, (name,)),
            (store.add_endpoints, (name, [store.Endpoint(None, "https://x.example/%d" % case)])),
            (store.remove_endpoints, (name, [{"url": "https://x.example/%d" % (case - 1)}])),
            (store.delete_url_group, (name,)),
        ]
        change, args = rng.choice(changes)
        try:
            data.update(account.token_sha256, lambda a, now: change(a, now, *args))  # noqa: B023
        except store.NoSuchItem:
            pass
        loaded = data.current()
        assert canonical(loaded) == whole(path.read_bytes()), case
    data.close()


def test_what_the_writer_writes_loads_as_the_store_it_wrote() -> None:
    """Every store's file (its lines) parses to that store."""
    rng = random.Random(SEED + 1)
    for _ in range(500):
        known, raw = written(rng)
        assert whole(raw) == canonical(known)


def test_a_log_line_is_quoted_as_quote_alone_quotes_it() -> None:
    """app._printable's short way (the text as it is, where quote() would keep every character)
    against quote() itself, over seeded texts of every kind of character."""
    from urllib.parse import quote

    import app

    rng = random.Random(SEED + 3)
    alphabet = [chr(c) for c in range(0x80)] + ["\u00e9", "\u2028", "\udc80", " ", "%"]
    for _ in range(CASES):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        slow = quote(text.encode("latin-1", "backslashreplace"), safe=app._SAFE)
        assert app._printable(text) == slow, repr(text)
