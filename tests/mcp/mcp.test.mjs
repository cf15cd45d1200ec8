// Drives SPACE's MCP server with the official TypeScript client (@modelcontextprotocol/sdk,
// pinned by package-lock.json) against a real spaced, over both transports:
//   stdio  — the client spawns `space mcp` (SPACE_URL/SPACE_API_KEY in its environment);
//   HTTP   — streamable HTTP to POST /mcp, the operator key or a sandbox token as Bearer.
// Configured by the environment: SPACE_URL, SPACE_API_KEY, SPACE_CLI (the `space` binary).
// Run: node --test mcp.test.mjs   (tests/mcp/mcp_client_test.cc does it under ctest)
import assert from 'node:assert/strict'
import http from 'node:http'
import { after, before, describe, test } from 'node:test'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpError } from '@modelcontextprotocol/sdk/types.js'

for (const v of ['SPACE_URL', 'SPACE_API_KEY', 'SPACE_CLI']) {
  if (!process.env[v]) throw new Error(`${v} must be set`)
}
const API = process.env.SPACE_URL
const KEY = process.env.SPACE_API_KEY
const RUN = `mcp-${process.pid}-${Date.now()}`

const TOOLS = [
  'create_sandbox', 'delete_sandbox', 'expose_port', 'get_operation', 'get_sandbox',
  'list_files', 'list_sandboxes', 'read_file', 'run_command', 'snapshot_sandbox', 'write_file',
]

// Plain HTTP to spaced's API (for set-up and checks the tools do not cover).
async function rest(method, path, body, headers = {}) {
  const r = await fetch(API + path, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : null }
}

