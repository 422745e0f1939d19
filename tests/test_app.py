"""The HTTP contract, through the WSGI callable (no socket)."""

import hashlib
import json
import logging
import re
from typing import Any

import pytest
from helpers import (
    ALPHA_GROUP,
    ALPHA_QUEUE,
    BETA_QUEUE,
    QUEUE_KEYS,
    TOKEN_A,
    TOKEN_B,
    TOKEN_C,
    bearer,
    call,
    served,
    write_json,
)

import app as service

UNAUTHORIZED = {
    "error": "unauthorized: send your QStash token as 'Authorization: Bearer <token>' "
    "or as the qstash_token query parameter"
}


def test_lists_url_groups_in_api_shape(app: Any) -> None:
    response = call(app, "/v2/topics", headers=bearer(TOKEN_A))
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Content-Length"] == str(len(response.body))
    assert response.json() == [ALPHA_GROUP]
    group = response.json()[0]
    assert list(group) == ["createdAt", "updatedAt", "name", "endpoints"]
    assert group["endpoints"] == [
        {"name": "billing", "url": "https://billing.example.com/hook"},
        {"url": "http://crm.example.com/hook"},  # no name: no "name" key, not null
    ]


def test_lists_queues_with_paused_always_present(app: Any) -> None:
    assert call(app, "/v2/queues", headers=bearer(TOKEN_A)).json() == [served(ALPHA_QUEUE)]
    queues = call(app, "/v2/queues", headers=bearer(TOKEN_B)).json()
    assert queues == [served(BETA_QUEUE)]
    assert ", ".join("'%s'" % key for key in queues[0]) == QUEUE_KEYS  # in QStash's order


@pytest.mark.parametrize("path", ["/v2/topics", "/v2/queues"])
def test_an_account_with_none_gets_an_empty_array(app: Any, path: str) -> None:
    response = call(app, path, headers=bearer(TOKEN_C))
    assert (response.status, response.body) == (200, b"[]")


def test_accounts_see_only_their_own_data(app: Any) -> None:
    a = call(app, "/v2/queues", headers=bearer(TOKEN_A)).json()
    b = call(app, "/v2/queues", headers=bearer(TOKEN_B)).json()
    assert [q["name"] for q in a] == ["emails"]
    assert [q["name"] for q in b] == ["reports"]
    assert call(app, "/v2/topics", headers=bearer(TOKEN_B)).json() == []


def test_arrays_keep_the_order_of_the_file(tmp_path: Any) -> None:
    queues = [dict(ALPHA_QUEUE, name=name) for name in ["zeta", "alpha", "mu"]]
    path = write_json(tmp_path / "d.json", {"accounts": [{"token": TOKEN_A, "queues": queues}]})
    app = service.create_app(service.open_data(str(path), None), access_log=False)
    names = [q["name"] for q in call(app, headers=bearer(TOKEN_A)).json()]
    assert names == ["zeta", "alpha", "mu"]


@pytest.mark.parametrize(
    "path, query",
    [
        ("/v2/topics/", ""),
        ("/v2/queues/", ""),
        ("/v2/queues", "limit=10&cursor=abc&flag"),
    ],
)
def test_trailing_slash_and_unknown_parameters_change_nothing(
    app: Any, path: str, query: str
) -> None:
    plain = call(app, path.rstrip("/"), headers=bearer(TOKEN_A))
    response = call(app, path, query=query, headers=bearer(TOKEN_A))
    assert (response.status, response.body) == (200, plain.body)


@pytest.mark.parametrize("path", ["/v2/topics", "/v2/queues"])
def test_head_is_get_without_the_body(app: Any, path: str) -> None:
    get = call(app, path, headers=bearer(TOKEN_A))
    head = call(app, path, method="HEAD", headers=bearer(TOKEN_A))
    assert (head.status, head.headers, head.body) == (get.status, get.headers, b"")


