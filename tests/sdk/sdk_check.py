"""Drive the official Python SDK (``pip install qstash``) against a running server.

Run by tests/test_sdks.py with an interpreter that has the SDK, never from the
project's own environment.  Reads QSTASH_URL and QSTASH_TOKEN; argv names a URL
group and a queue to get; prints one JSON object of what the SDK returned.
"""

import dataclasses
import json
import os
import sys
from typing import Any, Callable, Dict

from qstash import QStash
from qstash.errors import QStashError


def outcome(call: Callable[[], Any]) -> Any:
    try:
        result = call()
    except QStashError as exc:
        return {"raised": str(exc)}
    return json.loads(json.dumps(result, default=dataclasses.asdict))


def main() -> None:
    client = QStash(os.environ["QSTASH_TOKEN"], base_url=os.environ["QSTASH_URL"])
    group, queue = sys.argv[1], sys.argv[2]
    result: Dict[str, Any] = {
        "url_groups": outcome(client.url_group.list),
        "queues": outcome(client.queue.list),
        "url_group": outcome(lambda: client.url_group.get(group)),
        "queue": outcome(lambda: client.queue.get(queue)),
        "signing_key": outcome(client.signing_key.get),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
