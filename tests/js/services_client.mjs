// Discovers and calls a service the way an operator's tool does, with the official JavaScript
// services client (@nats-io/services), which we did not write:
//   node services_client.mjs SERVER_URL SERVICE SUBJECT REQUESTS
// Pings the service (every instance answers), reads each instance's INFO and STATS, sends
// REQUESTS requests to SUBJECT (`{"n": i}`) and reads STATS again. Prints one JSON object:
// { instances: [{id, version, endpoints: [{name, subject, queue_group}]}],
//   replies: [reply bodies], errors: [{code, description}],
//   stats: [{id, endpoints: [{name, num_requests, num_errors}]}] }
import { load } from "./load.mjs";

const [server, name, subject, count] = process.argv.slice(2);
const { connect } = await load("@nats-io/transport-node");
const { Svcm } = await load("@nats-io/services");

const nc = await connect({ servers: server });
try {
  const client = new Svcm(nc).client();
  const collect = async (iterable) => {
    const out = [];
    for await (const item of await iterable) out.push(item);
    return out;
  };
  const pings = await collect(client.ping(name));
  const infos = await collect(client.info(name));
  const instances = pings
    .map((p) => {
      const info = infos.find((i) => i.id === p.id);
      return {
        id: p.id,
        version: p.version,
        description: info?.description ?? null,
        endpoints: (info?.endpoints ?? []).map((e) => ({
          name: e.name,
          subject: e.subject,
          queue_group: e.queue_group,
        })),
      };
    })
    .sort((a, b) => a.id.localeCompare(b.id));
  const replies = [];
  const errors = [];
  for (let i = 0; i < Number(count); i++) {
    const msg = await nc.request(subject, JSON.stringify({ n: i }), { timeout: 5000 });
    const code = msg.headers?.get("Nats-Service-Error-Code");
    if (code) {
      errors.push({ code: Number(code), description: msg.headers.get("Nats-Service-Error") });
    } else {
      replies.push(msg.json());
    }
  }
  const stats = (await collect(client.stats(name)))
    .map((s) => ({
      id: s.id,
      endpoints: s.endpoints.map((e) => ({
        name: e.name,
        num_requests: e.num_requests,
        num_errors: e.num_errors,
      })),
    }))
    .sort((a, b) => a.id.localeCompare(b.id));
  console.log(JSON.stringify({ instances, replies, errors, stats }));
} catch (e) {
  console.error(`failed: ${e.message}`);
  process.exitCode = 1;
} finally {
  await nc.close();
}