@pytest.mark.parametrize(
    "path, headers, status",
    [
        ("/v2/queues", {}, 401),
        ("/v2/queues", {"Authorization": "Bearer wrong"}, 401),
        ("/nowhere", bearer(TOKEN_A), 404),
    ],
)
def test_head_on_an_error_has_the_headers_and_no_body(
    app: Any, path: str, headers: Any, status: int
) -> None:
    get = call(app, path, headers=headers)
    head = call(app, path, method="HEAD", headers=headers)
    assert (head.status, head.headers, head.body) == (status, get.headers, b"")
    assert int(head.headers["Content-Length"]) == len(get.body) > 0


# What counts as a credential: the whole rule set in one table.
# A request may send its token in the Authorization header (scheme "Bearer", any case),
# in the qstash_token query parameter, or both; every one sent must be well formed,
# all must agree, and the token must belong to an account.
AUTH_CASES = [
    # headers, query, expected status, challenge carries error="invalid_token"
    ({"Authorization": "Bearer token-a"}, "", 200, None),
    ({"Authorization": "bearer token-a"}, "", 200, None),
    ({"Authorization": "BEARER token-a"}, "", 200, None),
    ({"Authorization": "Bearer   token-a"}, "", 200, None),  # RFC 7235: 1*SP
    ({"Authorization": " Bearer token-a "}, "", 200, None),  # surrounding OWS
    ({}, "qstash_token=token-a", 200, None),
    ({}, "qstash_token=token%2Da", 200, None),  # a percent-encoded value
    (
        {},
        "qstash%5Ftoken=token-a",
        401,
        False,
    ),  # the name as written: an escaped one is another name
    ({"Authorization": "Bearer token-a"}, "qstash_token=token-a", 200, None),  # agree
    ({}, "qstash_token=token-a&qstash_token=token-a", 200, None),  # repeated, agree
    ({"Authorization": "Bearer token-c"}, "", 200, None),  # account known by digest
    ({}, "", 401, False),  # nothing
    ({}, "other=token-a", 401, False),
    ({"Authorization": ""}, "", 401, True),
    ({"Authorization": "Bearer"}, "", 401, True),
    ({"Authorization": "Bearer "}, "", 401, True),
    ({"Authorization": "Basic dG9rZW4tYTo="}, "", 401, True),
    ({"Authorization": "Basic token-a"}, "", 401, True),  # an account's token, under another scheme
    ({"Authorization": "Token token-a"}, "", 401, True),
    ({"Authorization": "token-a token-a"}, "", 401, True),
    ({"Authorization": "Bearertoken-a"}, "", 401, True),
    (
        {},
        "qstash_token=token-a%0A",
        401,
        True,
    ),  # a line break is no part of a token, nor to be stripped
    ({"Authorization": "Bearer token-a\x0c"}, "x=1", 401, True),
    (
        {"Authorization": "Bearer token-a\u0100"},
        "",
        401,
        True,
    ),  # not latin-1: a server breaking PEP 3333
    (
        {},
        "qstash_token=token-a&" + "".join("%%%02X" % c for c in b"qstash_token") + "=token-b",
        200,
        None,
    ),
    ({"Authorization": "token-a"}, "", 401, True),
    ({"Authorization": "Bearer token-a junk"}, "", 401, True),
    ({"Authorization": "Bearer token-a\tjunk"}, "", 401, True),
    ({"Authorization": "Bearer token-"}, "", 401, True),  # a prefix
    ({"Authorization": "Bearer token-ab"}, "", 401, True),  # a suffix added
    ({"Authorization": "Bearer TOKEN-A"}, "", 401, True),  # tokens are case-sensitive
    ({"Authorization": "Bearer unknown"}, "", 401, True),
    ({"Authorization": "Bearer " + hashlib.sha256(b"token-c").hexdigest()}, "", 401, True),
    ({}, "qstash_token=", 401, True),
    ({}, "qstash_token", 401, True),
    ({}, "qstash_token=token-a&qstash_token=token-b", 401, True),  # disagree
    ({"Authorization": "Bearer token-a"}, "qstash_token=token-b", 401, True),  # disagree
    ({"Authorization": "Basic x"}, "qstash_token=token-a", 401, True),  # one is malformed
    # Many fields: cut at each qstash_token, each spelling decoded once
    ({}, "&".join(["qstash_token=token-a"] * 500), 200, None),
    ({}, "&".join(["x=%d" % i for i in range(500)] + ["qstash_token=token-a"]), 200, None),
    ({}, "qstash_token=token-a&" + "&".join(["x=y"] * 500) + "&qstash_token=token-b", 401, True),
    ({}, "&".join(["qstash_token=x"] * 500), 401, True),
    (
        {},
        "&".join(
            [
                "qstash_token="
                + "".join(
                    "%%%02X" % b if i & (1 << n) else chr(b) for n, b in enumerate(b"token-a")
                )
                for i in range(17)
            ]
        ),
        401,
        True,
    ),  # 17 spellings of one token: too many to read
    (
        {},
        "&".join(
            [
                "qstash_token="
                + "".join(
                    "%%%02X" % b if i & (1 << n) else chr(b) for n, b in enumerate(b"token-a")
                )
                for i in range(16)
            ]
        ),
        200,
        None,
    ),  # 16 are read
    ({}, "qstash_tokens=token-a&qstash_token_=token-a", 401, False),  # other names
]


