"""The data file: every fault class with its exact message, and what a good file becomes."""

import contextlib
import copy
import gc
import hashlib
import json
import os
import random
import re
import signal
import threading
from pathlib import Path
from typing import Any, Callable, List, Tuple

import pytest
from helpers import (
    ALPHA_GROUP,
    ALPHA_QUEUE,
    QUEUE_KEYS,
    TOKEN_A,
    accounts_document,
    eventually,
    served,
    write_json,
)

import store

Q = {"createdAt": 1, "updatedAt": 2, "name": "q", "parallelism": 1, "lag": 0}
G = {"createdAt": 1, "updatedAt": 2, "name": "g", "endpoints": [{"url": "https://a.example/"}]}


def faults(document: Any) -> List[str]:
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    with pytest.raises(store.DataError) as info:
        store.parse(raw, "data.json", "t")
    return info.value.problems


def one(document: Any) -> str:
    found = faults(document)
    assert len(found) == 1, found
    return found[0]


FAULTS = [
    # Not JSON, or not the right shape at the top
    (b'{"queues": ["\xff"]}', "not UTF-8 text: invalid start byte at byte 13"),
    (b'\xef\xbb\xbf{"queues": ["\xff"]}', "not UTF-8 text: invalid start byte at byte 16"),
    (b"[]", "(top level): expected an object, got an array"),
    (b"null", "(top level): expected an object, got null"),
    (
        {"queue": []},
        "queue: unknown key (expected 'urlGroups', 'queues', 'signingKeys', 'accounts')",
    ),
    (
        {"accounts": [], "queues": []},
        "queues: unknown key next to 'accounts' (a file lists accounts, or holds 'urlGroups' and "
        "'queues' of one account, not both)",
    ),
    # Null or a wrong type where an array is expected
    ({"queues": None}, "queues: expected an array, got null"),
    ({"urlGroups": {}}, "urlGroups: expected an array, got an object"),
    (
        {"urlGroups": [dict(G, endpoints=None)]},
        "urlGroups[0].endpoints: expected an array, got null",
    ),
    ({"accounts": None}, "accounts: expected an array, got null"),
    ({"queues": ["q"]}, 'queues[0]: expected an object, got "q"'),
    # Wrong types
    (
        {"queues": [dict(Q, lag="7")]},
        'queues[0].lag: expected an integer from 0 to 2**53 - 1, got "7"',
    ),
    (
        {"queues": [dict(Q, lag=True)]},
        "queues[0].lag: expected an integer from 0 to 2**53 - 1, got true",
    ),
    (
        {"queues": [dict(Q, parallelism=None)]},
        "queues[0].parallelism: expected an integer from 0 to 2**53 - 1, got null",
    ),
    (
        {"queues": [dict(Q, createdAt=1.5)]},
        "queues[0].createdAt: expected an integer from 0 to 2**53 - 1, got 1.5",
    ),
    (
        {"queues": [dict(Q, updatedAt=2.0)]},
        "queues[0].updatedAt: expected an integer from 0 to 2**53 - 1, got 2.0",
    ),
    (
        {"queues": [dict(Q, paused="false")]},
        'queues[0].paused: expected true or false, got "false"',
    ),
    ({"queues": [dict(Q, paused=0)]}, "queues[0].paused: expected true or false, got 0"),
    ({"queues": [dict(Q, name=7)]}, "queues[0].name: expected a non-empty string, got 7"),
    (
        {"urlGroups": [dict(G, endpoints=[{"url": 5}])]},
        "urlGroups[0].endpoints[0].url: expected an absolute http or https URL, got 5",
    ),
    # Negative, too large, out of order
    (
        {"queues": [dict(Q, lag=-1)]},
        "queues[0].lag: expected an integer from 0 to 2**53 - 1, got -1",
    ),
    (
        {"queues": [dict(Q, parallelism=-2)]},
        "queues[0].parallelism: expected an integer from 0 to 2**53 - 1, got -2",
    ),
    (
        {"queues": [dict(Q, createdAt=-1)]},
        "queues[0].createdAt: expected an integer from 0 to 2**53 - 1, got -1",
    ),
    (
        {"queues": [dict(Q, lag=2**53)]},
        "queues[0].lag: expected an integer from 0 to 2**53 - 1, got 9007199254740992",
    ),
    (
        b'{"queues": [{"createdAt": 1, "updatedAt": 2, "name": -1%s, "parallelism": 1, "lag": 1}]}'
        % (b"0" * 99),
        "queues[0].name: expected a non-empty string, got -1%s..." % ("0" * 55),
    ),
    (
        {"queues": [dict(Q, parallelism=10**20)]},
        "queues[0].parallelism: expected an integer from 0 to 2**53 - 1, got 100000000000000000000",
    ),
    (
        {"queues": [dict(Q, parallelism=10**20 - 1)]},
        "queues[0].parallelism: expected an integer from 0 to 2**53 - 1, got 99999999999999999999",
    ),
    (
        {"queues": [dict(Q, createdAt=5, updatedAt=4)]},
        "queues[0].updatedAt: expected a time not before createdAt (5), got 4",
    ),
    (
        {"urlGroups": [dict(G, createdAt=5, updatedAt=4)]},
        "urlGroups[0].updatedAt: expected a time not before createdAt (5), got 4",
    ),
    # Missing and unknown keys, at every level
    ({"queues": [{k: v for k, v in Q.items() if k != "lag"}]}, "queues[0].lag: missing"),
    (
        {"urlGroups": [{k: v for k, v in G.items() if k != "endpoints"}]},
        "urlGroups[0].endpoints: missing",
    ),
    ({"urlGroups": [dict(G, endpoints=[{"name": "x"}])]}, "urlGroups[0].endpoints[0].url: missing"),
    (
        {"queues": [dict(Q, paralelism=2)]},
        "queues[0].paralelism: unknown key (expected %s)" % QUEUE_KEYS,
    ),
    (
        {"urlGroups": [dict(G, topic="x")]},
        "urlGroups[0].topic: unknown key (expected 'createdAt', 'updatedAt', 'name', 'endpoints')",
    ),
    (
        {"urlGroups": [dict(G, endpoints=[{"url": "http://a", "nmae": "b"}])]},
        "urlGroups[0].endpoints[0].nmae: unknown key (expected 'url', 'name')",
    ),
    (
        {"accounts": [{"token": "t", "queus": []}]},
        "accounts[0].queus: unknown key (expected 'token', 'tokenSha256', 'urlGroups', 'queues', "
        "'signingKeys')",
    ),
    # Names
    ({"queues": [dict(Q, name="")]}, 'queues[0].name: expected a non-empty string, got ""'),
    ({"urlGroups": [dict(G, name="")]}, 'urlGroups[0].name: expected a non-empty string, got ""'),
    (
        {"urlGroups": [dict(G, name="my group")]},
        "urlGroups[0].name: expected only letters, digits, '-', '.' and "
        "'_', not dots alone, got \"my group\"",
    ),
    (
        {"urlGroups": [dict(G, name="ordérs")]},
        "urlGroups[0].name: expected only letters, digits, '-', '.' and "
        "'_', not dots alone, got \"ordérs\"",
    ),
    (
        {"queues": [Q, dict(Q, lag=3)]},
        'queues[1].name: duplicate name "q" (also at queues[0].name)',
    ),
    ({"urlGroups": [G, G]}, 'urlGroups[1].name: duplicate name "g" (also at urlGroups[0].name)'),
    (
        {
            "urlGroups": [
                dict(
                    G,
                    endpoints=[{"name": "e", "url": "http://a"}, {"name": "e", "url": "http://b"}],
                )
            ]
        },
        'urlGroups[0].endpoints[1].name: duplicate name "e" (also at '
        "urlGroups[0].endpoints[0].name)",
    ),
    (
        {"urlGroups": [dict(G, endpoints=[{"name": None, "url": "http://a"}])]},
        "urlGroups[0].endpoints[0].name: expected a non-empty string, got null",
    ),
    (
        {"queues": [dict(Q, name="two\nlines")]},
        "queues[0].name: expected only letters, digits, '-', '.' and "
        "'_', not dots alone, got \"two\\nlines\"",
    ),
    (
        {"queues": [dict(Q, name="caf\u00e9\ud800")]},
        "queues[0].name: expected only letters, digits, '-', '.' and '_', not dots alone, got "
        '"caf\\u00e9\\ud800"',
    ),
    (
        {"queues": [dict(Q, name="a/b")]},
        "queues[0].name: expected only letters, digits, '-', '.' and "
        "'_', not dots alone, got \"a/b\"",
    ),
    (
        {"urlGroups": [dict(G, endpoints=[{"name": "e\u2028", "url": "http://a"}])]},
        "urlGroups[0].endpoints[0].name: expected printable characters "
        '(no control characters, line breaks or lone surrogates), got "e\\u2028"',
    ),
    (
        {"urlGroups": [dict(G, endpoints=[{"name": "a\tb", "url": "http://a"}])]},
        "urlGroups[0].endpoints[0].name: expected printable characters "
        '(no control characters, line breaks or lone surrogates), got "a\\tb"',
    ),
    # A key from the file is shown escaped and cut short: one short line per fault
    (
        {"queues": [dict(Q, **{"la\ng": 1})]},
        'queues[0]."la\\ng": unknown key (expected %s)' % QUEUE_KEYS,
    ),
    (
        {"accounts": [], "k" * 100: 1},
        "\"%s...: unknown key next to 'accounts' (a file lists accounts, "
        "or holds 'urlGroups' and 'queues' of one account, not both)" % ("k" * 56),
    ),
    # Endpoint URLs
    *[
        (
            {"urlGroups": [dict(G, endpoints=[{"url": url}])]},
            'urlGroups[0].endpoints[0].url: expected an absolute http or https URL, got "%s"' % url,
        )
        for url in [
            "ftp://a.example/",
            "/hook",
            "https://",
            "http://[::1/x",
            "http://a:port/",
            "http://a.example/x y",
        ]
    ],
    # Accounts and tokens (a token's value is never shown)
    ({"accounts": [{}]}, "accounts[0]: expected exactly one of 'token' or 'tokenSha256'"),
    (
        {"accounts": [{"token": "a", "tokenSha256": "0" * 64}]},
        "accounts[0]: expected exactly one of 'token' or 'tokenSha256'",
    ),
    (
        {"accounts": [{"token": ""}]},
        "accounts[0].token: expected a non-empty token of visible ASCII characters, no spaces",
    ),
    (
        {"accounts": [{"token": "my secret"}]},
        "accounts[0].token: expected a non-empty token of visible ASCII characters, no spaces",
    ),
    ({"accounts": [{"token": 5}]}, "accounts[0].token: expected a string"),
    (
        {"accounts": [{"tokenSha256": "abc"}]},
        "accounts[0].tokenSha256: expected 64 hexadecimal digits (a SHA-256 digest, printf %s "
        "TOKEN | sha256sum), got a string of 3 characters",
    ),
    (
        {"accounts": [{"tokenSha256": 5551234987}]},
        "accounts[0].tokenSha256: expected 64 hexadecimal digits (a SHA-256 digest, printf %s "
        "TOKEN | sha256sum), got a number",
    ),
    # A file that lists tokens where accounts go: named by their kind alone.
    ({"accounts": ["tok-alice-5f3a9c"]}, "accounts[0]: expected an object, got a string"),
    ({"accounts": "tok-alice-5f3a9c"}, "accounts: expected an array, got a string"),
    ("tok-alice-5f3a9c", "(top level): expected an object, got a string"),
    ({"accounts": [{"token": "a"}, {"token": "a"}]}, "accounts[1]: same token as accounts[0]"),
    (
        {"accounts": [{"token": "a"}, {"tokenSha256": hashlib.sha256(b"a").hexdigest().upper()}]},
        "accounts[1]: same token as accounts[0]",
    ),
]


