// Drives the unmodified E2B JavaScript SDK (package-lock.json pins it) against a real spaced:
// sandboxes, commands, files, pty, lifecycle and listing, bad input, volumes. The rest is in
// e2b_platform.test.mjs; what both share, and the environment they read, in suite.mjs.
// Run: node --test --test-concurrency=1 e2b.test.mjs e2b_platform.test.mjs
// (tests/e2b/e2b_sdk_test.cc does it under ctest)
import assert from 'node:assert/strict'
import http from 'node:http'
import https from 'node:https'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'

import {
  API,
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  MAX_FILE_BYTES,
  NotFoundError,
  RUN,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  SDK_VERSION,
  TimeoutError,
  Volume,
  VolumeError,
  api,
  create,
  created,
  sdkAtLeast,
  waitFor,
} from './suite.mjs'

describe('sandbox', () => {
  let sbx
  before(async () => {
    sbx = await create({ metadata: { role: 'main' }, envs: { GREETING: 'hello from envs' } })
  })

  test('create returns a running sandbox with a SPACE id and the envs applied', async () => {
    assert.match(sbx.sandboxId, /^sb-/)
    assert.equal(await sbx.isRunning(), true)
    const r = await sbx.commands.run('echo "$GREETING"')
    assert.equal(r.stdout, 'hello from envs\n')
  })

  test('getInfo reports template, metadata, state and the timeout', async () => {
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { suite: RUN, role: 'main' })
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 500_000 && left <= 601_000, `endAt ${info.endAt.toISOString()}`)
  })

  test('setTimeout moves the end', async () => {
    await sbx.setTimeout(1_200_000)
    const info = await sbx.getInfo()
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 1_100_000 && left <= 1_201_000, `endAt ${info.endAt.toISOString()}`)
  })

  test('commands.run in the foreground: stdout, stderr, exit code', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; printf "%s" "$0"')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stderr, 'err\n')
    assert.match(r.stdout, /^out\n/)
    const u = await sbx.commands.run('id -u', { user: 'root', cwd: '/tmp' })
    assert.equal(u.stdout, '0\n')
    const pwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
    assert.equal(pwd.stdout, '/tmp\n')
  })

  test('a non-zero exit raises CommandExitError with the output', async () => {
    await assert.rejects(sbx.commands.run('echo partial; echo oops >&2; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`)
      assert.equal(e.exitCode, 3)
      assert.equal(e.stdout, 'partial\n')
      assert.equal(e.stderr, 'oops\n')
      return true
    })
  })

  test('background commands, callbacks and wait()', async () => {
    const out = []
    const err = []
    const h = await sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.05; done', {
      background: true,
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    })
    assert.ok(h.pid > 0)
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'o1\no2\no3\n')
    assert.equal(out.join(''), 'o1\no2\no3\n')
    assert.equal(err.join(''), 'e1\ne2\ne3\n')
  })

  test('sendStdin and closeStdin', async () => {
    const h = await sbx.commands.run('read line; echo "got:$line"; cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'typed line\n')
    await h.sendStdin('more\n')
    await h.closeStdin()
    const r = await h.wait()
    assert.equal(r.stdout, 'got:typed line\nmore\n')
  })

  test('commands.list and kill', async () => {
    const h = await sbx.commands.run('sleep 120', { background: true })
    const list = await sbx.commands.list()
    const p = list.find((x) => x.pid === h.pid)
    assert.ok(p, `pid ${h.pid} not in ${JSON.stringify(list)}`)
    assert.ok(p.args.includes('sleep 120'), JSON.stringify(p))
    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(h.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`)
      assert.equal(e.exitCode, -1)
      assert.match(e.error, /killed/)
      return true
    })
    await waitFor(async () => !(await sbx.commands.list()).some((x) => x.pid === h.pid), 'the list to drop it')
    // A killed process is gone: kill says so, input is refused with the SDK's NotFoundError.
    assert.equal(await sbx.commands.kill(h.pid), false)
    await assert.rejects(sbx.commands.sendStdin(h.pid, 'x'), NotFoundError)
  })

  test('files: write and read text, bytes, several files, octet-stream', async () => {
    const info = await sbx.files.write('/tmp/e2b/hello.txt', 'hello, files\n')
    assert.equal(info.path, '/tmp/e2b/hello.txt')
    assert.equal(info.name, 'hello.txt')
    assert.equal(await sbx.files.read('/tmp/e2b/hello.txt'), 'hello, files\n')

    const bin = new Uint8Array(256 * 3)
    for (let i = 0; i < bin.length; i++) bin[i] = (i * 7) % 256
    await sbx.files.write('/tmp/e2b/bin.dat', bin.buffer)
    assert.deepEqual(await sbx.files.read('/tmp/e2b/bin.dat', { format: 'bytes' }), bin)

    const many = await sbx.files.write([
      { path: '/tmp/e2b/many/a.txt', data: 'A' },
      { path: '/tmp/e2b/many/b.txt', data: new Blob(['BB']) },
    ])
    assert.deepEqual(many.map((f) => f.path).sort(), ['/tmp/e2b/many/a.txt', '/tmp/e2b/many/b.txt'])
    assert.equal(await sbx.files.read('/tmp/e2b/many/a.txt'), 'A')
    assert.equal(await sbx.files.read('/tmp/e2b/many/b.txt'), 'BB')

    await sbx.files.write('/tmp/e2b/octet.txt', 'via octet-stream', { useOctetStream: true })
    assert.equal(await sbx.files.read('/tmp/e2b/octet.txt'), 'via octet-stream')

    // Larger than one agent round trip (2 MiB) both ways, and an empty file.
    const big = new Uint8Array(5 * 1024 * 1024 + 123)
    for (let i = 0; i < big.length; i++) big[i] = (i * 31 + (i >> 12)) % 251
    await sbx.files.write('/tmp/e2b/big.dat', big)
    await sbx.files.write('/tmp/e2b/big2.dat', big, { useOctetStream: true })
    assert.deepEqual(await sbx.files.read('/tmp/e2b/big.dat', { format: 'bytes' }), big)
    assert.deepEqual(await sbx.files.read('/tmp/e2b/big2.dat', { format: 'bytes' }), big)
    await sbx.files.write('/tmp/e2b/empty.txt', '')
    assert.equal(await sbx.files.read('/tmp/e2b/empty.txt'), '')
    const sum = await sbx.commands.run('wc -c < /tmp/e2b/big.dat')
    assert.equal(sum.stdout.trim(), String(big.length))
  })

  test('files: gzip content encoding both ways', { skip: !sdkAtLeast('2.19.0') && `SDK ${SDK_VERSION} has no gzip option` }, async () => {
    const info = await sbx.files.write('/tmp/e2b/gz.txt', 'written with gzip\n', { gzip: true })
    assert.equal(info.path, '/tmp/e2b/gz.txt')
    assert.equal(await sbx.files.read('/tmp/e2b/gz.txt', { gzip: true }), 'written with gzip\n')
    assert.equal(await sbx.files.read('/tmp/e2b/gz.txt'), 'written with gzip\n')
    assert.equal((await sbx.commands.run('cat /tmp/e2b/gz.txt')).stdout, 'written with gzip\n')
    const many = await sbx.files.write(
      [
        { path: '/tmp/e2b/gz/1.txt', data: 'one' },
        { path: '/tmp/e2b/gz/2.txt', data: 'two' },
      ],
      { gzip: true },
    )
    assert.equal(many.length, 2)
    assert.equal(await sbx.files.read('/tmp/e2b/gz/2.txt', { gzip: true }), 'two')
    // Larger than one agent round trip, compressible and not: the stream is compressed as
    // it is read, and decompressed as it arrives.
    const big = new Uint8Array(5 * 1024 * 1024 + 77)
    for (let i = 0; i < big.length; i++) big[i] = i % 3 ? (i * 131) % 251 : 0
    await sbx.files.write('/tmp/e2b/gz-big.dat', big, { gzip: true })
    assert.deepEqual(await sbx.files.read('/tmp/e2b/gz-big.dat', { format: 'bytes', gzip: true }), big)
    assert.equal((await sbx.commands.run('wc -c < /tmp/e2b/gz-big.dat')).stdout.trim(), String(big.length))
    // On the wire: the download really is gzip (fetch would hide it, so node:http, or
    // node:https when the suite talks to spaced over TLS).
    const wire = await new Promise((resolve, reject) => {
      const u = new URL(`/files?path=${encodeURIComponent('/tmp/e2b/gz-big.dat')}`, process.env.E2B_SANDBOX_URL)
      ;(u.protocol === 'https:' ? https : http)
        .get(u, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken, 'Accept-Encoding': 'gzip' } }, (res) => {
          const parts = []
          res.on('data', (d) => parts.push(d))
          res.on('end', () => resolve({ status: res.statusCode, enc: res.headers['content-encoding'], body: Buffer.concat(parts) }))
        })
        .on('error', reject)
    })
    assert.equal(wire.status, 200)
    assert.equal(wire.enc, 'gzip')
    assert.ok(wire.body.length < big.length, `${wire.body.length} compressed bytes`)
    const { gunzipSync } = await import('node:zlib')
    assert.deepEqual(new Uint8Array(gunzipSync(wire.body)), big)
  })

  test('files: list, exists, makeDir, rename, remove, getInfo', async () => {
    assert.equal(await sbx.files.makeDir('/tmp/e2b/dir/sub'), true)
    assert.equal(await sbx.files.makeDir('/tmp/e2b/dir/sub'), false)
    await sbx.files.write('/tmp/e2b/dir/f.txt', '12345')
    const entries = await sbx.files.list('/tmp/e2b/dir')
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
    assert.deepEqual(Object.keys(byName).sort(), ['f.txt', 'sub'])
    assert.equal(byName['f.txt'].type, 'file')
    assert.equal(byName['f.txt'].size, 5)
    assert.equal(byName['f.txt'].path, '/tmp/e2b/dir/f.txt')
    assert.equal(byName['f.txt'].permissions, '-rw-r--r--')
    assert.ok(byName['f.txt'].modifiedTime instanceof Date)
    assert.equal(byName.sub.type, 'dir')
    const deep = await sbx.files.list('/tmp/e2b/dir', { depth: 2 })
    assert.ok(deep.some((e) => e.path === '/tmp/e2b/dir/sub'))

    assert.equal(await sbx.files.exists('/tmp/e2b/dir/f.txt'), true)
    assert.equal(await sbx.files.exists('/tmp/e2b/dir/nope'), false)
    const moved = await sbx.files.rename('/tmp/e2b/dir/f.txt', '/tmp/e2b/dir/g.txt')
    assert.equal(moved.path, '/tmp/e2b/dir/g.txt')
    assert.equal(await sbx.files.exists('/tmp/e2b/dir/f.txt'), false)
    assert.equal((await sbx.files.getInfo('/tmp/e2b/dir/g.txt')).size, 5)
    await sbx.files.remove('/tmp/e2b/dir')
    assert.equal(await sbx.files.exists('/tmp/e2b/dir'), false)
    await assert.rejects(sbx.files.read('/tmp/e2b/dir/g.txt'), FileNotFoundError)
    await assert.rejects(sbx.files.list('/tmp/e2b/no-such-dir'), FileNotFoundError)
  })

  test('pty: create, type, resize, exit', async () => {
    let out = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d)) })
    assert.ok(term.pid > 0)
    const type = (s) => sbx.pty.sendInput(term.pid, new TextEncoder().encode(s))
    await type('echo pty-$((6*7)); stty size\n')
    await waitFor(() => out.includes('pty-42') && out.includes('24 80'), `pty output, got ${JSON.stringify(out)}`)
    await sbx.pty.resize(term.pid, { cols: 132, rows: 43 })
    await type('stty size\n')
    await waitFor(() => out.includes('43 132'), `the new size, got ${JSON.stringify(out)}`)
    await type('tty; exit 0\n')
    const r = await term.wait()
    assert.equal(r.exitCode, 0)
    assert.match(out, /\/dev\/pts\//)
  })
})

describe('lifecycle and listing', () => {
  test('Sandbox.list filters by metadata', async () => {
    const a = await create({ metadata: { role: 'list-a' } })
    const b = await create({ metadata: { role: 'list-b', 'odd key': 'a&b=c' } })
    const only = await Sandbox.list({ query: { metadata: { suite: RUN, role: 'list-a' } } }).nextItems()
    assert.deepEqual(only.map((s) => s.sandboxId), [a.sandboxId])
    assert.equal(only[0].state, 'running')
    const odd = await Sandbox.list({ query: { metadata: { 'odd key': 'a&b=c' } } }).nextItems()
    assert.deepEqual(odd.map((s) => s.sandboxId), [b.sandboxId])
    const all = await Sandbox.list({ query: { metadata: { suite: RUN } } }).nextItems()
    for (const s of [a, b]) assert.ok(all.some((x) => x.sandboxId === s.sandboxId))
    const none = await Sandbox.list({ query: { metadata: { suite: 'no-such-run' } } }).nextItems()
    assert.deepEqual(none, [])
  })

  test('pause, then connect resumes', async () => {
    const sbx = await create({ metadata: { role: 'pause' } })
    await sbx.files.write('/tmp/state.txt', 'kept')
    const bg = await sbx.commands.run('sleep 300', { background: true })
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await sbx.pause(), false, 'pausing a paused sandbox')
    const paused = await Sandbox.list({ query: { metadata: { suite: RUN, role: 'pause' }, state: ['paused'] } }).nextItems()
    assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])
    // While paused, the sandbox's envd is not there (as behind E2B's proxy): a command
    // finds no sandbox, a file read reports a timed-out one.
    await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
    await assert.rejects(sbx.files.read('/tmp/state.txt'), TimeoutError)

    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.equal(await again.isRunning(), true)
    assert.equal((await again.getInfo()).state, 'running')
    assert.equal(await again.files.read('/tmp/state.txt'), 'kept')
    assert.ok((await again.commands.list()).some((p) => p.pid === bg.pid), 'the process survived the pause')
    const r = await again.commands.run('echo resumed')
    assert.equal(r.stdout, 'resumed\n')
    await again.commands.kill(bg.pid)
  })

  test('onTimeout pause without keepMemory: a filesystem-only pause, and connect reboots', { skip: !sdkAtLeast('2.51.0') && `SDK ${SDK_VERSION} has no keepMemory` }, async () => {
    const sbx = await create({ metadata: { role: 'fs-autopause' }, timeoutMs: 3_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    await sbx.files.write('/tmp/kept.txt', 'kept')
    const bootId = (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout
    await waitFor(async () => (await sbx.getInfo()).state === 'paused', 'the timeout to pause it', 20_000)
    // E2B's "paused" covers SPACE's suspending too; a pause in memory would never get here.
    const spaceState = async () => {
      const info = await api(`/v1/sandboxes/${sbx.sandboxId}`, { headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
      return (await info.json()).state
    }
    await waitFor(async () => (await spaceState()) === 'suspended', 'kept on disk (suspended), not in memory', 20_000)
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 })
    assert.equal(await again.files.read('/tmp/kept.txt'), 'kept')
    assert.notEqual((await again.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout, bootId)
  })

  // Not on gVisor (e2b_sdk_test's SdkOnGvisor leaves it out): its /proc has no boot_id.
  test('a pause keeps the boot id; a filesystem-only pause (memory: false) keeps the files and restarts: a new boot id', async () => {
    const sbx = await create({ metadata: { role: 'fs-pause' } })
    await sbx.files.write('/tmp/state.txt', 'kept')
    const bootId = (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout
    assert.match(bootId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n$/)
    assert.equal(await sbx.pause(), true)
    await Sandbox.connect(sbx.sandboxId)
    assert.equal((await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout, bootId, 'a pause in memory is no reboot')
    const res = await api(`/sandboxes/${sbx.sandboxId}/pause`, { method: 'POST', body: '{"memory":false}' })
    assert.equal(res.status, 204, await res.text())
    assert.equal((await sbx.getInfo()).state, 'paused')
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await again.files.read('/tmp/state.txt'), 'kept')
    const after = (await again.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout
    assert.equal(after.length, bootId.length)
    assert.notEqual(after, bootId, 'processes restarted under a boot id of their own')
  })

  test('getMetrics: CPU, memory and disk, as GET /v1/sandboxes/{id}/metrics has them', async () => {
    const sbx = await create({ metadata: { role: 'metrics' } })
    await sbx.commands.run('head -c 3000000 /dev/urandom > /root/blob; sync')
    const [m] = await sbx.getMetrics()
    assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp), String(m.timestamp))
    assert.equal(typeof m.cpuUsedPct, 'number')
    assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, String(m.cpuUsedPct))
    assert.ok(m.cpuCount >= 1)
    assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal, `${m.memUsed} of ${m.memTotal}`)
    assert.ok(m.diskUsed >= 3000000, String(m.diskUsed))
    const same = await Sandbox.getMetrics(sbx.sandboxId)
    assert.equal(same.length, 1)
    assert.ok(same[0].diskUsed >= 3000000)
    const v1 = await (await fetch(`${API}/v1/sandboxes/${sbx.sandboxId}/metrics`, {
      headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` },
    })).json()
    assert.equal(v1.memory_limit_bytes, m.memTotal)
    assert.equal(v1.cpu_count, m.cpuCount)
    assert.ok(Math.abs(v1.disk_bytes - same[0].diskUsed) < 1 << 20, `${v1.disk_bytes} vs ${same[0].diskUsed}`)
  })

  test('kill, isRunning and the not-found errors after it', async () => {
    const sbx = await create({ metadata: { role: 'kill' } })
    // A command running when its sandbox is killed: its stream is cut, as envd's is, so the
    // SDK finds the sandbox gone and says so (a TimeoutError), not an exit error.
    const bg = await sbx.commands.run('sleep 60', { background: true })
    const waited = bg.wait().catch((e) => e)
    assert.equal(await sbx.kill(), true)
    const err = await waited
    assert.ok(err instanceof TimeoutError || !sdkAtLeast('2.45.0'), `${err?.constructor?.name}: ${err?.message}`)
    assert.ok(!(err instanceof CommandExitError), `${err?.constructor?.name}: ${err?.message}`)
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
    await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
    await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
    await assert.rejects(sbx.files.read('/etc/passwd'), TimeoutError)
    await assert.rejects(sbx.files.list('/'), TimeoutError)
    const listed = await Sandbox.list({ query: { metadata: { suite: RUN, role: 'kill' } } }).nextItems()
    assert.deepEqual(listed, [])
  })
})