// A raw POST /mcp, to check the transport's own answers.
async function postMcp(body, headers = {}) {
  const r = await fetch(`${API}/mcp`, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${KEY}`,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
  const text = await r.text()
  return { status: r.status, headers: r.headers, text, json: text ? JSON.parse(text) : null }
}

// The JSON a tool's text content carries (and its structuredContent, which must agree).
function payload(result) {
  assert.equal(result.isError, false, `tool error: ${JSON.stringify(result.content)}`)
  assert.equal(result.content[0].type, 'text')
  const j = JSON.parse(result.content[0].text)
  if (result.structuredContent) assert.deepEqual(result.structuredContent, j)
  return j
}

function toolError(result) {
  assert.equal(result.isError, true, `expected a tool error, got ${JSON.stringify(result.content)}`)
  return result.content[0].text
}

async function rejectsWithCode(promise, code, pattern) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof McpError, `not an McpError: ${e}`)
    assert.equal(e.code, code, e.message)
    if (pattern) assert.match(e.message, pattern)
    return true
  })
}

// GET through spaced's port to a sandbox port, as a browser would with the URL's Host.
function getThrough(url) {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: u.port, path: `/hostname${u.search}`, headers: { Host: u.host } },
      (res) => {
        let body = ''
        res.on('data', (d) => (body += d))
        res.on('end', () => resolve({ status: res.statusCode, body }))
      },
    )
    req.on('error', reject)
    req.end()
  })
}

const created = new Set()
after(async () => {
  for (const id of created) await rest('DELETE', `/v1/sandboxes/${id}?wait=60s`).catch(() => {})
})

async function createWith(client, args = {}) {
  const r = await client.callTool({
    name: 'create_sandbox',
    arguments: { template: 'base', runtime: 'oci', timeout: 600, metadata: { suite: RUN }, ...args },
  })
  const text = r.content[0].text
  const j = payload(r)
  assert.match(j.id, /^sb-/)
  assert.ok(text.includes(j.id), 'the text names the new sandbox')
  assert.equal(j.state, 'running', text)
  created.add(j.id)
  return j
}

// The tool suite both transports run, on a client connected either way.
async function exerciseTools(client, { full }) {
  const tools = await client.listTools()
  assert.deepEqual(tools.tools.map((t) => t.name).sort(), TOOLS)
  for (const t of tools.tools) assert.equal(t.inputSchema.type, 'object', t.name)
  await client.ping()

  const sb = await createWith(client)
  const id = sb.id

  // run_command: output, exit code, cwd, env, timeout.
  let r = payload(await client.callTool({
    name: 'run_command',
    arguments: { sandbox_id: id, command: 'echo out-$GREETING; pwd; echo err >&2', cwd: '/tmp', env: { GREETING: 'hi' } },
  }))
  assert.equal(r.exit_code, 0)
  assert.equal(r.stdout, 'out-hi\n/tmp\n')
  assert.equal(r.stderr, 'err\n')
  r = payload(await client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: 'exit 3' } }))
  assert.equal(r.exit_code, 3, 'a non-zero exit is a result, not a tool error')

  // Files: text, binary (base64), listing.
  r = payload(await client.callTool({
    name: 'write_file', arguments: { sandbox_id: id, path: '/tmp/w/hello.txt', content: 'héllo\n' },
  }))
  assert.equal(r.size, 7)
  r = payload(await client.callTool({ name: 'read_file', arguments: { sandbox_id: id, path: '/tmp/w/hello.txt' } }))
  assert.equal(r.content, 'héllo\n')
  assert.equal(r.encoding, 'utf-8')
  const bytes = Buffer.from([0, 1, 2, 255, 254, 10])
  payload(await client.callTool({
    name: 'write_file',
    arguments: { sandbox_id: id, path: '/tmp/w/bin', content: bytes.toString('base64'), encoding: 'base64' },
  }))
  r = payload(await client.callTool({ name: 'read_file', arguments: { sandbox_id: id, path: '/tmp/w/bin' } }))
  assert.equal(r.encoding, 'base64')
  assert.deepEqual(Buffer.from(r.content, 'base64'), bytes)
  r = payload(await client.callTool({ name: 'list_files', arguments: { sandbox_id: id, path: '/tmp/w' } }))
  assert.deepEqual(r.entries.map((e) => e.name).sort(), ['bin', 'hello.txt'])
  assert.equal(r.entries.find((e) => e.name === 'bin').size, 6)

  // list_sandboxes sees it (filtered by metadata).
  r = payload(await client.callTool({ name: 'list_sandboxes', arguments: { metadata: { suite: RUN } } }))
  assert.ok(r.sandboxes.some((s) => s.id === id))

  // Tool errors: the tool ran, and says why it failed.
  assert.match(toolError(await client.callTool({
    name: 'read_file', arguments: { sandbox_id: id, path: '/no/such/file' },
  })), /read_file failed: .*not_found/)
  assert.match(toolError(await client.callTool({
    name: 'get_sandbox', arguments: { sandbox_id: 'sb-doesnotexist' },
  })), /get_sandbox failed: .*not_found/)

  // Protocol errors: unknown tool, bad arguments, unknown method.
  await rejectsWithCode(client.callTool({ name: 'no_such_tool', arguments: {} }), -32602, /Unknown tool/)
  await rejectsWithCode(client.callTool({ name: 'run_command', arguments: { sandbox_id: id } }), -32602, /command is required/)
  await rejectsWithCode(client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: 'true', timeout: 'x' } }), -32602, /timeout must be a number/)
  await rejectsWithCode(client.listResources(), -32601)

  if (full) {
    // A command that outlives its timeout is killed: exit 124.
    r = payload(await client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: 'sleep 30', timeout: 1 } }))
    assert.equal(r.exit_code, 124)
    assert.equal(r.timed_out, true)

    // expose_port: the URL reaches a server in the sandbox.
    payload(await client.callTool({
      name: 'run_command',
      arguments: { sandbox_id: id, command: 'mkdir -p /www && echo port-ok > /www/hostname && busybox httpd -p 8080 -h /www' },
    }))
    r = payload(await client.callTool({ name: 'expose_port', arguments: { sandbox_id: id, port: 8080 } }))
    assert.match(r.url, new RegExp(`^http://8080-${id}\\.`))
    let got
    for (let i = 0; i < 50; i++) {
      got = await getThrough(r.url)
      if (got.status === 200) break
      await new Promise((res) => setTimeout(res, 200))
    }
    assert.equal(got.status, 200, got.body)
    assert.equal(got.body, 'port-ok\n')

    // snapshot_sandbox: a snapshot a new sandbox could start from.
    r = payload(await client.callTool({ name: 'snapshot_sandbox', arguments: { sandbox_id: id } }))
    assert.match(r.snapshot_id, /^snap-/)
    const snap = await rest('GET', `/v1/snapshots/${r.snapshot_id}`)
    assert.equal(snap.status, 200)
    assert.equal(snap.body.sandbox_id, id)

    // network: false gives a sandbox without network.
    const offline = await createWith(client, { network: false })
    assert.equal(offline.sandbox.network.mode, 'none', JSON.stringify(offline.sandbox.network))
    payload(await client.callTool({ name: 'delete_sandbox', arguments: { sandbox_id: offline.id } }))
    created.delete(offline.id)
  }

  // delete_sandbox: gone, and tools on it are tool errors.
  r = payload(await client.callTool({ name: 'delete_sandbox', arguments: { sandbox_id: id } }))
  assert.equal(r.deleted, true)
  created.delete(id)
  assert.match(toolError(await client.callTool({
    name: 'run_command', arguments: { sandbox_id: id, command: 'true' },
  })), /run_command failed/)
}