@pytest.mark.parametrize("document, message", FAULTS)
def test_each_fault_is_reported_with_its_place(document: Any, message: str) -> None:
    assert one(document) == "data.json: " + message


@pytest.mark.parametrize(
    "raw", [b'{"queues": [}', b'{"queues": [1 2]}', b'{"queues" []}', b'{"queues": [1, , 2]}']
)
def test_invalid_json_is_reported_with_its_line_and_column(raw: bytes) -> None:
    # The place and the words are the json module's own; they differ between Python versions.
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(raw)
    error = info.value
    assert one(raw) == "data.json: line %d, column %d: invalid JSON: %s" % (
        error.lineno,
        error.colno,
        error.msg,
    )


COMMA = "invalid JSON: a comma before the closing '%s' (JSON allows none)"


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            b"",
            "data.json: empty: a data file is a JSON object (python app.py --example prints one)",
        ),
        (
            b" \n\t",
            "data.json: empty: a data file is a JSON object (python app.py --example prints one)",
        ),
        (b'{"queues": []\n,}', "data.json: line 2, column 2: " + COMMA % "}"),
        (b'{"queues": [\n\n  {"name": 1,}]}', "data.json: line 3, column 14: " + COMMA % "}"),
        (b'{"queues": [1, ]}', "data.json: line 1, column 16: " + COMMA % "]"),
    ],
)
def test_an_empty_file_and_a_trailing_comma_are_said_in_our_words(raw: bytes, message: str) -> None:
    assert one(raw) == message


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            b'{"queues": [{"createdAt": 1, "updatedAt": 2, "name": "q", "parallelism": 5, '
            b'"lag": 0, "parallelism": 7}]}',
            "data.json: queues[0].parallelism: given twice in one object (only one is allowed)",
        ),
        (
            b'{"queues": [], "queues": []}',
            "data.json: queues: given twice in one object (only one is allowed)",
        ),
        (
            b'{"accounts": [{"token": "a", "token": "b"}]}',
            "data.json: accounts[0].token: given twice in one object (only one is allowed)",
        ),
        (
            b'{"accounts": [], "accounts": []}',
            "data.json: accounts: given twice in one object (only one is allowed)",
        ),
    ],
)
def test_a_key_given_twice_is_a_fault_with_its_place(raw: bytes, message: str) -> None:
    assert one(raw) == message


