// Another team's service in another language, speaking our codecs with the libraries its
// language has (@msgpack/msgpack, cbor2, protobufjs over order.proto), through the official
// JavaScript client: node codecs_client.mjs SERVER_URL
// Publishes into JetStream one order per codec with its Content-Type header and one without
// (as a client that writes none), then calls the MessagePack endpoint `shop.price` and
// decodes its reply. Prints one JSON line: { published: [subjects], reply: { content_type,
// body } }; exits 1 on a failure.
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { load } from "./load.mjs";

const [server] = process.argv.slice(2);
const { connect, headers } = await load("@nats-io/transport-node");
const { jetstream } = await load("@nats-io/jetstream");
const msgpack = await load("@msgpack/msgpack");
const cbor = await load("cbor2");
const protobuf = (await load("protobufjs")).default;

const here = dirname(fileURLToPath(import.meta.url));
const root = await protobuf.load(join(here, "order.proto"));
const Order = root.lookupType("shop.Order");

// The same order in each codec: id 1 (msgpack), 2 (cbor), 3 (protobuf); +10 without a header.
const order = (id) => ({ id, item: "tea", tags: ["green", "loose"], cents: -250 });
const encoders = {
  msgpack: { type: "application/msgpack", encode: (o) => msgpack.encode(o) },
  cbor: { type: "application/cbor", encode: (o) => cbor.encode(o) },
  protobuf: {
    type: "application/x-protobuf",
    encode: (o) => Order.encode(Order.fromObject(o)).finish(),
  },
};

const nc = await connect({ servers: server });
try {
  const js = jetstream(nc);
  const published = [];
  let id = 1;
  for (const [name, { type, encode }] of Object.entries(encoders)) {
    const subject = `codecs.${name}`;
    const h = headers();
    h.set("Content-Type", type);
    await js.publish(subject, encode(order(id)), { headers: h });
    await js.publish(subject, encode(order(id + 10)));
    published.push(subject, subject);
    id += 1;
  }
  const reply = await nc.request("shop.price", msgpack.encode({ item: "tea", qty: 3 }), {
    timeout: 5000,
  });
  let body;
  try {
    body = msgpack.decode(reply.data);
  } catch (e) {
    throw new Error(
      `the reply is not MessagePack (${e.message}): headers ${reply.headers ?? "none"}, ` +
        `body ${JSON.stringify(new TextDecoder().decode(reply.data))}`,
    );
  }
  const content_type = reply.headers?.get("Content-Type") ?? null;
  console.log(JSON.stringify({ published, reply: { content_type, body } }));
} catch (e) {
  console.error(`failed: ${e.stack ?? e}`);
  process.exitCode = 1;
} finally {
  await nc.close();
}
