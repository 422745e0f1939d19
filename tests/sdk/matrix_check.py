"""One release of the Python SDK (``qstash``) against a running server, for tests/sdk/matrix.py.

Run with PYTHONPATH naming the folder that holds that release, never from the project's own
environment.  argv: a URL group and a queue that exist, a name that does not.  Reads QSTASH_URL
and QSTASH_TOKEN.  Calls every list and get of URL groups and queues, and signing_key.get(), of
the sync client and of the asyncio one where the release has it, and prints one JSON object:
each call's result (its dataclasses as dicts), what it raised, and where a value does not have
the type that the release's own dataclass declares for it.
"""

import asyncio
import dataclasses
import functools
import json
import os
import sys
import typing
from typing import Any, Callable, Dict, List

import qstash


def typed(value: Any, hint: Any, where: str, problems: List[str]) -> None:
    """Note in ``problems`` where ``value`` is not a ``hint`` (the release's annotation)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return
    if origin is typing.Union:
        if not any(_fits(value, arg) for arg in args):
            problems.append("%s: %r is not %s" % (where, value, hint))
        return
    if origin in (list, List):
        if not isinstance(value, list):
            problems.append("%s: %r is not a list" % (where, value))
            return
        for i, item in enumerate(value):
            typed(item, args[0] if args else Any, "%s[%d]" % (where, i), problems)
        return
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            problems.append("%s: %r is not a %s" % (where, value, hint.__name__))
            return
        hints = typing.get_type_hints(hint)
        for field in dataclasses.fields(hint):
            typed(
                getattr(value, field.name),
                hints[field.name],
                "%s.%s" % (where, field.name),
                problems,
            )
        return
    if isinstance(hint, type) and not (
        type(value) is hint or (hint is float and type(value) is int)
    ):
        problems.append("%s: %r is not %s" % (where, value, hint.__name__))


def _fits(value: Any, hint: Any) -> bool:
    problems: List[str] = []
    typed(value, hint, "", problems)
    return not problems


def declared(method: Callable[..., Any]) -> Any:
    """What ``method`` says it returns."""
    return typing.get_type_hints(method).get("return", Any)


LOOP = (
    asyncio.new_event_loop()
)  # one for every call of the asyncio client, whose connections outlive a call


def record(name: str, call: Callable[[], Any], hint: Any, result: Dict[str, Any]) -> None:
    try:
        value = call()
        if asyncio.iscoroutine(value):
            value = LOOP.run_until_complete(value)
    except Exception as exc:  # the SDK's error, whatever its class in this release
        result[name] = {"raised": "%s: %s" % (type(exc).__name__, exc)}
        return
    problems: List[str] = []
    typed(value, hint, name, problems)
    result[name] = {
        "value": json.loads(json.dumps(value, default=dataclasses.asdict)),
        "problems": problems,
    }


def main() -> None:
    group, queue, missing = sys.argv[1:4]
    token, url = os.environ["QSTASH_TOKEN"], os.environ["QSTASH_URL"]
    result: Dict[str, Any] = {}
    clients = [("", qstash.QStash(token, base_url=url))]
    if hasattr(qstash, "AsyncQStash"):
        clients.append(("async ", qstash.AsyncQStash(token, base_url=url)))
    for prefix, client in clients:
        for kind, name in (("url_group", group), ("queue", queue)):
            api = getattr(client, kind)
            record(prefix + kind + ".list", api.list, declared(api.list), result)
            record(
                prefix + kind + ".get", functools.partial(api.get, name), declared(api.get), result
            )
            record(
                prefix + kind + ".get missing",
                functools.partial(api.get, missing),
                declared(api.get),
                result,
            )
        keys = getattr(client, "signing_key", None)
        if keys is not None:
            record(prefix + "signing_key.get", keys.get, declared(keys.get), result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
