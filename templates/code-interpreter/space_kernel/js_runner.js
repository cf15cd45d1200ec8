'use strict';
// The JavaScript interpreter of one space-kernel context: a node process that runs cells in
// its own global scope, so state persists between cells.
//
// Requests arrive as JSON lines on fd $SPACE_KERNEL_REQ_FD ({"type":"execute","code","env"});
// events leave as JSON lines on fd $SPACE_KERNEL_EVT_FD: stdout/stderr (what the cell writes
// through process.stdout/stderr and console), result ({data: {mime: value}}), error
// ({name, value, traceback}) and done. Output of child processes goes to the real fds 1/2,
// which the daemon reads as well.
//
// Each cell is rewritten with acorn (Debian's node-acorn) the way node's REPL does for
// top-level await: top-level declarations become assignments to globals (so a later cell
// can redeclare them), static imports become dynamic ones, and the value of the last
// expression statement is returned. Without acorn a cell runs as a plain script.
// SIGINT interrupts the running cell (sync code via breakOnSigint, pending awaits by
// rejecting them); it never ends the process.

const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const vm = require('vm');
const { createRequire, builtinModules } = require('module');
const { pathToFileURL } = require('url');
const { StringDecoder } = require('string_decoder');

const REQ_FD = Number(process.env.SPACE_KERNEL_REQ_FD);
const EVT_FD = Number(process.env.SPACE_KERNEL_EVT_FD);
delete process.env.SPACE_KERNEL_REQ_FD;
delete process.env.SPACE_KERNEL_EVT_FD;
if (!Number.isInteger(REQ_FD) || !Number.isInteger(EVT_FD)) {
  process.stderr.write('js_runner: run by space-kernel, not by hand\n');
  process.exit(2);
}

function loadAcorn() {
  for (const base of ['', '/usr/share/nodejs/', '/usr/lib/nodejs/']) {
    try {
      return { acorn: require(base + 'acorn'), walk: require(base + 'acorn-walk') };
    } catch (e) { /* next */ }
  }
  return null;
}
const parser = loadAcorn();

function send(obj) {
  const buf = Buffer.from(JSON.stringify(obj) + '\n');
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(EVT_FD, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN') continue;
      process.exit(3); // the daemon is gone
    }
  }
}

// process.stdout/stderr (and console, which writes to them) become events.
for (const name of ['stdout', 'stderr']) {
  const stream = process[name];
  const decoder = new StringDecoder('utf8');
  stream.write = function (chunk, encoding, cb) {
    if (typeof encoding === 'function') { cb = encoding; encoding = undefined; }
    const text = typeof chunk === 'string' ? chunk : decoder.write(Buffer.from(chunk));
    if (text) send({ type: name, text });
    if (typeof cb === 'function') process.nextTick(cb);
    return true;
  };
}

function cellRequire() {
  return createRequire(path.join(process.cwd(), '[cell]'));
}

// import() for cells: bare names resolve from the cell's cwd (its node_modules), like a
// script there would; node's own modules and URLs go straight through.
async function spaceImport(spec) {
  if (typeof spec === 'string' && !spec.startsWith('node:') && !builtinModules.includes(spec) &&
      !/^[a-z]+:/i.test(spec)) {
    if (spec.startsWith('.') || spec.startsWith('/')) {
      return import(pathToFileURL(path.resolve(process.cwd(), spec)).href);
    }
    try {
      return import(pathToFileURL(cellRequire().resolve(spec)).href);
    } catch (e) { /* ESM-only packages: let import() resolve it */ }
  }
  return import(spec);
}
Object.defineProperty(globalThis, '__spaceImport', { value: spaceImport, writable: false });
Object.defineProperty(globalThis, 'require', {
  get() { return cellRequire(); }, configurable: true,
});

