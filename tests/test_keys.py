"""GET /v2/keys: each account's signing keys (QStash's SigningKeys), the dev keys with the dev
token, and signing keys kept secret everywhere else: logs, faults, --check, error bodies, other
accounts."""

import json
import logging
from pathlib import Path
from typing import Any, Dict

import pytest
from helpers import (
    SIGNING_KEYS,
    TOKEN_A,
    TOKEN_B,
    accounts_document,
    bearer,
    call,
    run,
    serving,
    write_json,
)

import app as service
import store

NO_KEYS = {"error": "not found: the data file gives this account no signing keys (its signingKeys)"}


def test_an_account_gets_its_own_keys_and_no_other(app: Any) -> None:
    response = call(app, "/v2/keys", headers=bearer(TOKEN_A))
    assert (response.status, response.json()) == (200, SIGNING_KEYS)
    assert list(response.json()) == ["current", "next"]
    other = call(app, "/v2/keys", headers=bearer(TOKEN_B))  # B has none: A's are not B's
    assert (other.status, other.json()) == (404, NO_KEYS)
    assert SIGNING_KEYS["current"].encode() not in other.body


@pytest.mark.parametrize(
    "path, method, headers, status",
    [
        ("/v2/keys/", "GET", bearer(TOKEN_A), 200),
        ("/v2/keys", "HEAD", bearer(TOKEN_A), 200),
        ("/v2/keys", "GET", {}, 401),
        ("/v2/keys", "GET", {"Authorization": "Bearer wrong"}, 401),
        ("/v2/keys", "POST", bearer(TOKEN_A), 405),
        ("/v2/keys", "DELETE", bearer(TOKEN_A), 405),
        (
            "/v2/keys/rotate",
            "POST",
            bearer(TOKEN_A),
            404,
        ),  # a write one segment below: no such path here
        ("/v2/keys/current", "GET", bearer(TOKEN_A), 404),  # an object has no items
    ],
)
def test_the_same_http_quality_as_the_lists(
    app: Any, path: str, method: str, headers: Any, status: int
) -> None:
    response = call(app, path, method=method, headers=headers)
    assert response.status == status
    assert response.headers["Content-Type"] == "application/json"
    if status == 405:
        assert response.headers["Allow"] == "GET, HEAD"
        assert response.json()["error"] == "method not allowed: this path answers GET, HEAD"
    if status == 404:
        assert response.json()["error"] == service.NotFound.message
    if method == "HEAD":
        assert response.body == b"" and int(response.headers["Content-Length"]) > 0


def test_etag_and_304(app: Any) -> None:
    etag = call(app, "/v2/keys", headers=bearer(TOKEN_A)).headers["ETag"]
    again = call(app, "/v2/keys", headers=dict(bearer(TOKEN_A), **{"If-None-Match": etag}))
    assert (again.status, again.body) == (304, b"")
    assert call(app, "/v2/keys", headers={"If-None-Match": etag}).status == 401


def test_the_dev_token_serves_the_dev_keys_unless_the_file_sets_its_own(tmp_path: Path) -> None:
    one = write_json(tmp_path / "one.json", {"queues": []})
    app = service.create_app(
        service.open_data(str(one), None, fallback=service.DEV_TOKEN), access_log=False
    )
    current, following = service.DEV_SIGNING_KEYS
    assert call(app, "/v2/keys", headers=bearer(service.DEV_TOKEN)).json() == {
        "current": current,
        "next": following,
    }
    own = write_json(tmp_path / "own.json", {"queues": [], "signingKeys": SIGNING_KEYS})
    app = service.create_app(
        service.open_data(str(own), None, fallback=service.DEV_TOKEN), access_log=False
    )
    assert call(app, "/v2/keys", headers=bearer(service.DEV_TOKEN)).json() == SIGNING_KEYS
    # QSTASH_TOKEN set.
    configured = service.create_app(service.open_data(str(one), "t"), access_log=False)
    assert call(configured, "/v2/keys", headers=bearer("t")).status == 404


SECRET_KEY = "sig_SECRETSECRETSECRET"


@pytest.mark.parametrize(
    "keys, fault",
    [
        ({"current": SECRET_KEY}, "accounts[0].signingKeys.next: missing"),
        (
            {"current": SECRET_KEY, "next": ""},
            "accounts[0].signingKeys.next: expected a non-empty printable string",
        ),
        (
            {"current": SECRET_KEY, "next": SECRET_KEY + "\n"},
            "accounts[0].signingKeys.next: expected a non-empty printable string",
        ),
        (
            {"current": SECRET_KEY, "next": 7},
            "accounts[0].signingKeys.next: expected a non-empty printable string",
        ),
        (
            {"current": SECRET_KEY, "next": "n", "extra": 1},
            "accounts[0].signingKeys.extra: unknown key (expected 'current', 'next')",
        ),
        (SECRET_KEY, "accounts[0].signingKeys: expected an object with 'current' and 'next'"),
    ],
)
def test_a_bad_signingkeys_is_reported_without_its_values(
    tmp_path: Path, keys: Any, fault: str
) -> None:
    path = write_json(tmp_path / "d.json", {"accounts": [{"token": TOKEN_A, "signingKeys": keys}]})
    code, out, err = run(["--check", "--data", str(path)])
    assert (code, out, err) == (2, "", "%s: %s\n" % (path, fault))


