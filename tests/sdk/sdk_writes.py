"""Drive the official Python SDK's writes against a running --writable server, sync and asyncio.

Run by tests/test_sdks.py with an interpreter that has the SDK (``pip install qstash``).  Reads
QSTASH_URL and QSTASH_TOKEN; argv[1] is "sync" or "asyncio", argv[2] a prefix for the names it
creates; prints one JSON object: what each step read back.
"""

import asyncio
import dataclasses
import json
import os
import sys
from typing import Any, Dict, List

from qstash import AsyncQStash, QStash


def plain(result: Any) -> Any:
    return json.loads(json.dumps(result, default=dataclasses.asdict))


def steps(prefix: str) -> List[Any]:
    """The calls in order, as (name, object, method, args, kwargs): a write or a read to report."""
    queue, group = prefix + "-queue", prefix + "-group"
    one, two = {"url": "https://a.example/1"}, {"url": "https://a.example/2", "name": "second"}
    return [
        ("upsert", "queue", "upsert", (queue,), {"parallelism": 1}),
        ("got", "queue", "get", (queue,), {}),
        ("upsert again", "queue", "upsert", (queue,), {"parallelism": 2}),
        ("got again", "queue", "get", (queue,), {}),
        ("pause", "queue", "pause", (queue,), {}),
        ("paused", "queue", "get", (queue,), {}),
        ("resume", "queue", "resume", (queue,), {}),
        ("resumed", "queue", "get", (queue,), {}),
        ("upsert paused", "queue", "upsert", (queue,), {"paused": True}),
        ("upserted paused", "queue", "get", (queue,), {}),
        ("listed", "queue", "list", (), {}),
        ("delete", "queue", "delete", (queue,), {}),
        ("listed after delete", "queue", "list", (), {}),
        ("add endpoints", "url_group", "upsert_endpoints", (group, [one, two]), {}),
        ("group", "url_group", "get", (group,), {}),
        ("remove endpoints", "url_group", "remove_endpoints", (group, [one]), {}),
        ("group after remove", "url_group", "get", (group,), {}),
        ("delete group", "url_group", "delete", (group,), {}),
        ("delete group again", "url_group", "delete", (group,), {}),
        ("groups", "url_group", "list", (), {}),
    ]


def run_sync(prefix: str) -> Dict[str, Any]:
    client = QStash(os.environ["QSTASH_TOKEN"], base_url=os.environ["QSTASH_URL"])
    return {
        name: plain(getattr(getattr(client, part), method)(*args, **kwargs))
        for name, part, method, args, kwargs in steps(prefix)
    }


async def run_async(prefix: str) -> Dict[str, Any]:
    client = AsyncQStash(os.environ["QSTASH_TOKEN"], base_url=os.environ["QSTASH_URL"])
    return {
        name: plain(await getattr(getattr(client, part), method)(*args, **kwargs))
        for name, part, method, args, kwargs in steps(prefix)
    }


if __name__ == "__main__":
    mode, prefix = sys.argv[1], sys.argv[2]
    print(json.dumps(run_sync(prefix) if mode == "sync" else asyncio.run(run_async(prefix))))
