// Drive the official JS SDK's writes against a running --writable server.
//
// Run by tests/test_sdks.py with QSTASH_LISTS_SDK_JS naming the node_modules folder that holds
// the SDK.  Reads QSTASH_URL and QSTASH_TOKEN; argv names a prefix for the names it creates;
// prints one JSON object: what each step read back (the same steps as sdk_writes.py).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.QSTASH_LISTS_SDK_JS, "index.js"));
const { Client } = require("@upstash/qstash");

const client = new Client({ baseUrl: process.env.QSTASH_URL, token: process.env.QSTASH_TOKEN });
const [prefix] = process.argv.slice(2);
const queue = client.queue({ queueName: `${prefix}-queue` });
const group = `${prefix}-group`;
const one = { url: "https://a.example/1" };
const two = { url: "https://a.example/2", name: "second" };
const result = {};
const steps = [
  ["upsert", () => queue.upsert({ parallelism: 1 })],
  ["got", () => queue.get()],
  ["upsert again", () => queue.upsert({ parallelism: 2 })],
  ["got again", () => queue.get()],
  ["pause", () => queue.pause()],
  ["paused", () => queue.get()],
  ["resume", () => queue.resume()],
  ["resumed", () => queue.get()],
  ["upsert paused", () => queue.upsert({ paused: true })],
  ["upserted paused", () => queue.get()],
  ["listed", () => client.queue().list()],
  ["delete", () => queue.delete()],
  ["listed after delete", () => client.queue().list()],
  ["add endpoints", () => client.urlGroups.addEndpoints({ name: group, endpoints: [one, two] })],
  ["group", () => client.urlGroups.get(group)],
  ["remove endpoints", () => client.urlGroups.removeEndpoints({ name: group, endpoints: [one] })],
  ["group after remove", () => client.urlGroups.get(group)],
  ["delete group", () => client.urlGroups.delete(group)],
  ["delete group again", () => client.urlGroups.delete(group)],
  ["groups", () => client.urlGroups.list()],
];
for (const [name, step] of steps) {
  result[name] = (await step()) ?? null;
}
console.log(JSON.stringify(result));