@pytest.mark.parametrize("headers, query, status, invalid_token", AUTH_CASES)
def test_credentials(app: Any, headers: Any, query: str, status: int, invalid_token: Any) -> None:
    response = call(app, "/v2/queues", query=query, headers=headers)
    assert response.status == status
    if status == 200:
        return
    assert response.json() == UNAUTHORIZED
    expected = 'Bearer realm="qstash"' + (', error="invalid_token"' if invalid_token else "")
    assert response.headers["WWW-Authenticate"] == expected


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
@pytest.mark.parametrize(
    "path",
    ["/v2/topics", "/v2/queues/", "/v2/topics/orders", "/v2/queues/emails", "/v2/queues/nowhere"],
)
def test_other_methods_get_405_with_allow(app: Any, method: str, path: str) -> None:
    response = call(app, path, method=method, headers=bearer(TOKEN_A))
    assert response.status == 405
    assert response.headers["Allow"] == "GET, HEAD"
    route = (
        path.rstrip("/")
        .replace("/emails", "/{name}")
        .replace("/nowhere", "/{name}")
        .replace("/orders", "/{name}")
    )
    takes = service.METHODS[route]
    other = "method not allowed: this path answers %s, HEAD" % ", ".join(takes) + (
        " (%s: writes, taken once the server is started with --writable, or "
        "QSTASH_LISTS_WRITABLE=1)" % ", ".join(m for m in takes if m != "GET")
        if len(takes) > 1
        else ""
    )
    assert response.json() == {"error": READ_ONLY if method in takes else other}


READ_ONLY = (
    "method not allowed: this server is read-only; start it with --writable (or "
    "QSTASH_LISTS_WRITABLE=1) to take QStash's writes of URL groups and queues"
)


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
@pytest.mark.parametrize(
    "path", ["/v2/topics/orders/endpoints", "/v2/queues/emails/pause", "/v2/queues/x/resume"]
)
def test_paths_only_for_writes_say_what_they_take_and_how_to_turn_writes_on(
    app: Any, method: str, path: str
) -> None:
    """A write to a read-only server says how to take writes; another method names what the path
    takes (QStash's)."""
    response = call(app, path, method=method, headers=bearer(TOKEN_A))
    takes = service.METHODS[
        path.replace("/emails", "/{name}").replace("/x/", "/{name}/").replace("/orders", "/{name}")
    ]
    other = (
        "method not allowed: this path answers %s (%s: writes, taken once the server is started "
        "with "
        "--writable, or QSTASH_LISTS_WRITABLE=1)" % ((", ".join(takes),) * 2)
    )
    assert (response.status, response.headers["Allow"]) == (405, "")
    assert response.json() == {"error": READ_ONLY if method in takes else other}


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "",
        "/v2",
        "/v2/",
        "/v2/topic",
        "/v2/topicsx",
        "/v2/topics//",
        "//v2/topics",
        "/v2/topics/orders/endpoint",
        "/v2/queues/emails/pause/x",
        "/v2/queues//emails",
        "/v1/queues",
        "/V2/QUEUES",
        "/v2/./queues",
        "/v2/messages",
        "/v2/messages/abc",
    ],
)
def test_other_paths_get_404(app: Any, path: str) -> None:
    response = call(app, path, headers=bearer(TOKEN_A))
    assert response.status == 404
    assert response.json() == {"error": service.NotFound.message}