def test_an_integer_python_will_not_read_is_one_line_in_our_words() -> None:
    import sys

    raw = (
        b'{"queues": [{"createdAt": 1, "updatedAt": 2, "name": "q", "parallelism": 1, "lag": 1%s}]}'
        % (b"0" * 4999)
    )
    # 3.11, 3.10.7, 3.9.14 and later refuse over 4,300 digits.
    if hasattr(sys, "set_int_max_str_digits"):
        assert one(raw) == "data.json: invalid JSON: an integer of over 4,300 digits"
    else:
        assert one(raw).startswith(
            "data.json: queues[0].lag: expected an integer from 0 to 2**53 - 1, got "
        )


def test_a_value_that_keeps_its_rule_is_not_reported_beside_one_that_does_not() -> None:
    """Equal times are fine, and a duplicate is one name: only the other faults of those items."""
    assert faults({"queues": [dict(Q, createdAt=5, updatedAt=5, lag="x")]}) == [
        'data.json: queues[0].lag: expected an integer from 0 to 2**53 - 1, got "x"'
    ]
    assert faults({"queues": [Q, dict(Q, parallelism=0, lag=-1)]}) == [
        'data.json: queues[1].name: duplicate name "q" (also at queues[0].name)',
        "data.json: queues[1].lag: expected an integer from 0 to 2**53 - 1, got -1",
    ]