def test_keys_appear_in_no_log_repr_or_summary(tmp_path: Path, caplog: Any) -> None:
    document = accounts_document()
    document["accounts"][0]["signingKeys"] = {"current": SECRET_KEY, "next": SECRET_KEY + "2"}
    path = write_json(tmp_path / "d.json", document)
    data = service.open_data(str(path), None)
    app = service.create_app(data)
    with caplog.at_level(logging.INFO, "qstash_lists"):
        call(app, "/v2/keys", headers=bearer(TOKEN_A))
        call(app, "/v2/keys", headers=bearer(TOKEN_B))
    loaded = data.current()
    assert loaded is not None
    shown = caplog.text + repr(loaded) + loaded.summary()
    assert SECRET_KEY not in shown
    assert run(["--check", "--data", str(path)])[1:] == (
        "%s: OK: 3 accounts, 1 URL group, 2 queues\n" % path,
        "",
    )


def test_the_banner_prints_the_dev_keys_only_when_it_serves_them(tmp_path: Path) -> None:
    with serving(write_json(tmp_path / "one.json", {"queues": []})) as server:
        assert server.whole_banner()[4:6] == [
            "export QSTASH_CURRENT_SIGNING_KEY=%s\n" % service.DEV_SIGNING_KEYS[0],
            "export QSTASH_NEXT_SIGNING_KEY=%s\n" % service.DEV_SIGNING_KEYS[1],
        ]
        server.stop()
    own = write_json(
        tmp_path / "own.json", {"queues": [], "signingKeys": {"current": SECRET_KEY, "next": "n"}}
    )
    with serving(own) as server:
        _, out, err = server.stop()
    assert SECRET_KEY not in "".join(server.banner) + out + err


def test_store_keeps_the_keys_in_the_account() -> None:
    loaded = store.parse(json.dumps({"queues": [], "signingKeys": SIGNING_KEYS}).encode(), "d", "t")
    assert loaded.accounts[0].signing_keys == (SIGNING_KEYS["current"], SIGNING_KEYS["next"])
    assert SIGNING_KEYS["current"] not in repr(loaded)


def test_the_keys_are_compact_json(app: Any) -> None:
    compact = json.dumps(SIGNING_KEYS, separators=(",", ":")).encode()
    assert call(app, "/v2/keys", headers=bearer(TOKEN_A)).body == compact


def test_signing_keys_are_stored_by_no_cache(app: Any) -> None:
    response = call(app, "/v2/keys", headers=bearer(TOKEN_A))
    assert response.headers["Cache-Control"] == "no-store"
    assert (
        call(app, "/v2/queues", headers=bearer(TOKEN_A)).headers["Cache-Control"]
        == "private, no-cache"
    )


@pytest.mark.parametrize("given", ["token", "tokenSha256"])
def test_the_dev_tokens_account_is_answered_the_dev_keys_in_a_file_of_accounts(
    tmp_path: Path, given: str
) -> None:
    """The JS SDK's dev mode checks GET /v2/keys with the dev token: any account of the dev token
    (given plainly or by digest) is answered the published dev keys, unless the file gives it its
    own."""
    import hashlib

    value = (
        service.DEV_TOKEN
        if given == "token"
        else hashlib.sha256(service.DEV_TOKEN.encode()).hexdigest()
    )
    document: Dict[str, Any] = {"accounts": [{"token": TOKEN_A}, {given: value}]}
    app = service.create_app(
        service.open_data(str(write_json(tmp_path / "d.json", document)), None), access_log=False
    )
    current, following = service.DEV_SIGNING_KEYS
    assert call(app, "/v2/keys", headers=bearer(service.DEV_TOKEN)).json() == {
        "current": current,
        "next": following,
    }
    assert call(app, "/v2/keys", headers=bearer(TOKEN_A)).status == 404
    document["accounts"][1]["signingKeys"] = SIGNING_KEYS
    app = service.create_app(
        service.open_data(str(write_json(tmp_path / "d.json", document)), None), access_log=False
    )
    assert call(app, "/v2/keys", headers=bearer(service.DEV_TOKEN)).json() == SIGNING_KEYS
