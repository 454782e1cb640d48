// Writes to a key-value bucket with the official JavaScript client's KV API, as another
// team's service would: node kv_put.mjs SERVER_URL BUCKET KEY JSON_VALUE
// Puts the value, then deletes the key; prints the revisions the client reported (one JSON
// line); exits 1 on a refusal.
import { load } from "./load.mjs";

const [server, bucket, key, value] = process.argv.slice(2);
const { connect } = await load("@nats-io/transport-node");
const { Kvm } = await load("@nats-io/kv");

const nc = await connect({ servers: server });
try {
  const kv = await new Kvm(nc).open(bucket);
  const put = await kv.put(key, value);
  await kv.delete(key);
  const deleted = await kv.get(key);
  console.log(JSON.stringify({ put, deleted: deleted?.revision ?? null, operation: deleted?.operation ?? null }));
} catch (e) {
  console.error(`refused: ${e.message}`);
  process.exitCode = 1;
} finally {
  await nc.close();
}