describe('stdio: space mcp', () => {
  let client
  before(async () => {
    client = new Client({ name: 'space-mcp-test', version: '1.0.0' })
    const transport = new StdioClientTransport({
      command: process.env.SPACE_CLI,
      args: ['mcp'],
      env: { PATH: process.env.PATH, SPACE_URL: API, SPACE_API_KEY: KEY },
      stderr: 'pipe',
    })
    await client.connect(transport)
  })
  after(async () => client?.close())

  test('initialize: server info and tools capability', () => {
    assert.equal(client.getServerVersion().name, 'space')
    assert.ok(client.getServerCapabilities().tools)
  })

  test('every tool, tool errors and protocol errors', { timeout: 300_000 }, async () => {
    await exerciseTools(client, { full: true })
  })

  test('a wrong API key is a tool error, not a crash', async () => {
    const bad = new Client({ name: 'space-mcp-test', version: '1.0.0' })
    await bad.connect(new StdioClientTransport({
      command: process.env.SPACE_CLI,
      args: ['mcp'],
      env: { PATH: process.env.PATH, SPACE_URL: API, SPACE_API_KEY: 'sk-wrong' },
      stderr: 'pipe',
    }))
    assert.match(toolError(await bad.callTool({ name: 'list_sandboxes', arguments: {} })), /unauthenticated/)
    await bad.close()
  })
})

