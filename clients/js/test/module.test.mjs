// The core module loads as a browser loads it: over HTTP, with no build step and no bare
// imports; its vendored dependencies are the published files, untouched, with their licences.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import http from "node:http";
import { dirname, join, normalize } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { moduleFiles, VENDORED } from "../scripts/vendor.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8"));

for (const { name, build, into, licence } of VENDORED) {
  test(`vendor/ holds ${name} exactly as published, at the locked version`, (t) => {
    const pkg = join(ROOT, "node_modules", name);
    if (!existsSync(pkg)) return t.skip("node_modules not installed");
    const { version } = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
    assert.equal(version, lock.packages[`node_modules/${name}`].version);
    const published = moduleFiles(join(pkg, build));
    assert.deepEqual(moduleFiles(join(ROOT, into)), published);
    for (const file of published) {
      assert.ok(readFileSync(join(pkg, build, file)).equals(readFileSync(join(ROOT, into, file))), file);
    }
    assert.ok(readFileSync(join(pkg, licence)).equals(readFileSync(join(ROOT, into, licence))));
  });
}

test("the core module's imports are all relative (the adapters alone use packages)", () => {
  const src = join(ROOT, "src");
  const adapters = ["agent.js", "copilotkit.js"];
  for (const file of readdirSync(src).filter((f) => f.endsWith(".js") && !adapters.includes(f))) {
    const text = readFileSync(join(src, file), "utf8");
    for (const [, spec] of text.matchAll(/(?:^|\n)\s*(?:import|export)[^"']*?from\s+["']([^"']+)["']/g)) {
      assert.ok(spec.startsWith("./") || spec.startsWith("../vendor/"), `${file} imports ${spec}`);
    }
    for (const [, spec] of text.matchAll(/import\(\s*["']([^"']+)["']\s*\)/g)) {
      assert.ok(spec.startsWith("../vendor/"), `${file} imports ${spec}`);
    }
    assert.ok(!/\brequire\(|\bprocess\.|from "node:/.test(text), `${file} uses Node-only APIs`);
  }
});

// Node 20 can import ES modules over http from loopback (--experimental-network-imports), with
// the browser's rules: relative URLs only, no bare specifiers, no node: built-ins.
const networkImports = process.allowedNodeEnvironmentFlags.has("--experimental-network-imports");

test(
  "a page can import it straight from a static server",
  { skip: !networkImports && "no network imports in this Node" },
  async () => {
    const server = http.createServer(async (req, res) => {
      const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname));
      try {
        const body = await readFile(join(ROOT, path));
        res.writeHead(200, { "content-type": "text/javascript" }).end(body);
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise((res) => server.listen(0, "127.0.0.1", res));
    const base = `http://127.0.0.1:${server.address().port}`;
    const page = `
    const hub = await import("${base}/src/agui-hub.js");
    const msgpack = await hub.loadMsgpack();
    const mirror = new hub.Mirror();
    mirror.receive(hub.decodeFrame(msgpack.encode({ type: "CUSTOM", name: "hub.welcome", value: { seq: 1, epoch: "e" } }), msgpack));
    mirror.receive({ type: "STATE_SNAPSHOT", snapshot: { ok: true }, metadata: { hub: { seq: 1, epoch: "e", sync: true } } });
    class NoSocket {}
    const client = new hub.HubClient({ url: "${base}", thread: "t", WebSocket: NoSocket, autoConnect: false });
    console.log(JSON.stringify({ state: mirror.state, url: client.url }));
  `;
    try {
      const out = await new Promise((resolve, reject) =>
        execFile(
          process.execPath,
          ["--experimental-network-imports", "--no-warnings", "--input-type=module", "-e", page],
          { timeout: 20_000 },
          (err, stdout, stderr) => (err ? reject(new Error(stderr || err.message)) : resolve(stdout)),
        ),
      );
      assert.deepEqual(JSON.parse(out), {
        state: { ok: true },
        url: `ws://127.0.0.1:${server.address().port}/v1/threads/t`,
      });
    } finally {
      server.close();
    }
  },
);