describe('bad input', () => {
  test('unknown template is the SDK not-found status', async () => {
    await assert.rejects(Sandbox.create('no-such-template-xyz'), (e) => {
      assert.ok(e instanceof SandboxError, `got ${e}`)
      assert.equal(e.statusCode, 404)
      return true
    })
  })

  test('unknown sandbox', async () => {
    await assert.rejects(Sandbox.connect('sb-doesnotexist'), SandboxNotFoundError)
    await assert.rejects(Sandbox.getInfo('sb-doesnotexist'), SandboxNotFoundError)
    assert.equal(await Sandbox.kill('sb-doesnotexist'), false)
  })

  test('a wrong API key is an AuthenticationError', async () => {
    await assert.rejects(Sandbox.list({ apiKey: 'wrong-key' }).nextItems(), AuthenticationError)
    await assert.rejects(Sandbox.create('base:latest', { apiKey: 'wrong-key' }), AuthenticationError)
  })

  describe('against a live sandbox', () => {
    let sbx
    before(async () => {
      sbx = await create({ metadata: { role: 'bad-input' } })
    })

    test('oversize upload', { skip: !MAX_FILE_BYTES && 'SPACE_MAX_FILE_BYTES not set' }, async () => {
      const data = new Uint8Array(MAX_FILE_BYTES + 1)
      for (const opts of [{}, { useOctetStream: true }]) {
        await assert.rejects(sbx.files.write('/tmp/too-big.bin', data, opts), (e) => {
          assert.ok(e instanceof SandboxError, `got ${e}`)
          assert.match(e.message, /413|larger than/)
          return true
        })
      }
      // The sandbox is unharmed.
      assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
    })

    // Raw requests for what the SDK never sends malformed.
    const envd = (path, init = {}) =>
      fetch(new URL(path, process.env.E2B_SANDBOX_URL), {
        method: 'POST',
        ...init,
        headers: {
          'E2b-Sandbox-Id': sbx.sandboxId,
          'X-Access-Token': sbx.envdAccessToken,
          'Connect-Protocol-Version': '1',
          ...(init.headers ?? {}),
        },
      })

    test('malformed Connect envelopes end the stream with invalid_argument', async () => {
      const good = Buffer.from(JSON.stringify({ process: { cmd: '/bin/echo', args: ['hi'] } }))
      const frame = (flags, payload, len = payload.length) => {
        const h = Buffer.alloc(5)
        h[0] = flags
        h.writeUInt32BE(len, 1)
        return Buffer.concat([h, payload])
      }
      for (const body of [
        Buffer.from('{}'), // not enveloped
        frame(0, good, good.length + 10), // length past the end
        frame(1, good), // compressed
        Buffer.concat([frame(0, good), frame(0, good)]), // two messages
        frame(0, Buffer.from('{not json')),
      ]) {
        const res = await envd('/process.Process/Start', {
          headers: { 'Content-Type': 'application/connect+json' },
          body,
        })
        assert.equal(res.status, 200)
        assert.equal(res.headers.get('content-type'), 'application/connect+json')
        const buf = Buffer.from(await res.arrayBuffer())
        assert.equal(buf[0], 2, 'an end-stream envelope')
        const end = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString())
        assert.equal(end.error.code, 'invalid_argument', JSON.stringify(end))
      }
      // The well-formed one works.
      const res = await envd('/process.Process/Start', {
        headers: { 'Content-Type': 'application/connect+json' },
        body: frame(0, good),
      })
      const buf = Buffer.from(await res.arrayBuffer())
      const msgs = []
      for (let o = 0; o < buf.length; ) {
        const n = buf.readUInt32BE(o + 1)
        msgs.push({ flags: buf[o], json: JSON.parse(buf.subarray(o + 5, o + 5 + n).toString()) })
        o += 5 + n
      }
      assert.ok(msgs[0].json.event.start.pid > 0)
      assert.equal(Buffer.from(msgs[1].json.event.data.stdout, 'base64').toString(), 'hi\n')
      assert.deepEqual(msgs.at(-1), { flags: 2, json: {} })
    })

    test('file codings envd does not have, and bad gzip', async () => {
      const { gzipSync } = await import('node:zlib')
      const files = (query, init) => envd(`/files?${query}`, init)
      let res = await files('path=/tmp/enc.txt', {
        headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'br' },
        body: 'x',
      })
      assert.equal(res.status, 415)
      assert.match((await res.json()).message, /supported: \[identity, gzip\]/)
      res = await files('path=/tmp/enc.txt', {
        headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
        body: 'not gzip at all',
      })
      assert.equal(res.status, 400)
      assert.match((await res.json()).message, /not valid gzip/)
      const whole = gzipSync(Buffer.from('cut short, this one'))
      res = await files('path=/tmp/enc.txt', {
        headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
        body: whole.subarray(0, whole.length - 9),
      })
      assert.equal(res.status, 400)
      // Multipart as a whole may be gzip too.
      const boundary = 'b0undary'
      const mp = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/enc-mp.txt"\r\n\r\nfrom multipart\r\n--${boundary}--\r\n`
      res = await files('', {
        headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}`, 'Content-Encoding': 'gzip' },
        body: gzipSync(Buffer.from(mp)),
      })
      assert.equal(res.status, 200, await res.clone().text())
      assert.equal(await sbx.files.read('/tmp/enc-mp.txt'), 'from multipart')
      // Nothing acceptable to answer with.
      res = await envd('/files?path=/tmp/enc-mp.txt', { method: 'GET', headers: { 'Accept-Encoding': 'br, identity;q=0' } })
      assert.equal(res.status, 406)
      assert.match((await res.json()).message, /no acceptable encoding/)
      // A failed upload left nothing half-written in place of the good file.
      assert.equal(await sbx.files.read('/tmp/enc-mp.txt'), 'from multipart')
    })

    test('malformed unary requests and auth on envd', async () => {
      let res = await envd('/filesystem.Filesystem/Stat', {
        headers: { 'Content-Type': 'application/json' },
        body: '{"path":',
      })
      assert.equal(res.status, 400)
      assert.equal((await res.json()).code, 'invalid_argument')
      res = await envd('/filesystem.Filesystem/Stat', {
        headers: { 'Content-Type': 'application/json', 'X-Access-Token': 'wrong' },
        body: '{"path":"/"}',
      })
      assert.equal(res.status, 401)
      assert.equal((await res.json()).code, 'unauthenticated')
      res = await envd('/filesystem.Filesystem/Stat', {
        headers: { 'Content-Type': 'application/json' },
        body: '{"path":"/"}',
      })
      assert.equal(res.status, 200)
      assert.equal((await res.json()).entry.type, 'FILE_TYPE_DIRECTORY')
      res = await envd('/files?path=/etc/hostname', { method: 'GET', headers: { 'X-Access-Token': 'wrong' } })
      assert.equal(res.status, 401)
      // Another sandbox's token does not open this one.
      const other = created.find((s) => s !== sbx && s.envdAccessToken)
      res = await envd('/filesystem.Filesystem/Stat', {
        headers: { 'Content-Type': 'application/json', 'X-Access-Token': other.envdAccessToken },
        body: '{"path":"/"}',
      })
      assert.equal(res.status, 401)
    })

    test('control plane errors carry E2B codes', async () => {
      const res = await fetch(`${API}/sandboxes/sb-doesnotexist`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
      assert.equal(res.status, 404)
      const body = await res.json()
      assert.equal(body.code, 404)
      assert.match(body.message, /sb-doesnotexist/)
      const bad = await fetch(`${API}/v2/sandboxes`, {
        method: 'POST',
        headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'base', volumeMounts: [{ name: 'v', path: 'not-absolute' }] }),
      })
      assert.equal(bad.status, 400)
      assert.equal((await bad.json()).code, 400)
    })
  })
})

// Volumes (docs/volumes.md): E2B's content API is spaced itself.
describe('volumes', () => {
  before(() => {
    process.env.E2B_VOLUME_API_URL ??= API
  })

  test('Volume: create, files without a sandbox, mount, read back, destroy', async () => {
    const name = `js-${process.pid}-${Date.now()}`
    const vol = await Volume.create(name)
    assert.equal(vol.name, name)
    const written = await vol.writeFile('/dir/hello.txt', 'from the sdk')
    assert.equal(written.type, 'file')
    assert.equal(written.size, 12)
    assert.equal(await vol.readFile('/dir/hello.txt'), 'from the sdk')
    assert.ok((await vol.list('/dir')).some((e) => e.name === 'hello.txt' && e.type === 'file'))
    assert.equal(await vol.exists('/nope'), false)
    assert.equal((await Volume.getInfo(vol.volumeId)).name, name)
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))

    const sbx = await create({ volumeMounts: { '/data': vol } })
    const detail = await (await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json()
    assert.deepEqual(detail.volumeMounts, [{ name, path: '/data' }])
    const r = await sbx.commands.run('cat /data/dir/hello.txt && echo from-sandbox > /data/back.txt')
    assert.equal(r.stdout, 'from the sdk')
    assert.equal(await vol.readFile('/back.txt'), 'from-sandbox\n')
    await assert.rejects(Volume.destroy(vol.volumeId), VolumeError)  // mounted: 409
    await sbx.kill()
    await vol.remove('/dir')
    assert.equal(await vol.exists('/dir'), false)
    assert.equal(await Volume.destroy(vol.volumeId), true)
    assert.equal(await Volume.destroy(vol.volumeId), false)
  })
})