def test_every_fault_of_an_item_is_reported_even_with_one_missing() -> None:
    assert faults({"queues": [{"createdAt": 1, "updatedAt": 2, "name": "q", "lag": "3"}]}) == [
        "data.json: queues[0].parallelism: missing",
        'data.json: queues[0].lag: expected an integer from 0 to 2**53 - 1, got "3"',
    ]


def test_every_fault_is_reported_not_just_the_first() -> None:
    document = {
        "accounts": [
            {"token": TOKEN_A, "queues": [dict(Q, lag="1"), dict(Q, name="r", parallelism=-1)]},
            {"token": "b", "urlGroups": [dict(G, name="a b")], "queues": [{"name": "x"}]},
        ]
    }
    assert faults(document) == [
        'data.json: accounts[0].queues[0].lag: expected an integer from 0 to 2**53 - 1, got "1"',
        "data.json: accounts[0].queues[1].parallelism: expected an integer from 0 to 2**53 - 1, "
        "got -1",
        "data.json: accounts[1].urlGroups[0].name: expected only letters, digits, '-', '.' and "
        "'_', not dots alone, got \"a b\"",
        "data.json: accounts[1].queues[0].createdAt: missing",
        "data.json: accounts[1].queues[0].updatedAt: missing",
        "data.json: accounts[1].queues[0].parallelism: missing",
        "data.json: accounts[1].queues[0].lag: missing",
    ]