function patternNames(node, out) {
  if (!node) return out;
  switch (node.type) {
    case 'Identifier': out.push(node.name); break;
    case 'ObjectPattern':
      for (const p of node.properties) patternNames(p.type === 'RestElement' ? p : p.value, out);
      break;
    case 'ArrayPattern': for (const e of node.elements) patternNames(e, out); break;
    case 'AssignmentPattern': patternNames(node.left, out); break;
    case 'RestElement': patternNames(node.argument, out); break;
  }
  return out;
}

// Returns the rewritten cell (an async IIFE resolving to {value}) or null to run it as is.
function rewrite(code) {
  if (!parser) return null;
  let ast;
  for (const sourceType of ['script', 'module']) {
    try {
      ast = parser.acorn.parse(code, {
        ecmaVersion: 'latest', sourceType, allowAwaitOutsideFunction: true,
        allowHashBang: true, allowReturnOutsideFunction: false,
      });
      break;
    } catch (e) { /* try the next, then give up */ }
  }
  if (!ast) return null;
  // import(...) anywhere becomes __spaceImport(...) (vm scripts have no import() of their
  // own without --experimental-vm-modules). src() is a slice of the cell with that applied.
  const dynImports = [];
  parser.walk.full(ast, (node) => {
    if (node.type === 'ImportExpression') dynImports.push(node.start);
  });
  dynImports.sort((x, y) => x - y);
  const src = (start, end) => {
    let out = '';
    let at = start;
    for (const p of dynImports) {
      if (p < start || p >= end) continue;
      out += code.slice(at, p) + '__spaceImport';
      at = p + 6;
    }
    return out + code.slice(at, end);
  };
  // Top-level statements to replace: [start, end, text], in order, never overlapping.
  const edits = [];
  const hoisted = new Set();
  const functions = [];
  let imports = 0;
  const body = ast.body;
  body.forEach((stmt, i) => {
    let node = stmt;
    let from = stmt.start;
    if ((node.type === 'ExportNamedDeclaration' || node.type === 'ExportDefaultDeclaration') &&
        node.declaration) {
      node = node.declaration;
    }
    const last = i === body.length - 1;
    if (node.type === 'VariableDeclaration') {
      const parts = [];
      for (const d of node.declarations) {
        patternNames(d.id, []).forEach((n) => hoisted.add(n));
        if (d.init) {
          parts.push('(' + src(d.id.start, d.id.end) + ' = ' + src(d.init.start, d.init.end) + ')');
        } else if (node.kind !== 'var') {
          parts.push('(' + src(d.id.start, d.id.end) + ' = undefined)');
        }
      }
      edits.push([from, stmt.end, parts.length ? 'void (' + parts.join(', ') + ');' : ';']);
    } else if (node.type === 'FunctionDeclaration' && node.id) {
      // Hoisted like a declaration: assigned before the rest of the cell runs.
      hoisted.add(node.id.name);
      functions.push(node.id.name + ' = ' + src(node.start, node.end) + ';');
      edits.push([from, stmt.end, '']);
    } else if (node.type === 'ClassDeclaration' && node.id) {
      hoisted.add(node.id.name);
      edits.push([from, stmt.end, node.id.name + ' = ' + src(node.start, node.end) + ';']);
    } else if (node.type === 'ImportDeclaration') {
      const tmp = '__spaceModule' + (imports++);
      const assigns = [];
      for (const s of node.specifiers) {
        hoisted.add(s.local.name);
        if (s.type === 'ImportNamespaceSpecifier') assigns.push(`${s.local.name} = ${tmp};`);
        else if (s.type === 'ImportDefaultSpecifier') assigns.push(`${s.local.name} = ${tmp}.default;`);
        else {
          const name = s.imported.type === 'Literal' ? s.imported.value : s.imported.name;
          assigns.push(`${s.local.name} = ${tmp}[${JSON.stringify(name)}];`);
        }
      }
      edits.push([from, stmt.end, `{ const ${tmp} = await __spaceImport(` +
        `${code.slice(node.source.start, node.source.end)}); ${assigns.join(' ')} }`]);
    } else if (node.type.startsWith('Export')) {
      edits.push([from, stmt.end, '']);
    } else if (last && node.type === 'ExpressionStatement' && !node.directive) {
      edits.push([from, stmt.end,
        'return { value: (' + src(node.expression.start, node.expression.end) + ') };']);
    }
  });
  let out = '';
  let at = 0;
  for (const [start, end, text] of edits) {
    out += src(at, start) + text;
    at = end;
  }
  out += src(at, code.length);
  const names = [...hoisted];
  return (names.length ? 'var ' + names.join(', ') + ';\n' : '') +
    '(async () => {' + functions.join('\n') + '\n' + out + '\n})()';
}

