// Loads the npm packages from the folder the tests name (NT_NPM_DIR, where .ci/run installs
// tests/js/package.json), failing with what to run when they are missing.
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

export async function load(name) {
  const dir = process.env.NT_NPM_DIR;
  if (!dir) {
    throw new Error("NT_NPM_DIR is not set: it names the folder the npm packages are installed in");
  }
  const require = createRequire(join(resolve(dir), "package.json"));
  let path;
  try {
    path = require.resolve(name);
  } catch (e) {
    const hint = existsSync(join(dir, "node_modules"))
      ? `${name} is not installed in ${dir}`
      : `nothing is installed in ${dir}`;
    throw new Error(
      `${hint}; install the pinned packages: cp tests/js/package.json ${dir}/ && npm install --prefix ${dir} (as .ci/run does)`,
    );
  }
  return import(pathToFileURL(path).href);
}
