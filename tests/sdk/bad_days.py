"""Drive the official Python SDK through a bad day that a --reset server gives on demand.

Run by tests/test_sdks.py with an interpreter that has the SDK (``pip install qstash``).  Reads
QSTASH_URL and QSTASH_TOKEN; asks for each fault (POST /qstash-lists/faults), then lists the
queues; prints one JSON object: what each list raised or returned.
"""

import json
import os
import urllib.request
from typing import Any, Dict, List, Tuple

from qstash import QStash
from qstash.errors import DailyMessageLimitExceededError, QStashError, RateLimitExceededError

URL, TOKEN = os.environ["QSTASH_URL"], os.environ["QSTASH_TOKEN"]


def fault(**keys: Any) -> None:
    request = urllib.request.Request(
        URL + "/qstash-lists/faults",
        json.dumps(keys).encode(),
        {"Authorization": "Bearer " + TOKEN},
        method="POST",
    )
    urllib.request.urlopen(request).close()


def listed(client: QStash) -> Dict[str, Any]:
    try:
        return {"names": [queue.name for queue in client.queue.list()]}
    except (RateLimitExceededError, DailyMessageLimitExceededError) as error:
        kind = type(error).__name__
        return {
            "raised": kind,
            "limit": error.limit,
            "remaining": error.remaining,
            "reset": error.reset,
        }
    except QStashError as error:
        return {"raised": type(error).__name__, "message": str(error)}


client = QStash(TOKEN, base_url=URL)
results = {}
faults: List[Tuple[str, Dict[str, Any]]] = [
    ("burst", {"status": 429, "limit": 10, "remaining": 0, "reset": 1800000000}),
    ("daily", {"status": 429, "daily": True, "limit": 500, "remaining": 0, "reset": 1800000000}),
    ("unavailable", {"status": 503}),
    ("dropped", {"drop": True}),
]
for name, keys in faults:
    fault(**keys)
    results[name] = listed(client)
results["after"] = listed(client)
print(json.dumps(results))