let cellCount = 0;
let interruptCurrent = null;

class Interrupted extends Error {}

process.on('SIGINT', () => {
  if (interruptCurrent) interruptCurrent();
});
process.on('uncaughtException', (e) => {
  send({ type: 'stderr', text: 'Uncaught ' + (e && e.stack ? e.stack : String(e)) + '\n' });
});
process.on('unhandledRejection', (e) => {
  send({ type: 'stderr', text: 'Unhandled promise rejection: ' + (e && e.stack ? e.stack : String(e)) + '\n' });
});

function display(value) {
  if (value === undefined) return null;
  if (value !== null && typeof value === 'object' &&
      typeof value[Symbol.for('Jupyter.display')] === 'function') {
    try {
      const bundle = value[Symbol.for('Jupyter.display')]();
      if (bundle && typeof bundle === 'object') return bundle;
    } catch (e) { /* fall back to text */ }
  }
  return { 'text/plain': typeof value === 'string' ? value : util.inspect(value, { depth: 6 }) };
}

function cleanStack(e) {
  if (!e || typeof e.stack !== 'string') return '';
  return e.stack.split('\n')
    .filter((l) => !l.includes(__filename) && !/\(node:(vm|internal)/.test(l) &&
                   !/at node:(vm|internal)/.test(l))
    .join('\n');
}

function errorEvent(e) {
  if (e instanceof Interrupted || (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
    return { type: 'error', name: 'KeyboardInterrupt', value: 'Execution interrupted', traceback: '' };
  }
  if (e instanceof Error || (e && typeof e === 'object' && 'message' in e)) {
    return { type: 'error', name: String(e.name || 'Error'), value: String(e.message),
             traceback: cleanStack(e) };
  }
  return { type: 'error', name: 'Error', value: util.inspect(e), traceback: '' };
}

async function runCell(req) {
  const filename = `<cell-${++cellCount}>`;
  const saved = {};
  for (const [k, v] of Object.entries(req.env || {})) {
    saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined;
    process.env[k] = v;
  }
  try {
    const rewritten = rewrite(req.code);
    let script = null;
    if (rewritten !== null) {
      try {
        script = new vm.Script(rewritten, { filename });
      } catch (e) { script = null; /* our rewrite is at fault: run the cell as written */ }
    }
    const isAsync = script !== null;
    if (!isAsync) script = new vm.Script(req.code, { filename });
    let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (isAsync) {
      const interrupted = new Promise((_, reject) => {
        interruptCurrent = () => reject(new Interrupted());
      });
      const r = await Promise.race([value, interrupted]);
      value = r ? r.value : undefined;
    }
    const bundle = display(value);
    if (bundle) send({ type: 'result', data: bundle, main: true });
  } catch (e) {
    send(errorEvent(e));
  } finally {
    interruptCurrent = null;
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
    send({ type: 'done' });
  }
}

const queue = [];
let running = false;
async function pump() {
  if (running) return;
  running = true;
  while (queue.length) {
    const req = queue.shift();
    if (req.type === 'execute') await runCell(req);
  }
  running = false;
}

const input = new net.Socket({ fd: REQ_FD, readable: true, writable: false });
let pending = '';
input.setEncoding('utf8');
input.on('data', (chunk) => {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    try { queue.push(JSON.parse(line)); } catch (e) { /* ignore a bad line */ }
  }
  pump();
});
// The daemon went away: so do we.
input.on('end', () => process.exit(0));
input.on('error', () => process.exit(0));