describe('streamable HTTP: POST /mcp', () => {
  function connect(token, extra = {}) {
    const client = new Client({ name: 'space-mcp-test', version: '1.0.0' })
    const transport = new StreamableHTTPClientTransport(new URL(`${API}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}`, ...extra } },
    })
    return client.connect(transport).then(() => client)
  }

  test('every tool with the operator key', { timeout: 300_000 }, async () => {
    const client = await connect(KEY)
    assert.equal(client.getServerVersion().name, 'space')
    await exerciseTools(client, { full: false })
    await client.close()
  })

  test('a sandbox token reaches its own sandbox only', { timeout: 300_000 }, async () => {
    const op = await connect(KEY)
    const mine = await createWith(op)
    const other = await createWith(op)
    const tok = await rest('POST', `/v1/sandboxes/${mine.id}/tokens`, {})
    assert.equal(tok.status, 201, JSON.stringify(tok.body))
    const client = await connect(tok.body.token)
    const r = payload(await client.callTool({ name: 'run_command', arguments: { sandbox_id: mine.id, command: 'echo mine' } }))
    assert.equal(r.stdout, 'mine\n')
    assert.match(toolError(await client.callTool({ name: 'run_command', arguments: { sandbox_id: other.id, command: 'true' } })), /permission_denied/)
    assert.match(toolError(await client.callTool({ name: 'list_sandboxes', arguments: {} })), /permission_denied/)
    assert.match(toolError(await client.callTool({ name: 'create_sandbox', arguments: {} })), /permission_denied/)
    await client.close()
    for (const sb of [mine, other]) {
      payload(await op.callTool({ name: 'delete_sandbox', arguments: { sandbox_id: sb.id } }))
      created.delete(sb.id)
    }
    await op.close()
  })

  test('the transport: auth, Origin, methods, framing', async () => {
    const ping = { jsonrpc: '2.0', id: 1, method: 'ping' }
    let r = await postMcp(ping)
    assert.equal(r.status, 200)
    assert.match(r.headers.get('content-type'), /^application\/json/)
    assert.deepEqual(r.json, { jsonrpc: '2.0', id: 1, result: {} })
    // No credential, a wrong one.
    r = await postMcp(ping, { Authorization: '' })
    assert.equal(r.status, 401)
    r = await postMcp(ping, { Authorization: 'Bearer sk-wrong' })
    assert.equal(r.status, 401)
    // Origins: loopback is fine, anything else is refused before anything else happens.
    r = await postMcp(ping, { Origin: 'http://localhost:5173' })
    assert.equal(r.status, 200)
    r = await postMcp(ping, { Origin: 'http://127.0.0.1:8000' })
    assert.equal(r.status, 200)
    // An origin the operator allowed (spaced --mcp-allow-origin), exactly.
    r = await postMcp(ping, { Origin: 'https://tools.example.test' })
    assert.equal(r.status, 200)
    for (const origin of ['https://evil.example', 'null', 'http://localhost.evil.example', 'http://127.0.0.1.evil.example',
                          'http://tools.example.test', 'https://tools.example.test:8443', 'https://x.tools.example.test']) {
      r = await postMcp(ping, { Origin: origin })
      assert.equal(r.status, 403, origin)
      assert.equal(r.json.error.code, -32600)
    }
    // GET (SSE) and DELETE (sessions) are not offered.
    for (const method of ['GET', 'DELETE']) {
      const g = await fetch(`${API}/mcp`, { method, headers: { Authorization: `Bearer ${KEY}`, Accept: 'text/event-stream' } })
      assert.equal(g.status, 405, method)
      assert.equal(g.headers.get('allow'), 'POST')
    }
    // Framing: not JSON, not a message, wrong content type, unknown protocol version.
    r = await postMcp('{"jsonrpc": "2.0", "id": 1, "method": "ping"')
    assert.equal(r.status, 400)
    assert.equal(r.json.error.code, -32700)
    r = await postMcp('17')
    assert.equal(r.status, 400)
    assert.equal(r.json.error.code, -32600)
    r = await postMcp(ping, { 'Content-Type': 'text/plain' })
    assert.equal(r.status, 415)
    r = await postMcp(ping, { 'MCP-Protocol-Version': '1999-01-01' })
    assert.equal(r.status, 400)
    r = await postMcp(ping, { 'MCP-Protocol-Version': '2025-06-18' })
    assert.equal(r.status, 200)
    // A notification is accepted without an answer.
    r = await postMcp({ jsonrpc: '2.0', method: 'notifications/initialized' })
    assert.equal(r.status, 202)
    assert.equal(r.text, '')
    // JSON-RPC errors are answers (200) with the error inside.
    r = await postMcp({ jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'nope' } })
    assert.equal(r.status, 200)
    assert.equal(r.json.error.code, -32602)
    r = await postMcp({ jsonrpc: '2.0', id: 2, method: 'no/such/method' })
    assert.equal(r.json.error.code, -32601)
    r = await postMcp([ping, { jsonrpc: '2.0', id: 3, method: 'tools/list' }])
    assert.equal(r.json.length, 2)
    // Garbage of every kind left spaced serving.
    for (const junk of ['', '[]', '[1,2]', '{"jsonrpc":"2.0","id":null,"method":"ping"}', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"sandbox_id":"sb-x","command":"","timeout":-1}}}', '['.repeat(10000)]) {
      r = await postMcp(junk)
      assert.ok(r.status === 200 || r.status === 400, `${junk.slice(0, 40)}: ${r.status}`)
    }
    const h = await fetch(`${API}/healthz`)
    assert.equal(h.status, 200)
  })
})