def test_every_response_is_json_with_exact_length_and_nosniff(app: Any) -> None:
    for path, method, headers in [
        ("/v2/queues", "GET", bearer(TOKEN_A)),
        ("/v2/queues", "GET", {}),
        ("/v2/queues", "POST", {}),
        ("/nowhere", "GET", {}),
    ]:
        response = call(app, path, method=method, headers=headers)
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["Content-Length"] == str(len(response.body))
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        # One account's answer is private; an error is kept by no cache (RFC 9111, 5.2.2).
        assert response.headers["Cache-Control"] == (
            "private, no-cache" if response.status == 200 else "no-store"
        )


def test_mounted_under_a_prefix(app: Any) -> None:
    response = call(app, "/v2/queues", SCRIPT_NAME="/qstash", headers=bearer(TOKEN_A))
    assert response.json() == [served(ALPHA_QUEUE)]
    assert call(app, "/qstash/v2/queues", headers=bearer(TOKEN_A)).status == 404


class Broken:
    writable = False

    def current(self, token: Any = None) -> Any:
        raise RuntimeError("secret detail")


def test_an_exception_becomes_a_generic_500(caplog: Any) -> None:
    app = service.create_app(Broken(), access_log=False)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        response = call(app, "/v2/queues", headers=bearer(TOKEN_A))
    assert response.status == 500
    assert response.json() == {"error": "internal server error; the server log has the details"}
    assert b"secret detail" not in response.body
    assert "RuntimeError: secret detail" in caplog.text  # the traceback is in the log


SECRET = "eyJVc2VySUQiOiJzM2NyM3QifQ"  # what a user's typo puts in a query


@pytest.mark.parametrize(
    "query, logged",
    [
        ("qstash_token=token-a&x=1", "qstash_token=[redacted]&x=[redacted]"),
        ("qstash%5Ftoken=token-a", "qstash%5Ftoken=[redacted]"),
        ("token=%s" % SECRET, "token=[redacted]"),
        ("QSTASH_TOKEN=%s" % SECRET, "QSTASH_TOKEN=[redacted]"),
        ("access_token=%s&limit=10" % SECRET, "access_token=[redacted]&limit=[redacted]"),
        ("Authorization=Bearer+%s" % SECRET, "Authorization=[redacted]"),
        ("Authorization: Bearer %s" % SECRET, "[redacted]"),  # no "=": all of it may be the secret
        (SECRET, "[redacted]"),
        ("%s=1" % SECRET, "[redacted]"),  # a name that is no parameter name
        (
            "a=1&" * 20 + "b=2",
            "&".join(["a=[redacted]"] * 8) + "&[13 more]",
        ),  # a long query is cut short
    ],
)
def test_the_access_log_shows_no_query_value(
    data_path: Any, caplog: Any, query: str, logged: str
) -> None:
    app = service.create_app(service.open_data(str(data_path), None))
    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        call(app, "/v2/queues", query=query, REMOTE_ADDR="10.0.0.9")
    [line] = [record.getMessage() for record in caplog.records]
    match = re.fullmatch(r'10\.0\.0\.9 "GET /v2/queues\?(.*)" (\d+) \d+ [\d.]+ms( \(.*\))?', line)
    assert match and match.group(1) == logged
    assert SECRET not in line and SECRET[:10] not in line and TOKEN_A not in line


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.5.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.2", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert service.is_loopback(host) is loopback


