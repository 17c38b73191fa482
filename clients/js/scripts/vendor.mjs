#!/usr/bin/env node
// Copies the ES module builds of the two runtime dependencies from node_modules into vendor/,
// so that src/agui-hub.js can be imported straight from a <script type="module"> with no build
// step. Run after changing their versions in package.json:  npm install && node scripts/vendor.mjs
// The copies are byte-for-byte the published files (test/vendor.test.mjs checks that), plus
// each package's licence file next to them.

import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** What is vendored: package -> [build folder in the package, destination, licence file]. */
export const VENDORED = [
  { name: "fast-json-patch", build: "module", into: "vendor/fast-json-patch", licence: "LICENSE.txt" },
  { name: "@msgpack/msgpack", build: "dist.esm", into: "vendor/msgpack", licence: "LICENSE" },
];

/** The .mjs files of a build folder, relative to it (source maps and typings left out). */
export function moduleFiles(dir) {
  const out = [];
  const walk = (sub) => {
    for (const entry of readdirSync(join(dir, sub)).sort()) {
      const rel = sub ? `${sub}/${entry}` : entry;
      if (statSync(join(dir, rel)).isDirectory()) walk(rel);
      else if (entry.endsWith(".mjs")) out.push(rel);
    }
  };
  walk("");
  return out;
}

function main() {
  for (const { name, build, into, licence } of VENDORED) {
    const pkg = join(root, "node_modules", name);
    const { version } = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
    const dest = join(root, into);
    rmSync(dest, { recursive: true, force: true });
    for (const file of moduleFiles(join(pkg, build))) {
      mkdirSync(dirname(join(dest, file)), { recursive: true });
      copyFileSync(join(pkg, build, file), join(dest, file));
    }
    copyFileSync(join(pkg, licence), join(dest, licence));
    console.log(`${name}@${version}: ${build}/ -> ${relative(root, dest)}/`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
