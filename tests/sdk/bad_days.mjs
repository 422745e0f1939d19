// Drive the official JS SDK through a bad day that a --reset server gives on demand.
//
// Run by tests/test_sdks.py with QSTASH_LISTS_SDK_JS naming the node_modules folder that holds
// the SDK.  Reads QSTASH_URL and QSTASH_TOKEN; asks for each fault (POST /qstash-lists/faults),
// then lists the queues; prints one JSON object: what each list raised or returned.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.QSTASH_LISTS_SDK_JS, "index.js"));
const { Client, QstashRatelimitError, QstashDailyRatelimitError } = require("@upstash/qstash");
const url = process.env.QSTASH_URL, token = process.env.QSTASH_TOKEN;
const client = new Client({ baseUrl: url, token });

async function fault(keys) {
  const answer = await fetch(url + "/qstash-lists/faults", {
    method: "POST", headers: { authorization: "Bearer " + token }, body: JSON.stringify(keys),
  });
  if (!answer.ok) throw new Error(await answer.text());
}

async function listed() {
  try {
    return { names: (await client.queue().list()).map((queue) => queue.name) };
  } catch (error) {
    const limited = error instanceof QstashRatelimitError || error instanceof QstashDailyRatelimitError;
    const shown = { raised: error.name, message: String(error.message) };
    return limited ? { ...shown, limit: error.limit, remaining: error.remaining, reset: error.reset } : shown;
  }
}

const results = {};
for (const [name, keys] of [
  ["burst", { status: 429, limit: 10, remaining: 0, reset: 1800000000 }],
  ["daily", { status: 429, daily: true, limit: 500, remaining: 0, reset: 1800000000 }],
  ["unavailable", { status: 503 }],
  ["dropped", { drop: true }],
]) {
  await fault(keys);
  results[name] = await listed();
}
results.after = await listed();
console.log(JSON.stringify(results));