def test_the_access_log_is_one_printable_line(data_path: Any, caplog: Any) -> None:
    app = service.create_app(service.open_data(str(data_path), None))
    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        call(app, "/v2/%0a\x1bqueues", method="HEAD", headers=bearer(TOKEN_A))
    assert '- "HEAD /v2/%250a%1Bqueues" 404 0 ' in caplog.records[0].getMessage()


def test_a_quiet_app_logs_nothing(app: Any, caplog: Any) -> None:
    with caplog.at_level(logging.INFO):
        call(app, "/v2/queues", headers=bearer(TOKEN_A))
    assert caplog.records == []


@pytest.fixture
def big_app(tmp_path: Any) -> Any:
    """Account A has 2,000 queues (a body of about 220 KB); account B has one."""
    queues = [dict(ALPHA_QUEUE, name="q%d" % i) for i in range(2000)]
    document = {
        "accounts": [
            {"token": TOKEN_A, "queues": queues},
            {"token": TOKEN_B, "queues": [BETA_QUEUE]},
        ]
    }
    path = write_json(tmp_path / "big.json", document)
    return service.create_app(service.open_data(str(path), None), access_log=False)


def test_etag_and_cache_control(app: Any) -> None:
    response = call(app, headers=bearer(TOKEN_A))
    etag = response.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10  # strong
    assert response.headers["Cache-Control"] == "private, no-cache"
    assert call(app, headers=bearer(TOKEN_A)).headers["ETag"] == etag  # stable
    assert call(app, headers=bearer(TOKEN_B)).headers["ETag"] != etag  # per body


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("template", ["{}", "W/{}", '"other", {}', '{} ,"x"', "*"])
def test_if_none_match_gives_304_without_a_body(app: Any, method: str, template: str) -> None:
    etag = call(app, headers=bearer(TOKEN_A)).headers["ETag"]
    headers = dict(bearer(TOKEN_A), **{"If-None-Match": template.format(etag)})
    response = call(app, method=method, headers=headers)
    assert (response.status, response.body) == (304, b"")
    assert response.headers["ETag"] == etag
    assert response.headers["Cache-Control"] == "private, no-cache"
    assert "Content-Type" not in response.headers and "Content-Length" not in response.headers


@pytest.mark.parametrize("value", ['"nope"', "", "W/", '"'])
def test_a_stale_etag_gets_the_body(app: Any, value: str) -> None:
    response = call(app, headers=dict(bearer(TOKEN_A), **{"If-None-Match": value}))
    assert response.status == 200 and response.json() == [served(ALPHA_QUEUE)]


def test_if_none_match_does_not_skip_auth(app: Any) -> None:
    etag = call(app, headers=bearer(TOKEN_A)).headers["ETag"]
    assert call(app, headers=dict(bearer(TOKEN_B), **{"If-None-Match": etag})).status == 200
    assert call(app, headers={"If-None-Match": etag}).status == 401


def test_a_client_that_accepts_gzip_gets_the_body_as_it_is(big_app: Any) -> None:
    """No compression (docs/http.md): loopback gains nothing; nginx compresses in front."""
    plain = call(big_app, headers=bearer(TOKEN_A))
    response = call(big_app, headers=dict(bearer(TOKEN_A), **{"Accept-Encoding": "gzip"}))
    assert "Content-Encoding" not in response.headers and "Vary" not in response.headers
    assert response.body == plain.body and response.headers["ETag"] == plain.headers["ETag"]


def test_bodies_go_through_waitress_file_wrapper_by_reference(big_app: Any) -> None:
    from wsgiref.util import FileWrapper

    used = []

    def wrapper(file: Any, block_size: int = 8192) -> Any:
        # A BytesIO that shares the snapshot's bytes owns no copy of them.
        used.append(file.__sizeof__())
        return FileWrapper(file, block_size)

    wrapper.__module__ = (
        "waitress.buffers"  # where waitress's own is: one that keeps a body by reference
    )

    big = call(big_app, headers=bearer(TOKEN_A), **{"wsgi.file_wrapper": wrapper})  # type: ignore[arg-type]
    assert len(used) == 1 and len(big.json()) == 2000
    small = call(big_app, headers=bearer(TOKEN_B), **{"wsgi.file_wrapper": wrapper})  # type: ignore[arg-type]
    assert len(used) == 2 and small.json() == [served(BETA_QUEUE)]  # whatever the size
    assert used[0] < 1000 < len(big.body)
    head = call(big_app, method="HEAD", headers=bearer(TOKEN_A), **{"wsgi.file_wrapper": wrapper})  # type: ignore
    assert len(used) == 2 and head.body == b""  # no body, no wrapper


