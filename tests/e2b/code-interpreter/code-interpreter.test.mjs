// Drives the unmodified E2B code-interpreter JavaScript SDK (@e2b/code-interpreter, pinned
// with the e2b it builds on by package-lock.json) against a real spaced, configured only by
// the environment an E2B user would set:
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT E2B_API_KEY=<key>
// The sandbox comes from the SDK's default template (code-interpreter-v1, which spaced maps
// to its built-in code-interpreter template); its calls reach the template's kernel runner
// (space-kernel, port 49999) through spaced. tests/e2b/e2b_sdk_test.cc runs it under ctest
// (E2bCodeInterpreterSdkTest) once the template is present.
// (The node process lingers ~60 s after the last test: the SDK's runCode leaves its request
// timer running when the server answers an error status, as the 400 and 404 cases here do.)
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'

import { NotFoundError, Sandbox, TimeoutError } from '@e2b/code-interpreter'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} must be set`)
}
const RUN = `ci-${process.pid}-${Date.now()}`
const created = []

async function create(opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 600_000, ...opts, metadata: { suite: RUN } })
  created.push(sbx)
  return sbx
}

after(async () => {
  for (const s of created) await s.kill().catch(() => {})
})

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

describe('@e2b/code-interpreter against spaced', () => {
  let sbx
  before(async () => {
    sbx = await create()
  })

  test('Sandbox.create() uses the default template and is running', async () => {
    assert.match(sbx.sandboxId, /^sb-/)
    assert.equal(await sbx.isRunning(), true)
    const info = await sbx.getInfo()
    assert.match(info.templateId, /code-interpreter/)
  })

  test('runCode keeps state between calls (python, the default)', async () => {
    const first = await sbx.runCode('x = 41\ndef inc(v):\n    return v + 1')
    assert.equal(first.error, undefined)
    assert.deepEqual(first.results, [])
    const second = await sbx.runCode('inc(x)')
    assert.equal(second.error, undefined)
    assert.equal(second.text, '42')
    assert.equal(second.results.length, 1)
    assert.equal(second.results[0].isMainResult, true)
    assert.ok(second.executionCount > first.executionCount, 'cell numbers grow')
  })

  test("runCode with language 'js' and 'javascript' share the javascript context", async () => {
    const a = await sbx.runCode('const a = 20; a * 2 + 1', { language: 'js' })
    assert.equal(a.error, undefined)
    assert.equal(a.text, '41')
    const b = await sbx.runCode('a + 22', { language: 'javascript' })
    assert.equal(b.error, undefined)
    assert.equal(b.text, '42')
    const c = await sbx.runCode('console.log("from node", process.version.startsWith("v"))', { language: 'js' })
    assert.deepEqual(c.logs.stdout, ['from node true\n'])
    // Python's state is its own.
    const py = await sbx.runCode("'a' in globals()")
    assert.equal(py.text, 'False')
  })

  test('onStdout and onStderr get the output as it comes, and logs keep it', async () => {
    const out = []
    const err = []
    const t0 = Date.now()
    const stamps = []
    const ex = await sbx.runCode(
      'import sys, time\nprint("one", flush=True)\ntime.sleep(0.8)\nprint("oops", file=sys.stderr, flush=True)\nprint("two")',
      {
        onStdout: (m) => { out.push(m.line); stamps.push(Date.now() - t0) },
        onStderr: (m) => { err.push(m.line); assert.equal(m.error, true) },
      },
    )
    assert.equal(ex.error, undefined)
    assert.deepEqual(out.join(''), 'one\ntwo\n')
    assert.deepEqual(err, ['oops\n'])
    assert.deepEqual(ex.logs.stdout.join(''), 'one\ntwo\n')
    assert.deepEqual(ex.logs.stderr, ['oops\n'])
    // Streamed: the first line arrived before the cell slept, not with the rest at the end.
    assert.ok(stamps[stamps.length - 1] - stamps[0] >= 500, `stdout streamed (${stamps})`)
  })

  test('a matplotlib chart comes back as a PNG result', async () => {
    const seen = []
    const ex = await sbx.runCode(
      'import matplotlib.pyplot as plt\nplt.figure(figsize=(3, 2))\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()',
      { onResult: (r) => seen.push(r) },
    )
    assert.equal(ex.error, undefined)
    assert.ok(ex.results.length >= 1)
    const png = ex.results[0].png
    assert.equal(typeof png, 'string')
    const bytes = Buffer.from(png, 'base64')
    assert.ok(bytes.subarray(0, 8).equals(PNG_MAGIC), 'a PNG image')
    assert.ok(bytes.length > 1000, `a real chart (${bytes.length} bytes)`)
    assert.equal(ex.results[0].isMainResult, false)
    assert.ok(ex.results[0].formats().includes('png'))
    assert.match(ex.results[0].text, /Figure/)
    assert.equal(seen.length, ex.results.length, 'onResult saw every result')
  })

  test('rich results: html and data from a DataFrame, json from a dict', async () => {
    const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    assert.equal(df.error, undefined)
    const r = df.results[0]
    assert.match(r.html, /<table/)
    assert.deepEqual(r.data, { a: [1, 2], b: ['x', 'y'] })
    const d = await sbx.runCode('{"k": [1, 2, 3]}')
    assert.deepEqual(d.results[0].json, { k: [1, 2, 3] })
  })

  test('an error carries the Python exception name, value and traceback', async () => {
    const errors = []
    const ex = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => errors.push(e) })
    assert.ok(ex.error, 'an error')
    assert.equal(ex.error.name, 'ZeroDivisionError')
    assert.equal(ex.error.value, 'division by zero')
    assert.match(ex.error.traceback, /ZeroDivisionError/)
    assert.match(ex.error.traceback, /return 1 \/ 0/)
    assert.equal(errors.length, 1)
    assert.equal(errors[0].name, 'ZeroDivisionError')
    const name = await sbx.runCode('undefined_name_here')
    assert.equal(name.error.name, 'NameError')
    // The context goes on after an error.
    assert.equal((await sbx.runCode('x')).text, '41')
    const js = await sbx.runCode('throw new RangeError("too far")', { language: 'js' })
    assert.equal(js.error.name, 'RangeError')
    assert.equal(js.error.value, 'too far')
  })

  test('envs are set for the cell only', async () => {
    const ex = await sbx.runCode('import os\nos.environ["SPACE_CI_VAR"]', { envs: { SPACE_CI_VAR: 'from-sdk' } })
    assert.equal(ex.text, 'from-sdk')
    const after = await sbx.runCode('import os\nos.environ.get("SPACE_CI_VAR", "unset")')
    assert.equal(after.text, 'unset')
  })

  test('contexts: create, run in, list, restart, remove', async () => {
    const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
    assert.equal(typeof ctx.id, 'string')
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/tmp')
    const r1 = await sbx.runCode('import os\ny = 7\nos.getcwd()', { context: ctx })
    assert.equal(r1.error, undefined)
    assert.equal(r1.text, '/tmp')
    assert.equal((await sbx.runCode('y * 6', { context: ctx })).text, '42')
    // The default context does not see it.
    assert.equal((await sbx.runCode("'y' in globals()")).text, 'False')

    const listed = await sbx.listCodeContexts()
    const mine = listed.find((c) => c.id === ctx.id)
    assert.ok(mine, `context ${ctx.id} listed in ${JSON.stringify(listed)}`)
    assert.equal(mine.language, 'python')
    assert.ok(listed.some((c) => c.language === 'javascript'), 'the default javascript context is listed')

    await sbx.restartCodeContext(ctx)
    const gone = await sbx.runCode('y', { context: ctx })
    assert.equal(gone.error?.name, 'NameError', 'restart cleared the state')
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp', 'same cwd')

    const jsCtx = await sbx.createCodeContext({ language: 'js' })
    assert.equal((await sbx.runCode('let z = 5; z', { context: jsCtx })).text, '5')
    await sbx.removeCodeContext(jsCtx.id)  // by id
    await sbx.removeCodeContext(ctx)       // by object
    const ids = (await sbx.listCodeContexts()).map((c) => c.id)
    assert.ok(!ids.includes(ctx.id) && !ids.includes(jsCtx.id), `removed contexts unlisted: ${ids}`)
    await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError)
  })

  test('context and language together are refused by the SDK; an unknown language by the server', async () => {
    const ctx = await sbx.createCodeContext()
    await assert.rejects(sbx.runCode('1', { context: ctx, language: 'python' }), /context or language/)
    await sbx.removeCodeContext(ctx)
    await assert.rejects(sbx.runCode('1', { language: 'cobol' }), /400/)
  })

  test('timeoutMs ends a long cell; the context is usable again', async () => {
    const t0 = Date.now()
    await assert.rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 }), TimeoutError)
    assert.ok(Date.now() - t0 < 10_000)
    // The client went away: spaced closes its side to the kernel runner at once, which
    // interrupts the cell, so the next one runs soon (not after the cell's next keepalive).
    const next = await sbx.runCode('x + 1', { timeoutMs: 30_000 })
    assert.equal(next.error, undefined)
    assert.equal(next.text, '42')
    assert.ok(Date.now() - t0 < 8_000, `the context was free again after ${Date.now() - t0} ms`)
  })

  test('ports named in E2b-Sandbox-Port follow the sandbox port rules', async () => {
    const url = process.env.E2B_SANDBOX_URL
    const call = (headers) => fetch(`${url}/contexts`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, ...headers } })
    const ok = await call({ 'E2b-Sandbox-Port': '49999' })  // public traffic: no credential needed
    assert.equal(ok.status, 200)
    assert.ok(Array.isArray(await ok.json()))
    const bad = await call({ 'E2b-Sandbox-Port': 'port' })
    assert.equal(bad.status, 400)
    await bad.body?.cancel()
    const closed = await call({ 'E2b-Sandbox-Port': '8099' })
    assert.equal(closed.status, 502)
    assert.match(await closed.text(), /nothing is listening on port 8099/)
  })

  test('allowPublicTraffic: false: the SDK sends its traffic token, and calls without one are refused', async () => {
    const priv = await create({ network: { allowPublicTraffic: false } })
    assert.ok(priv.trafficAccessToken, 'a traffic token')
    assert.equal((await priv.runCode('6 * 7')).text, '42')
    const ctx = await priv.createCodeContext()
    assert.ok((await priv.listCodeContexts()).some((c) => c.id === ctx.id))
    const url = process.env.E2B_SANDBOX_URL
    const headers = { 'E2b-Sandbox-Id': priv.sandboxId, 'E2b-Sandbox-Port': '49999' }
    const none = await fetch(`${url}/contexts`, { headers })
    assert.equal(none.status, 401)
    await none.body?.cancel()
    // Not the envd token either: ports take traffic tokens only.
    const envd = await fetch(`${url}/contexts`, { headers: { ...headers, 'X-Access-Token': priv.envdAccessToken } })
    assert.equal(envd.status, 401)
    await envd.body?.cancel()
    await priv.kill()
  })

  test('kill ends the sandbox; its code calls then fail', async () => {
    const other = await create()
    assert.equal((await other.runCode('6 * 7')).text, '42')
    assert.equal(await other.kill(), true)
    assert.equal(await other.isRunning(), false)
    await assert.rejects(other.runCode('1'))
    await assert.rejects(other.listCodeContexts())
  })
})
