"""A seeded, bounded fuzzer: thousands of generated requests straight to the WSGI callable.

It checks properties that hold whatever the request, not a second copy of the
rules: every answer has a documented status (never a 5xx), wsgiref's validator
accepts it, errors are JSON with the headers their status needs, HEAD and 304
have no body, no body shows a token, and data (a list or an item) goes only to
a request that carried that account's exact token.  The exact rules are pinned
by the tables in test_app.py and test_items.py.
"""

import json
import random
import warnings
from typing import Any, Dict, Optional, Set
from urllib.parse import parse_qsl

from helpers import TOKEN_A, TOKEN_B, TOKEN_C, call

CASES = 20000
TOKENS = [TOKEN_A, TOKEN_B, TOKEN_C]
ROUTES = [
    "/v2/topics",
    "/v2/queues",
    "/v2/topics/",
    "/v2/queues/",
    "/v2/topics/orders",
    "/v2/queues/emails",
    "/v2/queues/reports",
    "/v2/queues/emails/",
]
METHODS = (
    ["GET"] * 12
    + ["HEAD"] * 3
    + ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW", "get"]
)
PATHS = [
    "/v2/topics",
    "/v2/queues",
    "/v2/topics/",
    "/v2/queues/",
    "",
    "/",
    "/v2",
    "/v2/",
    "//v2/queues",
    "/v2//queues",
    "/v2/queues//",
    "/v2/./queues",
    "/v2/../v2/queues",
    "/v2/%2e%2e/queues",
    "/v2/queues%00",
    "/v2/queues\x00",
    "/v2/queues\n",
    "/v2/\xff\xfe",
    "/V2/QUEUES",
    "/v2/topics/orders",
    "/" + "a" * 5000,
    "/v2/queues" + "/" * 300,
    "/v2/queues;x",
    "/v2/queues?",
    "/v2/qu%65ues",
    "/v2/queues/nothere",
    "/v2/queues/emails/x",
    "/v2/queues//emails",
    "/v2/topics/orders/endpoints",
    "/v2/queues/\xff",
    "/v2/queues/%",
    "/v2/queues/" + "e" * 3000,
]


def token_variants(rng: random.Random) -> str:
    token = rng.choice(TOKENS)
    other = rng.choice(TOKENS)
    if rng.random() < 0.5:
        return token
    return rng.choice(
        [
            token[:-1],
            token + "x",
            token.upper(),
            other + token,
            token + "\x00",
            token + " ",
            " " + token,
            "t\xf6k\xe9n",
            "A" * rng.choice([1, 100, 5000]),
            "",
            other + "-junk",
            "%74oken-a",
            token.replace("-", "%2D"),
        ]
    )


def authorization(rng: random.Random) -> Optional[str]:
    token = token_variants(rng)
    if rng.random() < 0.4:
        return "Bearer " + token
    return rng.choice(
        [
            None,
            None,
            "Bearer " + token,
            "Bearer " + token,
            "bearer " + token,
            "BEARER " + token,
            "Bearer  " + token,
            "Bearer\t" + token,
            " Bearer " + token + " ",
            "Bearer",
            "Bearer ",
            "",
            "Basic " + token,
            token,
            "Bearer " + token + " extra",
            "Bearer " + token + "\ttab",
            "Token " + token,
            "Bearer " + "x" * 4096,
        ]
    )


def query(rng: random.Random) -> str:
    fields = []
    for _ in range(rng.choice([0, 0, 0, 0, 1, 1, 2, 3])):
        fields.append(
            rng.choice(
                [
                    "qstash_token=" + token_variants(rng),
                    "qstash_token=" + token_variants(rng),
                    "qstash_token=",
                    "qstash_token",
                    "qstash%5Ftoken=" + token_variants(rng),
                    "QSTASH_TOKEN=" + token_variants(rng),
                    "limit=10",
                    "",
                    "a=%ZZ",
                    "x=\xff",
                    "qstash_token=%ZZ",
                    "=",
                ]
            )
        )
    return "&".join(fields)


def carried(auth: Optional[str], query_string: str) -> Set[str]:
    """Each value the request offered as a token, exactly: a Bearer header's and every qstash_token
    field's."""
    offered = {
        value
        for name, value in parse_qsl(query_string, keep_blank_values=True, encoding="latin-1")
        if name == "qstash_token"
    }
    scheme, _, value = (auth or "").strip(" \t").partition(" ")
    if scheme.lower() == "bearer":
        offered.add(value.strip(" "))
    return offered


def data_of(app: Any, token: str) -> Set[bytes]:
    """Every body an account's token can be answered with: its lists and each of its items."""
    bodies = set()
    for route in ("/v2/topics", "/v2/queues"):
        listed = call(app, route, headers={"Authorization": "Bearer " + token})
        bodies.add(listed.body)
        for item in listed.json():
            bodies.add(
                call(
                    app,
                    "%s/%s" % (route, item["name"]),
                    headers={"Authorization": "Bearer " + token},
                ).body
            )
    return bodies


def test_fuzz(app: Any, capsys: Any) -> None:
    rng = random.Random(20261122)
    data = {token: data_of(app, token) for token in TOKENS}
    statuses: Dict[int, int] = {}
    for case in range(CASES):
        method = rng.choice(METHODS)
        path = rng.choice(ROUTES if rng.random() < 0.6 else PATHS)
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
        context = "case %d: %r %r %r %r -> %d" % (
            case,
            method,
            path,
            query_string,
            headers,
            response.status,
        )
        status = response.status
        statuses[status] = statuses.get(status, 0) + 1
        assert status in (200, 304, 400, 401, 404, 405), context
        if method == "HEAD" or status == 304:
            assert response.body == b"", context
        else:
            assert response.headers["Content-Length"] == str(len(response.body)), context
        if status in (200, 304):
            # Only a request that carried an account's exact token, where tokens go, gets anything
            # of it.
            owners = [token for token in TOKENS if token in carried(auth, query_string)]
            assert owners, context
            if status == 200 and method == "GET":
                assert any(response.body in data[token] for token in owners), context
            continue
        assert response.headers["Content-Type"] == "application/json", context
        assert status != 401 or response.headers["WWW-Authenticate"].startswith(
            'Bearer realm="qstash"'
        ), context
        assert status != 405 or response.headers["Allow"] in ("GET, HEAD", ""), context
        if method != "HEAD":
            error = response.json()
            assert list(error) == ["error"] and isinstance(error["error"], str), context
            assert all(token not in error["error"] for token in TOKENS), context
    with capsys.disabled():
        print("\nfuzz: %d requests, statuses %s" % (CASES, json.dumps(statuses, sort_keys=True)))
    # It reached every answer.
    assert min(statuses.get(status, 0) for status in (200, 304, 400, 401, 404, 405)) > 20
