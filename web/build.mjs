// Builds the console: copies src/ and the pinned xterm.js (node_modules, from `npm ci`) into
// the output directory spaced serves as /ui/. Usage: node build.mjs OUT_DIR [NODE_MODULES_DIR]
import { cpSync, mkdirSync, rmSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
const modules = process.argv[3] || join(here, "node_modules");
if (!out) {
  console.error("usage: node build.mjs OUT_DIR [NODE_MODULES_DIR]");
  process.exit(2);
}
const vendored = [
  ["@xterm/xterm/lib/xterm.js", "assets/xterm.js"],
  ["@xterm/xterm/css/xterm.css", "assets/xterm.css"],
  ["@xterm/addon-fit/lib/addon-fit.js", "assets/addon-fit.js"],
];
for (const [from] of vendored) {
  if (!existsSync(join(modules, from))) {
    console.error(`build.mjs: ${join(modules, from)} is missing: run npm ci first`);
    process.exit(1);
  }
}
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });
cpSync(join(here, "src", "index.html"), join(out, "index.html"));
for (const f of ["app.js", "api.js", "logic.js", "terminal.js", "pages.js", "style.css"]) {
  cpSync(join(here, "src", f), join(out, "assets", f));
}
for (const [from, to] of vendored) cpSync(join(modules, from), join(out, to));
console.log(`console built in ${out}`);