def test_reports_stop_at_a_cap() -> None:
    found = faults({"queues": [dict(Q, name="q%d" % i, lag=-1) for i in range(80)]})
    assert len(found) == store.MAX_PROBLEMS + 1
    assert found[-1] == "data.json: ... and 30 more"


def test_a_token_is_never_shown_in_a_fault() -> None:
    found = faults(
        {"accounts": [{"token": "sec ret"}, {"token": "x"}, {"token": "x", "queues": 1}]}
    )
    assert not any("sec ret" in line or '"x"' in line for line in found)


def test_a_good_file_becomes_dataclasses(data_path: Path) -> None:
    loaded = store.load(str(data_path), None)
    a = loaded.accounts[0]
    assert a.token_sha256 == hashlib.sha256(TOKEN_A.encode()).digest()
    assert a.url_groups["orders"] == store.UrlGroup(
        1700000000000,
        1700000500000,
        "orders",
        (
            store.Endpoint("billing", "https://billing.example.com/hook"),
            store.Endpoint(url="http://crm.example.com/hook"),
        ),
    )
    assert a.queues["emails"] == store.Queue(1700000000000, 1700000000000, "emails", 2, 0, False)
    assert json.loads(store.array(a.url_groups)) == [ALPHA_GROUP]
    assert json.loads(store.array(a.queues)) == [served(ALPHA_QUEUE)]
    assert TOKEN_A not in repr(loaded) and a.token_sha256.hex() not in repr(loaded)
    assert "token_sha256" not in repr(loaded) and repr(a.token_sha256) not in repr(loaded)
    assert loaded.summary() == "3 accounts, 1 URL group, 2 queues"


def test_one_account_form_takes_the_given_token(tmp_path: Path) -> None:
    path = write_json(tmp_path / "one.json", {"queues": [Q]})
    loaded = store.load(str(path), "t-1")
    assert loaded.find(b"t-1") is loaded.accounts[0]
    assert loaded.find(b"t-2") is None
    assert store.load(str(write_json(tmp_path / "empty.json", {})), "t").accounts[0].queues == {}
    with pytest.raises(store.TokenMissing):
        store.load(str(path), None)


def test_edge_values_that_are_fine(tmp_path: Path) -> None:
    document = {
        "urlGroups": [
            dict(G, name="a.b_c-D9", endpoints=[]),
            dict(G, name="x", endpoints=[{"url": "http://[::1]:8080/p?q=1#f", "name": "ü"}]),
        ],
        "queues": [dict(Q, createdAt=0, updatedAt=0, lag=2**53 - 1, name="a.B-9_z", paused=True)],
    }
    # With a BOM.
    loaded = store.parse(b"\xef\xbb\xbf" + json.dumps(document).encode(), "data.json", "t")
    assert loaded.accounts[0].queues["a.B-9_z"].lag == 2**53 - 1


STRINGS = [
    "q",
    "",
    'say "hi"',
    "back\\slash",
    "caf\u00e9",
    "名前",
    "\U0001f600",
    "</script>",
    "\u2028\u2029",
    "\x00\x1f\x7f",
    "tab\there",
    "/slash/",
]


