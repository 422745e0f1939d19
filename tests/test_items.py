"""One URL group or queue by name: GET /v2/topics/{urlGroupName} and GET /v2/queues/{queueName}."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional
from urllib.parse import unquote_to_bytes

import pytest
from helpers import (
    ALPHA_GROUP,
    ALPHA_QUEUE,
    BETA_QUEUE,
    TOKEN_A,
    TOKEN_B,
    accounts_document,
    bearer,
    call,
    served,
    write_json,
)

import app as service
from store import DataFile

NOT_FOUND = {"error": service.NotFound.message}
ODD_NAMES = ["my-queue", "a.b", "x_y", "Q.1-_"]  # every character QStash's rule allows
BIG_GROUP = dict(
    ALPHA_GROUP,
    name="big",
    endpoints=[{"url": "https://h%d.example.com/hook" % i} for i in range(60)],
)
BAD_NAME = {
    "error": "bad request: a queue's name has only letters, digits, '-', '.' and "
    "'_', not dots alone"
}
NOT_UTF8 = {"error": "bad request: a name in the path is not UTF-8"}


@pytest.fixture
def data(tmp_path: Path) -> DataFile:
    document = accounts_document()
    account = document["accounts"][0]
    account["queues"] += [dict(ALPHA_QUEUE, name=name) for name in ODD_NAMES]
    account["urlGroups"].append(BIG_GROUP)
    return service.open_data(str(write_json(tmp_path / "data.json", document)), None)


@pytest.fixture
def app(data: DataFile) -> Any:
    return service.create_app(data, access_log=False)


def utf8(text: str) -> str:
    """The PEP 3333 form of a decoded path: its UTF-8 bytes as latin-1 characters."""
    return text.encode().decode("latin-1")


def no_such(noun: str, name: str) -> Dict[str, str]:
    return {"error": "not found: no %s named %s" % (noun, json.dumps(name, ensure_ascii=False))}


# PATH_INFO (as the server decoded it), the token, and the answer: a status and the item (200) or
# error body.
CASES: List[Any] = [
    ("/v2/topics/orders", TOKEN_A, 200, served(ALPHA_GROUP)),
    ("/v2/queues/emails", TOKEN_A, 200, served(ALPHA_QUEUE)),
    ("/v2/queues/reports", TOKEN_B, 200, served(BETA_QUEUE)),  # "paused" always there
    ("/v2/queues/emails/", TOKEN_A, 200, served(ALPHA_QUEUE)),  # a trailing slash, as on the lists
    ("/v2/queues/Q.1-_", TOKEN_A, 200, served(dict(ALPHA_QUEUE, name="Q.1-_"))),
    # A name outside QStash's rule is a 400 that says the rule (as QStash answers), found or not
    ("/v2/queues/my queue", TOKEN_A, 400, BAD_NAME),
    ("/v2/queues/100%", TOKEN_A, 400, BAD_NAME),
    (utf8("/v2/queues/ünï"), TOKEN_A, 400, BAD_NAME),
    ("/v2/queues/x+y", TOKEN_A, 400, BAD_NAME),
    ("/v2/queues/\xff", TOKEN_A, 400, NOT_UTF8),
    # ... but a URL group's is one there is not (QStash's document gives its GET no 400)
    ("/v2/topics/a:b", TOKEN_A, 404, no_such("URL group", "a:b")),
    (utf8("/v2/topics/ünï"), TOKEN_A, 404, no_such("URL group", "ünï")),  # shown as typed
    # The name is one PATH_INFO segment: an escaped slash is a separator
    ("/v2/queues/a/b", TOKEN_A, 404, NOT_FOUND),
    ("/v2/queues/emails/extra", TOKEN_A, 404, NOT_FOUND),
    ("/v2/queues//emails", TOKEN_A, 404, NOT_FOUND),
    ("/v2/queues//", TOKEN_A, 404, NOT_FOUND),
    ("/v2/messages/abc", TOKEN_A, 404, NOT_FOUND),
    # Missing, in this account or in all
    ("/v2/queues/nothere", TOKEN_A, 404, no_such("queue", "nothere")),
    ("/v2/topics/nothere", TOKEN_A, 404, no_such("URL group", "nothere")),
    ("/v2/queues/reports", TOKEN_A, 404, no_such("queue", "reports")),  # only in account B
    ("/v2/topics/orders", TOKEN_B, 404, no_such("URL group", "orders")),  # only in account A
    # Auth comes first: the same 401 whatever the name
    ("/v2/queues/emails", None, 401, None),
    ("/v2/queues/nothere", None, 401, None),
    ("/v2/queues/emails", "wrong", 401, None),
    ("/v2/queues/nothere", "wrong", 401, None),
]


@pytest.mark.parametrize("path_info, token, status, expected", CASES)
def test_item_paths(
    app: Any, path_info: str, token: Optional[str], status: int, expected: Any
) -> None:
    response = call(app, path_info, headers=bearer(token) if token else {})
    assert response.status == status
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Content-Length"] == str(len(response.body))
    if status == 401:
        lists = call(app, "/v2/queues", headers=bearer(token) if token else {})
        assert (response.headers, response.body) == (lists.headers, lists.body)
    else:
        assert response.json() == expected


@pytest.mark.parametrize(
    "length, shown",
    [
        (service.SHOWN_NAME, "q" * service.SHOWN_NAME),
        (service.SHOWN_NAME + 1, "q" * service.SHOWN_NAME + "..."),
    ],
)
def test_a_long_missing_name_is_cut_short_in_the_message(app: Any, length: int, shown: str) -> None:
    assert call(app, "/v2/queues/" + "q" * length, headers=bearer(TOKEN_A)).json() == no_such(
        "queue", shown
    )


def test_mounted_under_a_prefix(app: Any) -> None:
    response = call(app, "/v2/queues/a.b", headers=bearer(TOKEN_A), SCRIPT_NAME="/qstash")
    assert response.json() == served(dict(ALPHA_QUEUE, name="a.b"))


@pytest.mark.parametrize("path", ["/v2/topics", "/v2/queues"])
def test_an_item_is_exactly_its_element_of_the_list(app: Any, path: str) -> None:
    listed = call(app, path, headers=bearer(TOKEN_A)).json()
    for element in listed:
        name = element["name"]
        response = call(app, "%s/%s" % (path, name), headers=bearer(TOKEN_A))
        assert (
            response.body == json.dumps(element, ensure_ascii=False, separators=(",", ":")).encode()
        )


def test_another_accounts_name_answers_like_no_name_at_all(app: Any) -> None:
    theirs = call(app, "/v2/queues/reports", headers=bearer(TOKEN_A))  # exists in account B
    # Exists nowhere; same length.
    nowhere = call(app, "/v2/queues/reparts", headers=bearer(TOKEN_A))
    assert (theirs.status, theirs.headers) == (nowhere.status, nowhere.headers)
    assert theirs.body.replace(b"reports", b"reparts") == nowhere.body


@pytest.mark.parametrize(
    "path", ["/v2/topics/orders", "/v2/queues/emails", "/v2/queues/nothere", "/v2/queues/a b"]
)
def test_head_is_get_without_the_body(app: Any, path: str) -> None:
    get = call(app, path, headers=bearer(TOKEN_A))
    head = call(app, path, method="HEAD", headers=bearer(TOKEN_A))
    assert (head.status, head.headers, head.body) == (get.status, get.headers, b"")


def test_etag_and_if_none_match(app: Any) -> None:
    first = call(app, "/v2/queues/emails", headers=bearer(TOKEN_A))
    etag = first.headers["ETag"]
    assert first.headers["Cache-Control"] == "private, no-cache"
    again = call(app, "/v2/queues/emails", headers=dict(bearer(TOKEN_A), **{"If-None-Match": etag}))
    assert (again.status, again.body, again.headers["ETag"]) == (304, b"", etag)
    other = call(
        app, "/v2/queues/my-queue", headers=dict(bearer(TOKEN_A), **{"If-None-Match": etag})
    )
    assert other.status == 200 and other.headers["ETag"] != etag
    stranger = call(app, "/v2/queues/emails", headers={"If-None-Match": etag})
    assert stranger.status == 401  # auth before the conditional


def test_bodies_are_encoded_once_per_account_and_only_for_names_that_exist(
    app: Any, data: DataFile
) -> None:
    for _ in range(3):
        call(app, "/v2/queues/emails", headers=bearer(TOKEN_A))
        call(app, "/v2/queues/nothere", headers=bearer(TOKEN_A))
        call(app, "/v2/queues/reports", headers=bearer(TOKEN_A))
    loaded = data.current()
    assert loaded is not None
    account = loaded.accounts[0]
    assert list(account.cache) == [("queues", "emails")] and not loaded.accounts[1].cache
    body = account.cache["queues", "emails"]
    call(app, "/v2/queues/emails", headers=bearer(TOKEN_A))
    assert account.cache["queues", "emails"] is body


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/v2/topics/%C3%BCn%C3%AFx", 404, no_such("URL group", "ünïx")["error"]),
        ("/v2/queues/%C3%BCn%C3%AFx", 400, BAD_NAME["error"]),
        ("/v2/topics/%FF%FE", 400, NOT_UTF8["error"]),
        ("/v2/queues/%FF", 400, NOT_UTF8["error"]),
    ],
)
def test_a_name_in_the_path_is_read_as_utf8_and_shown_as_typed(
    app: Any, path: str, status: int, message: str
) -> None:
    """The path's bytes, which PEP 3333 hands over as latin-1 characters, are the name's UTF-8:
    a message shows it as typed, escaped once (by the answer's JSON); bytes that are not UTF-8
    are a 400 that says so."""
    environ_path = unquote_to_bytes(path).decode("latin-1")
    response = call(app, environ_path, headers=bearer(TOKEN_A))
    assert (response.status, response.json()) == (status, {"error": message})