class _Other:
    """Another server's file wrapper, which reads a file back in small blocks (uWSGI's has no
    module)."""

    def __init__(self, module: Any) -> None:
        self.__module__ = module
        self.used = 0

    def __call__(self, file: Any, block_size: int = 8192) -> Any:
        self.used += 1
        raise AssertionError("the body went through another server's file wrapper")


@pytest.mark.parametrize("module", [None, "gunicorn.http.wsgi", "wsgiref.util", "waitressx"])
def test_other_servers_get_the_body_whole_in_one_piece(big_app: Any, module: Any) -> None:
    """uWSGI reads a wrapped BytesIO back 4 KB at a time, gunicorn 8 KB, a write each: one write
    instead."""
    from wsgiref.util import setup_testing_defaults

    other = _Other(module)
    environ = {
        "PATH_INFO": "/v2/queues",
        "HTTP_AUTHORIZATION": "Bearer " + TOKEN_A,
        "wsgi.file_wrapper": other,
    }
    setup_testing_defaults(environ)
    # The iterable itself, unwrapped.
    body = big_app(environ, lambda status, headers, exc_info=None: None)
    assert (
        type(body) is list
        and len(body) == 1
        and len(json.loads(body[0])) == 2000
        and other.used == 0
    )


@pytest.mark.parametrize(
    "headers, query, why",
    [
        ({}, "", "no credential"),
        ({}, "limit=1", "no credential"),
        ({"Authorization": "Basic token-a"}, "", "not a Bearer header"),
        ({"Authorization": ""}, "", "not a Bearer header"),
        ({"Authorization": "Bearer"}, "", "malformed"),
        ({"Authorization": "Bearer token-a junk"}, "", "malformed"),
        ({}, "qstash_token=", "malformed"),
        ({"Authorization": "Bearer token-a"}, "qstash_token=", "malformed"),
        ({}, "&".join(["qstash_token=x%d" % i for i in range(17)]), "malformed"),
        ({"Authorization": "Bearer token-a"}, "qstash_token=token-b", "tokens disagree"),
        ({"Authorization": "Bearer nobody"}, "", "unknown token"),
        ({}, "qstash_token=nobody", "unknown token"),
    ],
)
def test_the_log_says_why_a_request_got_401_and_the_client_does_not(
    data_path: Any, caplog: Any, headers: Any, query: str, why: str
) -> None:
    app = service.create_app(service.open_data(str(data_path), None))
    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        response = call(app, "/v2/queues", query=query, headers=headers)
    assert (response.status, response.json()) == (401, UNAUTHORIZED)
    line = caplog.records[0].getMessage()
    assert line.endswith("ms (%s)" % why)
    assert "token-a" not in line and "nobody" not in line


def test_the_log_says_which_item_is_missing_and_nothing_for_a_200(
    data_path: Any, caplog: Any
) -> None:
    app = service.create_app(service.open_data(str(data_path), None))
    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        call(app, "/v2/queues/nothere", headers=bearer(TOKEN_A))
        call(app, "/v2/topics/nothere", headers=bearer(TOKEN_A))
        call(app, "/v2/queues/emails", headers=bearer(TOKEN_A))
    assert [r.getMessage().rpartition("ms")[2] for r in caplog.records] == [
        " (no such queue)",
        " (no such URL group)",
        "",
    ]