def test_encode_writes_the_bytes_json_dumps_would() -> None:
    """The templates in store agree with the json module, byte for byte."""
    rng = random.Random(5)
    queues, groups, expected_queues, expected_groups = [], [], [], []
    for i in range(500):
        name = rng.choice(STRINGS) + str(i)
        numbers = [rng.choice([0, 1, 2**53 - 1, rng.randrange(2**53)]) for _ in range(4)]
        paused = rng.random() < 0.5
        queues.append(store.Queue(numbers[0], numbers[1], name, numbers[2], numbers[3], paused))
        expected_queues.append(
            served(
                {
                    "createdAt": numbers[0],
                    "updatedAt": numbers[1],
                    "name": name,
                    "parallelism": numbers[2],
                    "lag": numbers[3],
                    "paused": paused,
                }
            )
        )
        endpoints = [
            store.Endpoint(rng.choice([None, *STRINGS]), "https://e.example/" + rng.choice(STRINGS))
            for _ in range(rng.randrange(3))
        ]
        groups.append(store.UrlGroup(numbers[0], numbers[1], name, tuple(endpoints)))
        expected_groups.append(
            {
                "createdAt": numbers[0],
                "updatedAt": numbers[1],
                "name": name,
                "endpoints": [
                    {"url": e.url} if e.name is None else {"name": e.name, "url": e.url}
                    for e in endpoints
                ],
            }
        )
    for items, expected in ((queues, expected_queues), (groups, expected_groups), ([], [])):
        dumped = json.dumps(expected, ensure_ascii=False, separators=(",", ":")).encode()
        assert store.encode(items) == dumped
        assert store.array({str(i): item for i, item in enumerate(items)}) == dumped  # type: ignore[misc]


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(store.DataError) as info:
        store.load(str(tmp_path / "missing.json"), "t")
    assert info.value.problems == [
        "%s: cannot read: No such file or directory" % (tmp_path / "missing.json")
    ]


def test_deep_nesting_is_a_fault_not_a_crash() -> None:
    assert one(b"[" * 100000 + b"]" * 100000) == "data.json: invalid JSON: nested too deeply"


def test_a_parse_leaves_the_collector_as_it_found_it() -> None:
    """Code a user's process imports switches nothing process-wide (STYLE.md 23)."""
    assert gc.isenabled()
    store.parse(json.dumps({"queues": [Q]}).encode(), "data.json", "t")
    assert gc.isenabled()
    gc.disable()
    try:
        store.parse(json.dumps({"queues": [Q]}).encode(), "data.json", "t")
        assert not gc.isenabled()
    finally:
        gc.enable()


def _in_a_child(check: Callable[[], bool]) -> int:
    """Fork; the child's exit status is 0 if ``check()`` is true (a child stuck fails the test)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if check() else 1)
        finally:
            os._exit(2)  # it raised: the child never goes back to the test run
    reaped: List[int] = []

    def reap() -> bool:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            reaped.append(os.waitstatus_to_exitcode(status))
        return bool(done)

    try:
        eventually(reap)
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return reaped[0]


def test_a_forked_child_wakes_a_reloader_of_its_own(tmp_path: Path) -> None:
    """gunicorn and uWSGI fork workers from a process with an open DataFile: the child has a
    socket pair of its own from the fork on (a wake in the child never reaches the parent's
    reloader), keeps none of the parent's, and its first call starts its own reloader; the
    parent's pair stays open."""
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"queues": [Q]}))
    data = store.DataFile(str(path), "t", 3600)
    pair = (data._wake_send, data._wake_receive)
    parents = {os.fstat(end.fileno()).st_ino for end in pair if end is not None}

    def own_pair() -> bool:
        kept = set()
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                kept.add(os.fstat(int(name)).st_ino)
        data.current()
        return not kept & parents and data._thread.is_alive()

    try:
        assert _in_a_child(own_pair) == 0
        assert {os.fstat(end.fileno()).st_ino for end in pair if end is not None} == parents
    finally:
        data.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc: run it on Linux")
def test_a_data_file_nobody_holds_lets_go_of_its_file(tmp_path: Path) -> None:
    """As data.close() does: a version replaced since is not kept on disk by a descriptor."""
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"queues": [Q]}))
    file = (path.stat().st_dev, path.stat().st_ino)
    data = store.DataFile(str(path), "t", 3600)
    del data
    gc.collect()
    held = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            held.append((os.fstat(int(name)).st_dev, os.fstat(int(name)).st_ino))
    assert file not in held


