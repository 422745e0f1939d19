// One release of the JS SDK (@upstash/qstash) against a running server, for tests/sdk/matrix.py.
//
// argv: the node_modules folder that holds that release, a URL group and a queue that exist, a
// name that does not, and "dev" where the release has a dev mode (QSTASH_DEV).  Reads QSTASH_URL
// and QSTASH_TOKEN (and, for the dev mode, QSTASH_DEV_PORT: the port of a server on the dev token).
// Calls every list and get of URL groups (topics in older releases) and queues that this release's
// Client offers, and prints one JSON object: each call's result, or what it raised.
import { createRequire } from "node:module";
import path from "node:path";

const [modules, group, queue, missing, dev] = process.argv.slice(2);
const require = createRequire(path.join(modules, "index.js"));
const { Client } = require("@upstash/qstash");

async function outcome(call) {
  try {
    return { value: await call() };
  } catch (error) {
    return { raised: String(error && error.message) };
  }
}

function calls(client) {
  const found = {};
  for (const kind of ["topics", "urlGroups"]) {  // the same API under its old name and its new
    if (client[kind] && typeof client[kind].list === "function") {
      found[kind + ".list"] = () => client[kind].list();
      found[kind + ".get"] = () => client[kind].get(group);
      found[kind + ".get missing"] = () => client[kind].get(missing);
    }
  }
  if (typeof client.queue === "function") {
    found["queue().list"] = () => client.queue().list();
    found["queue().get"] = () => client.queue({ queueName: queue }).get();
    found["queue().get missing"] = () => client.queue({ queueName: missing }).get();
  }
  return found;
}

const result = {};
const client = new Client({ baseUrl: process.env.QSTASH_URL, token: process.env.QSTASH_TOKEN });
for (const [name, call] of Object.entries(calls(client))) {
  result[name] = await outcome(call);
}
if (dev === "dev") {  // no options: the SDK finds the server itself, with the dev token
  process.env.QSTASH_DEV = "1";
  const local = await outcome(async () => new Client());
  if (local.raised) {
    result["dev mode: new Client()"] = local;
  } else {
    for (const [name, call] of Object.entries(calls(local.value))) {
      if (!name.endsWith("missing")) {
        result["dev mode: " + name] = await outcome(call);
      }
    }
  }
}
console.log(JSON.stringify(result));