def test_the_log_shows_the_path_printable_and_one_line(data_path: Any, caplog: Any) -> None:
    app = service.create_app(service.open_data(str(data_path), None))
    with caplog.at_level(logging.INFO, "qstash_lists.access"):
        call(app, "/v2/queues/a/b", query="qstash_token=x")
        call(app, "/v2/queues/100%")
        call(app, "/v2/queues/\x1b[31m\n")
    assert [r.getMessage().split('"')[1] for r in caplog.records] == [
        "GET /v2/queues/a/b?qstash_token=[redacted]",
        "GET /v2/queues/100%25",
        "GET /v2/queues/%1B[31m%0A",
    ]


# A token with "+" and "%" in it: the query decodes "+" to a space and escapes once; a header
# decodes nothing.
@pytest.mark.parametrize(
    "headers, query, status",
    [
        ({}, "qstash_token=p%2Bq%2541", 200),
        ({}, "qstash_token=p+q%2541", 401),  # "p q%41"
        ({}, "qstash_token=p%2Bq%41", 401),  # "p+qA"
        ({}, "qstash_token=p%2Bq%252541", 401),  # decoded twice would be right: once is the rule
        ({"Authorization": "Bearer p+q%41"}, "", 200),
        ({"Authorization": "Bearer p%2Bq%2541"}, "", 401),
    ],
)
def test_query_tokens_decode_like_forms_and_headers_not_at_all(
    tmp_path: Any, headers: Any, query: str, status: int
) -> None:
    path = write_json(
        tmp_path / "d.json", {"accounts": [{"token": "p+q%41", "queues": [ALPHA_QUEUE]}]}
    )
    app = service.create_app(service.open_data(str(path), None), access_log=False)
    assert call(app, query=query, headers=headers).status == status


def test_an_edit_that_keeps_the_length_gets_a_new_etag(tmp_path: Any) -> None:
    path = write_json(
        tmp_path / "d.json", {"accounts": [{"token": TOKEN_A, "queues": [ALPHA_QUEUE]}]}
    )
    data = service.open_data(str(path), None, interval=3600)
    app = service.create_app(data, access_log=False)
    before = call(app, "/v2/queues/emails", headers=bearer(TOKEN_A))
    listed = call(app, headers=bearer(TOKEN_A))
    # 0 -> 5.
    write_json(path, {"accounts": [{"token": TOKEN_A, "queues": [dict(ALPHA_QUEUE, lag=5)]}]})
    assert data.refresh() is True
    for path_info, old in (("/v2/queues/emails", before), ("/v2/queues", listed)):
        after = call(
            app, path_info, headers=dict(bearer(TOKEN_A), **{"If-None-Match": old.headers["ETag"]})
        )
        assert after.status == 200 and len(after.body) == len(old.body) and after.body != old.body
        assert after.headers["ETag"] != old.headers["ETag"]


def test_the_command_lines_access_log_writes_the_same_lines_and_all_of_them_at_close(
    data_path: Any, caplog: Any
) -> None:
    import io
    import time

    stream = io.StringIO()
    queued = service.QueueLog(stream)
    access = logging.getLogger("qstash_lists.access")
    access.addHandler(queued)
    try:
        app = service.create_app(service.open_data(str(data_path), None))
        with caplog.at_level(logging.INFO, "qstash_lists.access"):
            for _ in range(100):
                call(
                    app,
                    "/v2/queues/nothere",
                    query="x=1",
                    headers=bearer(TOKEN_A),
                    REMOTE_ADDR="10.0.0.9",
                )
    finally:
        access.removeHandler(queued)
    queued.close()  # at once: every line taken is written first
    lines = stream.getvalue().splitlines()
    assert len(lines) == 100 and len(caplog.records) == 100
    logged = caplog.records[0].getMessage()
    assert re.sub(r"[\d.]+ms", "ms", lines[0]).split(" ", 1)[1] == re.sub(r"[\d.]+ms", "ms", logged)
    assert logged.startswith('10.0.0.9 "GET /v2/queues/nothere?x=[redacted]" 404 ')
    stamp = lines[0].split(" ", 1)[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
    assert stamp[:4] == time.strftime("%Y", time.gmtime())