def test_a_child_forked_during_a_write_keeps_no_lock_on_the_file(tmp_path: Path) -> None:
    """A process that forks while one of its threads writes (multiprocessing beside serve(), say):
    the child closes its copy of the descriptor that holds every writer's flock, so the writes
    after that one are not refused (Busy, 503) for as long as the child lives."""
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"queues": [Q]}))
    data = store.DataFile(str(path), "t", 3600, writable=True)
    digest = hashlib.sha256(b"t").digest()
    under_the_lock, go_on = threading.Event(), threading.Event()

    def held(account: store.Account, now: int) -> Tuple[store.Account, str]:
        under_the_lock.set()
        go_on.wait()
        return account, "nothing to do"

    writer = threading.Thread(target=data.update, args=(digest, held))
    writer.start()
    read, write = os.pipe()
    pid = 0
    try:
        under_the_lock.wait()
        pid = os.fork()
        if pid == 0:  # a child that lives on past the write
            os.close(write)
            os.read(read, 1)
            os._exit(0)
        go_on.set()
        writer.join()
        created = data.update(digest, lambda a, now: store.upsert_queue(a, now, "jobs", 1, None))
        assert created == "queue created"
    finally:
        go_on.set()
        os.close(write)
        os.close(read)
        if pid:
            os.waitpid(pid, 0)
        data.close()


def _mutate(rng: random.Random, document: Any) -> Any:
    """Change one value somewhere in ``document`` to something plausible or odd."""
    doc = copy.deepcopy(document)
    nodes: List[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, (dict, list)):
            nodes.append(node)
            for child in node.values() if isinstance(node, dict) else node:
                walk(child)

    walk(doc)
    node = rng.choice(nodes)
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    replacement: Any = rng.choice(
        [
            None,
            True,
            0,
            -1,
            1.5,
            2**53,
            "",
            "x y",
            "q",
            "http://a",
            [],
            {},
            "7",
            3,
            "a\nb",
            "\ud800",
        ]
    )
    if keys and rng.random() < 0.8:
        key = rng.choice(keys)
        if rng.random() < 0.2 and isinstance(node, dict):
            del node[key]
        else:
            node[key] = replacement
    elif isinstance(node, dict):
        node[rng.choice(["lag", "paralelism", "name", "url", "token", "extra"])] = replacement
    else:
        node.append(copy.deepcopy(rng.choice(node)) if node else replacement)
    return doc


def _assert_follows_the_rules(account: store.Account) -> None:
    """An independent statement of the rules, for what the loader accepted."""

    def count(value: Any) -> bool:
        return type(value) is int and 0 <= value <= 2**53 - 1

    for things in (list(account.queues.values()), list(account.url_groups.values())):
        names = [thing.name for thing in things]
        assert len(set(names)) == len(names) and all(
            type(n) is str and n and n.isprintable() for n in names
        )
        assert all(
            count(t.created_at) and count(t.updated_at) and t.created_at <= t.updated_at
            for t in things
        )
    assert all(
        count(q.parallelism) and count(q.lag) and type(q.paused) is bool
        for q in account.queues.values()
    )
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", queue.name) for queue in account.queues.values())
    for group in account.url_groups.values():
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", group.name)
        named = [e.name for e in group.endpoints if e.name is not None]
        assert len(set(named)) == len(named) and all(
            type(n) is str and n and n.isprintable() for n in named
        )
        assert all(
            type(e.url) is str and e.url.startswith(("http://", "https://"))
            for e in group.endpoints
        )


def test_random_faults_are_always_reported_and_good_files_load_exactly() -> None:
    """Random one-value mutations of good files: a fault is always reported, and a
    document that loads holds exactly the values the file has."""
    rng = random.Random(3)
    base = accounts_document()
    base["accounts"][1]["urlGroups"] = [
        dict(G, endpoints=[{"url": "http://b", "name": "n"}, {"url": "http://c"}])
    ]
    base["accounts"][1]["queues"].append(dict(Q, paused=True))
    loaded = rejected = 0
    for _ in range(3000):
        document = _mutate(rng, base)
        raw = json.dumps(document).encode()
        try:
            result = store.parse(raw, "f", None)
        except store.DataError as exc:
            assert exc.problems and all(line.startswith("f: ") for line in exc.problems)
            rejected += 1
            continue
        loaded += 1
        for account in result.accounts:
            _assert_follows_the_rules(account)
        for account, source in zip(result.accounts, document["accounts"]):
            assert json.loads(store.array(account.queues)) == [
                served(q) for q in source.get("queues", [])
            ]
            assert json.loads(store.array(account.url_groups)) == [
                served(g) for g in source.get("urlGroups", [])
            ]
    assert loaded > 100 and rejected > 1000, (loaded, rejected)


