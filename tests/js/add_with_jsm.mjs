// Adds the exported streams and consumers to a server with the official JavaScript client's
// JetStream manager, as an operator would: node add_with_jsm.mjs SERVER_URL DIR
// Reads DIR/STREAM.stream.json and DIR/STREAM.GROUP.consumer.json as they are; prints what
// the server answered (one JSON line each); exits 1 on the first refusal.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { load } from "./load.mjs";

const [server, dir] = process.argv.slice(2);
const { connect } = await load("@nats-io/transport-node");
const { jetstreamManager } = await load("@nats-io/jetstream");

const nc = await connect({ servers: server });
try {
  const jsm = await jetstreamManager(nc);
  const files = readdirSync(dir).sort();
  for (const file of files.filter((f) => f.endsWith(".stream.json"))) {
    const config = JSON.parse(readFileSync(join(dir, file), "utf8"));
    const info = await jsm.streams.add(config);
    console.log(JSON.stringify({ file, stream: info.config.name }));
  }
  for (const file of files.filter((f) => f.endsWith(".consumer.json"))) {
    const stream = file.split(".")[0];
    const config = JSON.parse(readFileSync(join(dir, file), "utf8"));
    const info = await jsm.consumers.add(stream, config);
    console.log(JSON.stringify({ file, stream, consumer: info.name }));
  }
} catch (e) {
  console.error(`refused: ${e.message}`);
  process.exitCode = 1;
} finally {
  await nc.close();
}
