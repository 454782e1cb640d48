// Reads and writes an object store with the official JavaScript client's object store API, as
// another team's service would:
//   node obj_roundtrip.mjs SERVER_URL BUCKET READ_NAME READ_COPY_FILE WRITE_NAME WRITE_SIZE
// Reads READ_NAME and writes its bytes to READ_COPY_FILE; puts WRITE_SIZE bytes of the pattern
// byte(i) = (i * 31 + 7) % 251 as WRITE_NAME. Prints one JSON line (what it read and wrote, as
// the client reported it); exits 1 on a refusal.
import { writeFileSync } from "node:fs";
import { load } from "./load.mjs";

const [server, bucket, readName, copyFile, writeName, writeSize] = process.argv.slice(2);
const { connect } = await load("@nats-io/transport-node");
const { Objm } = await load("@nats-io/obj");

const nc = await connect({ servers: server });
try {
  const store = await new Objm(nc).open(bucket);
  const read = await store.getBlob(readName);
  if (read === null) {
    throw new Error(`no object ${readName} in ${bucket}`);
  }
  writeFileSync(copyFile, read);
  const data = new Uint8Array(Number(writeSize));
  for (let i = 0; i < data.length; i++) {
    data[i] = (i * 31 + 7) % 251;
  }
  const wrote = await store.putBlob({ name: writeName }, data);
  console.log(JSON.stringify({ read: read.length, wrote: wrote.size, chunks: wrote.chunks }));
} catch (e) {
  console.error(`refused: ${e.message}`);
  process.exitCode = 1;
} finally {
  await nc.close();
}
