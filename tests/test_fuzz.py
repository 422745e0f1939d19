"""A seeded, bounded fuzzer: thousands of generated requests straight to the WSGI callable.

Each answer must be a documented status with a JSON body (wsgiref's validator
checks the protocol), and data only ever goes to a request that held that
account's exact token.  The expectation comes from a second, independent
statement of the rules (``expected``), not from the app's code.
"""

import json
import random
import warnings
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import TOKEN_A, TOKEN_B, TOKEN_C, call

CASES = 20000
TOKENS = [TOKEN_A, TOKEN_B, TOKEN_C]
ROUTES = {"/v2/topics", "/v2/queues", "/v2/topics/", "/v2/queues/"}
METHODS = ["GET"] * 12 + ["HEAD"] * 3 + ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW", "get"]
PATHS = [
    "/v2/topics", "/v2/queues", "/v2/topics/", "/v2/queues/", "", "/", "/v2", "/v2/", "//v2/queues",
    "/v2//queues", "/v2/queues//", "/v2/./queues", "/v2/../v2/queues", "/v2/%2e%2e/queues", "/v2/queues%00",
    "/v2/queues\x00", "/v2/queues\n", "/v2/\xff\xfe", "/V2/QUEUES", "/v2/topics/orders", "/" + "a" * 5000,
    "/v2/queues" + "/" * 300, "/v2/queues;x", "/v2/queues?", "/v2/qu%65ues",
]


def token_variants(rng: random.Random) -> str:
    token = rng.choice(TOKENS)
    other = rng.choice(TOKENS)
    if rng.random() < 0.5:
        return token
    return rng.choice([
        token[:-1], token + "x", token.upper(), other + token, token + "\x00",
        token + " ", " " + token, "t\xf6k\xe9n", "A" * rng.choice([1, 100, 5000]), "", other + "-junk",
        "%74oken-a", token.replace("-", "%2D"),
    ])


def authorization(rng: random.Random) -> Optional[str]:
    token = token_variants(rng)
    if rng.random() < 0.4:
        return "Bearer " + token
    return rng.choice([
        None, None, "Bearer " + token, "Bearer " + token, "bearer " + token, "BEARER " + token,
        "Bearer  " + token, "Bearer\t" + token, " Bearer " + token + " ", "Bearer", "Bearer ", "",
        "Basic " + token, token, "Bearer " + token + " extra", "Bearer " + token + "\ttab",
        "Token " + token, "Bearer " + "x" * 4096,
    ])


def query(rng: random.Random) -> str:
    fields = []
    for _ in range(rng.choice([0, 0, 0, 0, 1, 1, 2, 3])):
        fields.append(rng.choice([
            "qstash_token=" + token_variants(rng), "qstash_token=" + token_variants(rng), "qstash_token=",
            "qstash_token", "qstash%5Ftoken=" + token_variants(rng), "QSTASH_TOKEN=" + token_variants(rng),
            "limit=10", "", "a=%ZZ", "x=\xff", "qstash_token=%ZZ", "=",
        ]))
    return "&".join(fields)


def decode(value: str) -> bytes:
    """The test's own percent-decoding of a query component (PEP 3333 strings are latin-1)."""
    from urllib.parse import unquote_to_bytes

    return unquote_to_bytes(value.encode("latin-1").replace(b"+", b" "))


def expected(method: str, path: str, query_string: str, auth: Optional[str]) -> Tuple[int, Optional[str]]:
    """Return (status, token of the account served or None), restating the README's rules."""
    if path not in ROUTES:
        return 404, None
    if method not in ("GET", "HEAD"):
        return 405, None
    presented: List[bytes] = []
    for field in query_string.split("&") if query_string else []:
        name, _, value = field.partition("=")
        if decode(name) == b"qstash_token":
            presented.append(decode(value))
    if auth is not None:
        words = auth.strip(" \t").split(" ", 1)
        if words[0].lower() == "bearer" and len(words) == 2:
            presented.append(words[1].lstrip(" ").encode("latin-1"))
        else:
            presented.append(b"")
    if not presented or len(set(presented)) != 1:
        return 401, None
    token = presented[0]
    if not token or b" " in token or b"\t" in token:
        return 401, None
    for known in TOKENS:
        if token == known.encode():
            return 200, known
    return 401, None


def test_fuzz(app: Any, capsys: Any) -> None:
    rng = random.Random(20261122)
    bodies: Dict[Tuple[str, str], bytes] = {}
    for token in TOKENS:
        for route in ("/v2/topics", "/v2/queues"):
            bodies[token, route] = call(app, route, headers={"Authorization": "Bearer " + token}).body
    statuses: Dict[int, int] = {}
    for case in range(CASES):
        method = rng.choice(METHODS)
        path = rng.choice(sorted(ROUTES) if rng.random() < 0.6 else PATHS)
        query_string = query(rng)
        auth = authorization(rng)
        headers = {} if auth is None else {"Authorization": auth}
        if rng.random() < 0.1:
            headers["If-None-Match"] = rng.choice(['"x"', "*", "W/", ""])
        if rng.random() < 0.1:
            headers["Accept-Encoding"] = rng.choice(["gzip", "br", "gzip;q=0", "*;q=abc", ""])
        with warnings.catch_warnings():
            # The validator warns about methods it does not know; those are part of the fuzz.
            warnings.filterwarnings("ignore", "Unknown REQUEST_METHOD")
            response = call(app, path, method=method, query=query_string, headers=headers)
        status, token = expected(method, path, query_string, auth)
        context = "case %d: %r %r %r %r -> %d" % (case, method, path, query_string, headers, response.status)
        statuses[response.status] = statuses.get(response.status, 0) + 1
        if method == "HEAD" or response.status == 304:
            assert response.body == b"", context
        if status == 200 and headers.get("If-None-Match") == "*":
            status = 304  # an authorised request for "any current version" it already has
        assert response.status == status, context
        if status in (200, 304):
            assert token is not None
            route = path.rstrip("/")
            if method == "GET" and status == 200 and "Accept-Encoding" not in headers:
                assert response.body == bodies[token, route], context
            continue
        assert response.headers["Content-Type"] == "application/json", context
        error = response.json() if method != "HEAD" else {"error": ""}
        assert list(error) == ["error"], context
        assert all(t not in response.body.decode("latin-1") for t in TOKENS), context
    with capsys.disabled():
        print("\nfuzz: %d requests, statuses %s" % (CASES, json.dumps(statuses, sort_keys=True)))
    assert statuses.get(200, 0) > 2000 and statuses.get(401, 0) > 2000  # the fuzz reached both sides


@pytest.mark.parametrize("accounts", [1, 3, 50])
def test_token_comparison_has_no_early_exit(accounts: int, monkeypatch: Any) -> None:
    """Every lookup compares against every account, matching or not, first byte or last."""
    import hashlib
    import hmac

    import store

    store_ = store.Store(tuple(
        store.Account(hashlib.sha256(b"token-%d" % i).digest()) for i in range(accounts)
    ))
    calls: List[int] = []
    real = hmac.compare_digest
    monkeypatch.setattr(store.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    for presented in [b"token-0", b"token-%d" % (accounts - 1), b"token-", b"x", b"token-0x", b""]:
        calls.clear()
        store_.find(presented)
        assert len(calls) == accounts, presented
