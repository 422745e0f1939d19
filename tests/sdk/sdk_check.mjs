// Drive the official JS SDK (npm install @upstash/qstash) against a running server.
//
// Run by tests/test_sdks.py with QSTASH_LISTS_SDK_JS naming the node_modules folder that holds
// the SDK, never from the project itself.  Reads QSTASH_URL and QSTASH_TOKEN; argv names a URL
// group and a queue to get; prints one JSON object of what the SDK returned.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.QSTASH_LISTS_SDK_JS, "index.js"));
const { Client } = require("@upstash/qstash");

const client = new Client({ baseUrl: process.env.QSTASH_URL, token: process.env.QSTASH_TOKEN });
const [group, queue] = process.argv.slice(2);

async function outcome(call) {
  try {
    return await call();
  } catch (error) {
    return { raised: String(error.message), status: error.status };
  }
}

console.log(JSON.stringify({
  url_groups: await outcome(() => client.urlGroups.list()),
  queues: await outcome(() => client.queue().list()),
  url_group: await outcome(() => client.urlGroups.get(group)),
  queue: await outcome(() => client.queue({ queueName: queue }).get()),
}));