def test_an_account_is_found_by_one_lookup_whatever_their_number() -> None:
    accounts = tuple(store.Account(hashlib.sha256(b"token-%d" % i).digest()) for i in range(10000))
    found = store.Store(accounts)
    assert len(found.by_digest) == 10000  # the index, built once when first asked for

    class NoScan(tuple):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            raise AssertionError("find() walked the accounts")

    object.__setattr__(found, "accounts", NoScan(accounts))
    for i in (0, 4321, 9999):
        assert found.find(b"token-%d" % i) is accounts[i]
    for unknown in (b"token-10000", b"token-", b"", b"x" * 5000):
        assert found.find(unknown) is None


def test_an_item_is_found_by_its_name() -> None:
    loaded = store.parse(
        json.dumps({"queues": [Q, dict(Q, name="r")], "urlGroups": [G]}).encode(), "d", "t"
    )
    account = loaded.accounts[0]
    assert account.queues.get("r") is list(account.queues.values())[1]
    assert account.url_groups.get("g") is list(account.url_groups.values())[0]
    assert account.queues.get("g") is None and account.url_groups.get("q") is None


MAX = 2**53 - 1
# Each limit at its exact edge, on either side: (what to change, the value, whether it is allowed).
EDGES: List[Tuple[Tuple[str, str], Any, bool]] = [
    (("queues", field), value, ok)
    for field in ("parallelism", "lag")
    for value, ok in (
        (0, True),
        (-1, False),
        (MAX, True),
        (MAX + 1, False),
        (True, False),
        (1.0, False),
        (10**20 - 1, False),
        (10**20, False),
    )
]
EDGES += [
    (("queues", "times"), (created, updated), ok)
    for created, updated, ok in (
        (0, 0, True),
        (MAX, MAX, True),
        (MAX, MAX + 1, False),
        (5, 4, False),
        (4, 5, True),
        (-1, 0, False),
    )
]
EDGES += [
    (("urlGroups", "times"), (created, updated), ok)
    for created, updated, ok in (
        (0, 0, True),
        (MAX, MAX, True),
        (MAX + 1, MAX + 1, False),
        (5, 4, False),
    )
]
EDGES += [
    (("queues", "name"), value, ok)
    for value, ok in (
        ("a-._Z9", True),
        ("", False),
        (" ", False),
        ("a\x7f", False),
        ("\u2028", False),
        ("名", False),
        (1, False),
    )
]
EDGES += [
    (("endpoints", "name"), value, ok)
    for value, ok in (("a", True), ("", False), ("a\nb", False), ("é", True), (None, False))
]
EDGES += [
    (("urlGroups", "name"), value, ok)
    for value, ok in (
        ("a-._Z9", True),
        ("", False),
        ("a b", False),
        ("é", False),
        ("a/b", False),
        ("a\n", False),
    )
]


def _with(where: Any, value: Any) -> Any:
    """A one-account document whose first queue or URL group (or endpoint) has ``value`` at
    ``where``."""
    kind, field = where
    if kind == "endpoints":
        group = dict(G, endpoints=[{"url": "https://a.example/", "name": value}])
        return {"urlGroups": [group]}
    item = dict(Q if kind == "queues" else G)
    if field == "times":
        item.update(createdAt=value[0], updatedAt=value[1])
    else:
        item[field] = value
    return {kind: [item]}


@pytest.mark.parametrize("where, value, ok", EDGES)
def test_each_limit_at_its_edge(where: Any, value: Any, ok: bool) -> None:
    """Each rule at its edge, alone and beside a fault in another element of the same array: the
    verdict the rule gives, and the same message either way."""
    document = _with(where, value)
    kind = "queues" if where[0] == "queues" else "urlGroups"
    other = dict(Q if kind == "queues" else G, name="other", createdAt=-7)
    beside = dict(document, **{kind: document[kind] + [other]})
    found = [line for line in faults(beside) if "[1]" not in line]
    assert (found == []) == ok, found
    if ok:
        assert store.parse(json.dumps(document).encode(), "data.json", "t").accounts[0]
    else:
        assert faults(document) == found
