"""Every answer of the read operations against QStash's own OpenAPI document, read strictly.

The document is ../shared/reference/qstash-openapi.yaml (a copy of qstash/openapi.yaml in
upstash/docs); tests/openapi.yaml is the same file, kept beside the tests so a clone
of this repository alone can run them.  "Strictly": every property a schema declares
is present (the one exception is an endpoint's ``name``, which an endpoint may lack),
no undeclared property appears, and integers are JSON integers.  The document lists
no 401 for these operations; 401s are held to its ``Error`` schema.
"""

from pathlib import Path
from typing import Any, Dict, Optional

import pytest
import yaml
from helpers import TOKEN_A, TOKEN_B, TOKEN_C, bearer, call

DOCUMENT = yaml.safe_load(
    (Path(__file__).resolve().parent / "openapi.yaml").read_text(encoding="utf-8")
)
SCHEMAS = DOCUMENT["components"]["schemas"]
MAY_BE_ABSENT = {("Endpoint", "name")}
TYPES = {
    "string": (str,),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def check(value: Any, schema: Dict[str, Any], where: str, name: Optional[str] = None) -> None:
    """Fail unless ``value`` fits ``schema`` strictly."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = SCHEMAS[name]
    kind = schema["type"]
    # bool is an int in Python, and an int is not a bool in JSON: compare the exact type.
    assert type(value) in TYPES[kind], "%s: expected %s, got %r" % (where, kind, value)
    if kind == "object":
        declared = schema["properties"]
        assert set(value) <= set(declared), "%s: undeclared %s" % (
            where,
            sorted(set(value) - set(declared)),
        )
        for key, sub in declared.items():
            if key in value:
                check(value[key], sub, "%s.%s" % (where, key))
            else:
                assert (name, key) in MAY_BE_ABSENT, "%s.%s: missing" % (where, key)
    elif kind == "array":
        for i, item in enumerate(value):
            check(item, schema["items"], "%s[%d]" % (where, i))


def test_the_copy_is_the_reference() -> None:
    reference = Path(__file__).resolve().parents[2] / "shared" / "reference" / "qstash-openapi.yaml"
    if not reference.exists():
        pytest.skip(
            "no ../shared/reference/qstash-openapi.yaml: to run it, "
            "copy there qstash/openapi.yaml of github.com/upstash/docs"
        )
    assert reference.read_bytes() == (Path(__file__).resolve().parent / "openapi.yaml").read_bytes()


CASES = [
    # the operation's path in the document, the request's path, the token, the status expected
    ("/v2/topics", "/v2/topics", TOKEN_A, 200),
    ("/v2/topics", "/v2/topics", TOKEN_C, 200),  # []
    ("/v2/topics", "/v2/topics", None, 401),
    ("/v2/topics/{urlGroupName}", "/v2/topics/orders", TOKEN_A, 200),
    ("/v2/topics/{urlGroupName}", "/v2/topics/orders", TOKEN_B, 404),
    ("/v2/topics/{urlGroupName}", "/v2/topics/orders", "wrong", 401),
    ("/v2/queues", "/v2/queues", TOKEN_A, 200),
    ("/v2/queues", "/v2/queues", TOKEN_B, 200),  # a queue without "paused" in the file
    ("/v2/queues", "/v2/queues", "wrong", 401),
    ("/v2/queues/{queueName}", "/v2/queues/emails", TOKEN_A, 200),
    ("/v2/queues/{queueName}", "/v2/queues/reports", TOKEN_B, 200),
    ("/v2/queues/{queueName}", "/v2/queues/nothere", TOKEN_A, 404),
    ("/v2/queues/{queueName}", "/v2/queues/emails", None, 401),
    ("/v2/keys", "/v2/keys", TOKEN_A, 200),
    ("/v2/keys", "/v2/keys", "wrong", 401),
]


@pytest.mark.parametrize("operation, path, token, status", CASES)
def test_answers_fit_the_documented_schema(
    app: Any, operation: str, path: str, token: Optional[str], status: int
) -> None:
    response = call(app, path, headers=bearer(token) if token else {})
    assert response.status == status
    responses = DOCUMENT["paths"][operation]["get"]["responses"]
    if status == 401:
        assert "401" not in responses  # if the document ever lists one, use it
        schema = {"$ref": "#/components/schemas/Error"}
    else:
        content = responses[str(status)]["content"]
        assert list(content) == [response.headers["Content-Type"]]
        schema = content["application/json"]["schema"]
    check(response.json(), schema, "%s %d" % (path, status))


def test_the_checker_is_strict() -> None:
    queue = {
        "createdAt": 1,
        "updatedAt": 1,
        "name": "q",
        "parallelism": 1,
        "lag": 0,
        "paused": False,
    }
    check(queue, {"$ref": "#/components/schemas/Queue"}, "ok")
    for bad in [
        dict(queue, lag=1.0),
        dict(queue, paused=0),
        dict(queue, extra=1),
        {k: v for k, v in queue.items() if k != "paused"},
        dict(queue, lag=True),
    ]:
        with pytest.raises(AssertionError):
            check(bad, {"$ref": "#/components/schemas/Queue"}, "bad")
    group = {"createdAt": 1, "updatedAt": 1, "name": "g", "endpoints": [{"url": "http://a"}]}
    # An endpoint's name may be absent.
    check(group, {"$ref": "#/components/schemas/URLGroup"}, "ok")
    with pytest.raises(AssertionError):
        check(dict(group, endpoints=None), {"$ref": "#/components/schemas/URLGroup"}, "bad")
