// Validates AsyncAPI documents with the official parser: node validate_asyncapi.mjs FILE...
// Prints one JSON line per file: its errors (severity 0), warnings count, channel and
// operation counts. Exits 1 if a document has an error or could not be parsed.
import { readFileSync } from "node:fs";
import { load } from "./load.mjs";

const { Parser } = await load("@asyncapi/parser");
const parser = new Parser();
let failed = false;
for (const file of process.argv.slice(2)) {
  const { document, diagnostics } = await parser.parse(readFileSync(file, "utf8"));
  const errors = diagnostics
    .filter((d) => d.severity === 0)
    .map((d) => `${d.code} at ${d.path.join(".")}: ${d.message}`);
  const result = {
    file,
    parsed: document !== undefined,
    errors,
    warnings: diagnostics.filter((d) => d.severity === 1).length,
    version: document ? document.version() : null,
    channels: document ? document.channels().length : 0,
    operations: document ? document.operations().length : 0,
    // The first operation with a reply, as the parser reads it.
    endpoint: document
      ? document
          .operations()
          .all()
          .filter((op) => op.reply() !== undefined)
          .map((op) => ({
            id: op.id(),
            reply_channel_address: op.reply().channel()?.address() ?? null,
            reply_messages: op.reply().messages().length,
            tags: op.tags().all().map((t) => t.name()),
          }))[0] ?? null
      : null,
    queues: document
      ? document.operations().all().map((op) => {
          const nats = op.bindings().get("nats");
          return nats ? nats.value().queue ?? null : null;
        })
      : [],
  };
  if (!result.parsed || errors.length > 0) failed = true;
  console.log(JSON.stringify(result));
}
process.exit(failed ? 1 : 0);
