// The unmodified E2B JavaScript SDK against a real spaced, continued from e2b.test.mjs:
// ports as URLs (over https too), templates, egress under policy, the raw control plane and
// envd's extras. Shared set-up in suite.mjs.
import assert from 'node:assert/strict'
import dns from 'node:dns/promises'
import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'

import {
  API,
  BuildError,
  CommandExitError,
  FileNotFoundError,
  FilesystemEventType,
  NotFoundError,
  RUN,
  Sandbox,
  SandboxError,
  SDK_VERSION,
  Template,
  create,
  created,
  sdkAtLeast,
  waitFor,
  KEY,
  api,
} from './suite.mjs'

// Ports as URLs (docs/ports.md): getHost(port) names spaced's port; *.localhost is not in
// the resolver here, so requests go to 127.0.0.1 with that Host.
function getThrough(host, headers = {}, path = '/hostname') {
  const port = Number(new URL(API).port)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, headers: { Host: host, ...headers } }, (res) => {
      let body = ''
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

describe('templates', { skip: typeof Template?.build === 'function' ? false : 'this SDK release has no Template.build' }, () => {
  test('Template.build: FROM a SPACE template, COPY from the context (a wildcard too), RUN, ENV, WORKDIR; then a sandbox of it', async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-tpl-'))
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
    fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello from the context\n')
    fs.mkdirSync(path.join(dir, 'sub'))
    fs.writeFileSync(path.join(dir, 'sub', 'a.txt'), 'a\n')
    fs.mkdirSync(path.join(dir, 'folder'))
    fs.writeFileSync(path.join(dir, 'folder', 'one.txt'), 'one\n')
    fs.writeFileSync(path.join(dir, 'folder', 'two.txt'), 'two\n')
    const name = `ci-e2b-${process.pid}`
    const tpl = Template({ fileContextPath: dir })
      .fromTemplate('base:latest')
      .copy('hello.txt', '/data/hello.txt')
      .copy('sub', '/data/sub')
      .runCmd('echo built > /built')
      .setEnvs({ GREETING: 'hi "there" $HOME' })
      .setWorkdir('/data')
      .copy('folder/*', 'globbed') // a wildcard: what it matches goes into /data/globbed/
    const logs = []
    const info = await Template.build(tpl, `${name}:v1`, { onBuildLogs: (e) => logs.push(String(e.message ?? e)) })
    assert.match(info.buildId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, JSON.stringify(info))
    assert.ok(logs.some((l) => l.includes('echo built')), logs.join('\n'))
    const sbx = await Sandbox.create(`${name}:v1`, { timeoutMs: 120_000 })
    created.push(sbx)
    const r = await sbx.commands.run('cat hello.txt sub/a.txt /built; echo "$GREETING"; pwd')
    assert.equal(r.stdout, 'hello from the context\na\nbuilt\nhi "there" $HOME\n/data\n')
    const globbed = await sbx.commands.run('cat globbed/one.txt globbed/two.txt; ls -A globbed')
    assert.equal(globbed.stdout, 'one\ntwo\none.txt\ntwo.txt\n')
    // A second build of the same files finds them uploaded already, and builds again.
    const again = await Template.build(tpl, `${name}:v2`)
    assert.notEqual(again.buildId, info.buildId)
  })

  test('template tags: a build with several, assignTags, getTags, removeTags', { skip: typeof Template?.assignTags === 'function' ? false : 'this SDK release has no template tags' }, async () => {
    const name = `ci-e2b-tags-${process.pid}`
    const tpl = Template().fromTemplate('base:latest').runCmd('echo tagged > /tagged')
    const info = await Template.build(tpl, name, { tags: ['v1', 'stable'] })
    assert.ok(info.buildId)
    let tags = await Template.getTags(name)
    assert.deepEqual(tags.map((t) => t.tag).sort(), ['stable', 'v1'])
    assert.equal(new Set(tags.map((t) => t.buildId)).size, 1, JSON.stringify(tags))
    const assigned = await Template.assignTags(`${name}:v1`, ['prod', 'canary'])
    assert.deepEqual(assigned.tags, ['prod', 'canary'])
    assert.equal(assigned.buildId, tags[0].buildId)
    // E2B's SDKs parse these as UUIDs (the Python one refuses anything else).
    assert.match(assigned.buildId, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
    const sbx = await Sandbox.create(`${name}:prod`, { timeoutMs: 120_000 })
    created.push(sbx)
    assert.equal((await sbx.commands.run('cat /tagged')).stdout, 'tagged\n')
    await Template.removeTags(name, ['canary', 'stable'])
    tags = await Template.getTags(name)
    assert.deepEqual(tags.map((t) => t.tag).sort(), ['prod', 'v1'])
    await assert.rejects(Sandbox.create(`${name}:canary`), (e) => e instanceof NotFoundError || e instanceof SandboxError)
    // Bad input changes nothing: an unknown target or tag, a malformed tag.
    await assert.rejects(Template.assignTags(`no-such-template-${process.pid}:x`, ['y']))
    await assert.rejects(Template.removeTags(name, ['never-made']))
    await assert.rejects(Template.assignTags(`${name}:v1`, ['bad tag!']))
    assert.deepEqual((await Template.getTags(name)).map((t) => t.tag).sort(), ['prod', 'v1'])
  })

  test('a failing step is a BuildError with the reason; an image SPACE cannot pull is one too', async () => {
    const failing = Template().fromTemplate('base:latest').runCmd('echo nope >&2; exit 3')
    await assert.rejects(Template.build(failing, `ci-e2b-fail-${process.pid}`), (e) => {
      assert.ok(e instanceof BuildError, String(e))
      return true
    })
    const image = Template().fromImage('example.invalid/some/image:1')
    await assert.rejects(Template.build(image, `ci-e2b-img-${process.pid}`), /pulls no images/)
  })
})

describe('ports', () => {
  test('getHost and trafficAccessToken with allowPublicTraffic: false', async () => {
    const sbx = await create({ network: { allowPublicTraffic: false } })
    const port = new URL(API).port
    assert.equal(sbx.getHost(3000), `3000-${sbx.sandboxId}.localhost:${port}`)
    assert.match(sbx.trafficAccessToken, /^tt1\./)
    await sbx.commands.run('mkdir -p /w && echo port-ok > /w/hostname && busybox httpd -p 3000 -h /w')
    let r
    for (let i = 0; i < 50; i++) {
      r = await getThrough(sbx.getHost(3000), { 'e2b-traffic-access-token': sbx.trafficAccessToken })
      if (r.status === 200) break
      await new Promise((res) => setTimeout(res, 50))
    }
    assert.equal(r.status, 200)
    assert.equal(r.body, 'port-ok\n')
    assert.equal((await getThrough(sbx.getHost(3000))).status, 401)
  })

  test('lifecycle autoResume: traffic to a port resumes a sandbox its timeout paused', { skip: !sdkAtLeast('2.51.0') && `SDK ${SDK_VERSION} has no lifecycle option` }, async () => {
    const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    const lc = (await sbx.getInfo()).lifecycle
    if (lc) assert.equal(lc.autoResume, true, JSON.stringify(lc))
    await sbx.commands.run('mkdir -p /w && echo awake > /w/index.html && busybox httpd -p 3003 -h /w')
    await waitFor(async () => (await sbx.getInfo()).state === 'paused', 'the timeout to pause it', 20_000)
    const r = await getThrough(sbx.getHost(3003), {}, '/index.html')
    assert.equal(r.status, 200, r.body)
    assert.equal(r.body, 'awake\n')
    assert.equal((await sbx.getInfo()).state, 'running')
    // keepMemory: false cannot auto-resume: the SDK refuses it, and so does spaced.
    const bad = await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base:latest', autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } }) })
    assert.equal(bad.status, 400)
    assert.match((await bad.json()).message, /autoPauseMemory/)
  })

  test('network.maskRequestHost is the Host the sandbox service sees, ${PORT} its port', async () => {
    const sbx = await create({ network: { maskRequestHost: 'custom-host.example.com:${PORT}' } })
    // A CGI script of busybox httpd answers with the Host it was sent (CRLF headers: httpd
    // passes the script's own through).
    await sbx.files.write('/m/cgi-bin/h', "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\nhost=%s\\n' \"$HTTP_HOST\"\n")
    const made = await sbx.commands.run('chmod +x /m/cgi-bin/h && busybox httpd -p 3002 -h /m')
    assert.equal(made.exitCode, 0, made.stderr)
    let r
    for (let i = 0; i < 50; i++) {
      r = await getThrough(sbx.getHost(3002), {}, '/cgi-bin/h')
      if (r.status === 200) break
      await new Promise((res) => setTimeout(res, 50))
    }
    assert.equal(r.status, 200, r.body)
    assert.equal(r.body.trim(), 'host=custom-host.example.com:3002')
    await assert.rejects(create({ network: { maskRequestHost: 'bad host' } }), /mask_request_host/)
  })

  // The SDK's port URLs are `https://${getHost(port)}` (E2B's own suites build them so):
  // spaced serves TLS on its own port (docs/tls.md). e2b_sdk_test starts it with
  // --tls-self-signed and hands node its CA (NODE_EXTRA_CA_CERTS, and SPACE_TLS_CA to say so).
  test('getHost over https: the URL the SDK builds reaches the port', { skip: process.env.SPACE_TLS_CA ? false : 'spaced serves no TLS here (SPACE_TLS_CA is unset)' }, async () => {
    const sbx = await create({ network: { allowPublicTraffic: false } })
    const host = sbx.getHost(3003)
    const name = host.replace(/:\d+$/, '')
    // *.localhost must resolve to loopback as browsers resolve it; a resolver that does not
    // (Debian without libnss-myhostname) is a broken set-up, not a reason to skip.
    await dns.lookup(name).catch((e) =>
      assert.fail(`${name} does not resolve (${e.code}): *.localhost must resolve to loopback; on Debian install libnss-myhostname (scripts/install-deps.sh)`))
    await sbx.commands.run('mkdir -p /w && echo port-ok-tls > /w/hostname && busybox httpd -p 3003 -h /w')
    const headers = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
    let r
    for (let i = 0; i < 50; i++) {
      r = await fetch(`https://${host}/hostname`, { headers })
      if (r.status === 200) break
      await r.arrayBuffer()
      await new Promise((res) => setTimeout(res, 50))
    }
    assert.equal(r.status, 200)
    assert.equal(await r.text(), 'port-ok-tls\n')
    const refused = await fetch(`https://${host}/hostname`)
    assert.equal(refused.status, 401)
    await refused.arrayBuffer()
  })

  test('public by default, as on E2B', async () => {
    const sbx = await create()
    assert.equal(sbx.trafficAccessToken, undefined)
    await sbx.commands.run('mkdir -p /w && echo port-ok > /w/hostname && busybox httpd -p 3001 -h /w')
    let r
    for (let i = 0; i < 50; i++) {
      r = await getThrough(sbx.getHost(3001))
      if (r.status === 200) break
      await new Promise((res) => setTimeout(res, 50))
    }
    assert.equal(r.status, 200)
  })
})

// Egress under policy (docs/networking.md), against the fake internet e2b_sdk_test makes:
// 203.0.113.10 and .66 with HTTP servers that log every connection (so "blocked" means no
// connection reached the server), and api.example.test resolving to .10.
const NET_LOG = process.env.SPACE_FAKE_INTERNET_LOG
describe('network', { skip: NET_LOG ? false : 'no fake internet here' }, () => {
  const reached = (listen) =>
    fs.readFileSync(NET_LOG, 'utf8').split('\n').filter((l) => l.includes(`"listen": "${listen}"`) && l.includes('"kind": "connect"')).length
  // busybox wget honours http_proxy: the transparent path is what enforcement rests on.
  const get = (sbx, url) => sbx.commands.run(`unset http_proxy HTTP_PROXY; wget -q -O - ${url}`, { timeoutMs: 30_000 })

  test('allowInternetAccess: true reaches public addresses, false reaches nothing', async () => {
    const on = await create({ allowInternetAccess: true })
    const r = await get(on, 'http://203.0.113.10/e2b-on')
    assert.match(r.stdout, /GET \/e2b-on/)
    const off = await create({ allowInternetAccess: false })
    const before = reached('203.0.113.10:80')
    await assert.rejects(get(off, 'http://203.0.113.10/e2b-off'), CommandExitError)
    assert.equal(reached('203.0.113.10:80'), before, 'a connection reached the server')
  })

  test('network.denyOut blocks a CIDR; allowOut with denyOut 0.0.0.0/0 allows only its domains', async () => {
    const deny = await create({ network: { denyOut: ['203.0.113.66/32'] } })
    assert.match((await get(deny, 'http://203.0.113.10/ok')).stdout, /GET \/ok/)
    let before = reached('203.0.113.66:80')
    await assert.rejects(get(deny, 'http://203.0.113.66/denied'), CommandExitError)
    assert.equal(reached('203.0.113.66:80'), before)

    const only = await create({ network: { allowOut: ['api.example.test'], denyOut: ['0.0.0.0/0'] } })
    assert.match((await get(only, 'http://api.example.test/named')).stdout, /GET \/named/)
    before = reached('203.0.113.66:80')
    await assert.rejects(get(only, 'http://203.0.113.66/other'), CommandExitError)
    assert.equal(reached('203.0.113.66:80'), before)
  })
})

// The rest of E2B's control plane (e2b-dev/infra spec/openapi.yml) on the raw wire, as every
// SDK release calls some of it: both create paths, connect on both, list pages and filters,
// refresh, logs, snapshots, the error shape of unknown routes.

describe('control plane', () => {
  test('the API key is in E2B shape and opens SPACE routes too', async () => {
    assert.match(KEY, /^e2b_[0-9a-f]+$/)
    const who = await fetch(`${API}/v1/whoami`, { headers: { Authorization: `Bearer ${KEY}` } })
    assert.equal(who.status, 200)
    assert.equal((await who.json()).kind, 'operator')
  })

  test('POST /sandboxes creates and POST /sandboxes/{id}/connect connects, as SDKs before 2.51 call them', async () => {
    const res = await api('/sandboxes', {
      method: 'POST',
      body: JSON.stringify({ templateID: 'base:latest', timeout: 300, metadata: { suite: RUN, role: 'v1-create' } }),
    })
    assert.equal(res.status, 201)
    const sb = await res.json()
    assert.match(sb.sandboxID, /^sb-/)
    assert.ok(sb.envdAccessToken)
    created.push({ kill: () => Sandbox.kill(sb.sandboxID) })
    const conn = await api(`/sandboxes/${sb.sandboxID}/connect`, { method: 'POST', body: '{"timeout":60}' })
    assert.equal(conn.status, 200)
    assert.equal((await conn.json()).sandboxID, sb.sandboxID)
    // connect only extends: the 300 s asked at create stay.
    const info = await (await api(`/sandboxes/${sb.sandboxID}`)).json()
    assert.ok(new Date(info.endAt).getTime() - Date.now() > 200_000, info.endAt)
    // refresh extends too, never shortens.
    assert.equal((await api(`/sandboxes/${sb.sandboxID}/refreshes`, { method: 'POST', body: '{"duration":10}' })).status, 204)
    const after = await (await api(`/sandboxes/${sb.sandboxID}`)).json()
    assert.equal(after.endAt, info.endAt)
    assert.equal((await api(`/sandboxes/${sb.sandboxID}/refreshes`, { method: 'POST', body: '{"duration":99999}' })).status, 400)
    const logs = await (await api(`/v2/sandboxes/${sb.sandboxID}/logs`)).json()
    assert.ok(logs.logs.some((l) => l.message === 'create succeeded' && l.level === 'info'), JSON.stringify(logs))
    const v1logs = await (await api(`/sandboxes/${sb.sandboxID}/logs`)).json()
    assert.ok(v1logs.logs.some((l) => l.line === 'create succeeded'))
    const many = await (await api(`/sandboxes/metrics?sandbox_ids=${sb.sandboxID},sb-doesnotexist`)).json()
    assert.deepEqual(Object.keys(many.sandboxes), [sb.sandboxID])
  })

  test('Sandbox.list pages with limit and nextToken, in start order, by state and template', async () => {
    const role = 'paged'
    const mine = []
    for (let i = 0; i < 3; i++) mine.push(await create({ metadata: { role } }))
    const query = { metadata: { suite: RUN, role } }
    const pager = Sandbox.list({ query, limit: 2 })
    const first = await pager.nextItems()
    assert.equal(first.length, 2)
    assert.equal(pager.hasNext, true)
    const second = await pager.nextItems()
    assert.equal(second.length, 1)
    assert.equal(pager.hasNext, false)
    // Newest first by default, each sandbox once.
    assert.deepEqual([...first, ...second].map((s) => s.sandboxId), mine.map((s) => s.sandboxId).reverse())
    const asc = await (await api(`/v2/sandboxes?metadata=${encodeURIComponent(`suite=${RUN}&role=${role}`)}&order=asc`)).json()
    assert.deepEqual(asc.map((s) => s.sandboxID), mine.map((s) => s.sandboxId))
    const byTemplate = await (await api(`/v2/sandboxes?metadata=${encodeURIComponent(`suite=${RUN}&role=${role}`)}&template=no-such`)).json()
    assert.deepEqual(byTemplate, [])
    const later = new Date(Date.now() + 60_000).toISOString()
    assert.deepEqual(await (await api(`/v2/sandboxes?startedAfter=${later}`)).json(), [])
    const page = await api(`/v2/sandboxes?metadata=${encodeURIComponent(`suite=${RUN}&role=${role}`)}&limit=1`)
    assert.match(page.headers.get('x-next-token'), /./)
    assert.equal(page.headers.get('x-total-running'), '3')
  })

  test('bad filters and tokens are 400; unknown routes 404 in E2B shape, never 405', async () => {
    for (const q of ['state=dead', 'limit=0', 'limit=1000', 'nextToken=%%%', 'order=sideways', 'startedAfter=yesterday', 'metadata=novalue']) {
      const res = await api(`/v2/sandboxes?${q}`)
      assert.equal(res.status, 400, q)
      const body = await res.json()
      assert.equal(body.code, 400)
      assert.equal(typeof body.message, 'string')
    }
    for (const [method, path] of [['PATCH', '/sandboxes/sb-x'], ['GET', '/sandboxes/sb-x/nothing'], ['PUT', '/v2/sandboxes'], ['GET', '/templates/x/y/z']]) {
      const res = await api(path, { method })
      assert.equal(res.status, 404, `${method} ${path}`)
      assert.equal((await res.json()).code, 404)
    }
  })

  test('snapshots: create one, list it, start a sandbox from it, delete it', async (t) => {
    const sbx = await create({ metadata: { role: 'snap' } })
    await sbx.files.write('/tmp/snap.txt', 'from the snapshot')
    let snap
    if (typeof sbx.createSnapshot === 'function') {
      snap = await sbx.createSnapshot()
      snap = snap.snapshotId
    } else {
      const res = await api(`/sandboxes/${sbx.sandboxId}/snapshots`, { method: 'POST', body: '{}' })
      assert.equal(res.status, 201)
      snap = (await res.json()).snapshotID
    }
    assert.match(snap, /^snap-/)
    const listed = await (await api(`/snapshots?sandboxID=${sbx.sandboxId}`)).json()
    assert.deepEqual(listed.map((s) => s.snapshotID), [snap])
    const restored = await Sandbox.create(snap, { timeoutMs: 300_000, metadata: { suite: RUN, role: 'from-snap' } })
    created.push(restored)
    assert.equal(await restored.files.read('/tmp/snap.txt'), 'from the snapshot')
    // Named: listed by its name, restored by it (the newest of that name), deleted by id.
    const nm = `snap-named-${process.pid}`
    const bad = await api(`/sandboxes/${sbx.sandboxId}/snapshots`, { method: 'POST', body: '{"name":"Bad Name!"}' })
    assert.equal(bad.status, 400)
    const named = await api(`/sandboxes/${sbx.sandboxId}/snapshots`, { method: 'POST', body: JSON.stringify({ name: nm }) })
    assert.equal(named.status, 201)
    const info = await named.json()
    assert.ok(info.names.some((n) => n.includes(nm)), JSON.stringify(info))
    assert.deepEqual((await (await api(`/snapshots?name=${nm}`)).json()).map((s) => s.snapshotID), [info.snapshotID])
    assert.deepEqual(await (await api(`/snapshots?name=${nm}-does-not-exist`)).json(), [])
    const fromName = await Sandbox.create(nm, { timeoutMs: 300_000, metadata: { suite: RUN, role: 'from-name' } })
    created.push(fromName)
    assert.equal(await fromName.files.read('/tmp/snap.txt'), 'from the snapshot')
    assert.equal((await api(`/templates/${info.snapshotID}`, { method: 'DELETE' })).status, 204)
    assert.deepEqual(await (await api(`/snapshots?name=${nm}`)).json(), [])
    assert.equal((await api(`/templates/${snap}`, { method: 'DELETE' })).status, 204)
    assert.equal((await api(`/templates/${snap}`, { method: 'DELETE' })).status, 404)
  })
})

describe('envd extras', () => {
  let sbx
  before(async () => {
    sbx = await create({ metadata: { role: 'envd-extras' } })
  })

  test('commands.connect(pid) replays the output from the start', async () => {
    const h = await sbx.commands.run('echo early; sleep 1; echo late', { background: true })
    await new Promise((r) => setTimeout(r, 400))
    const seen = []
    const again = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
    const r = await again.wait()
    assert.equal(r.stdout, 'early\nlate\n')
    assert.equal(seen.join(''), 'early\nlate\n')
  })

  test('as envd: removing a missing file is no error; metrics only inside the asked range', async () => {
    await sbx.files.remove('/tmp/no-such-file-here')
    const now = Date.now()
    const past = await sbx.getMetrics({ start: new Date(now - 3_600_000), end: new Date(now - 1_800_000) })
    assert.deepEqual(past, [])
    const current = await sbx.getMetrics({ start: new Date(now - 60_000), end: new Date(now) })
    assert.equal(current.length, 1)
  })

  test('files.watchDir reports creates, writes and removes', async () => {
    await sbx.files.makeDir('/tmp/watched')
    const events = []
    const h = await sbx.files.watchDir('/tmp/watched', (e) => events.push(`${e.type}:${e.name}`))
    await sbx.files.write('/tmp/watched/a.txt', 'one')
    await waitFor(async () => events.includes(`${FilesystemEventType.CREATE}:a.txt`), 'the create event', 5_000)
    await sbx.commands.run('echo more >> /tmp/watched/a.txt')
    await waitFor(async () => events.filter((e) => e === `${FilesystemEventType.WRITE}:a.txt`).length >= 2, 'the write event', 5_000)
    await sbx.files.remove('/tmp/watched/a.txt')
    await waitFor(async () => events.includes(`${FilesystemEventType.REMOVE}:a.txt`), 'the remove event', 5_000)
    await h.stop()
    await assert.rejects(sbx.files.watchDir('/tmp/no-such-dir', () => {}), (e) => e instanceof FileNotFoundError || e instanceof SandboxError)
  })

  test('files.watchDir with includeEntry gives events their entry (allowNetworkMounts changes nothing)', { skip: !sdkAtLeast('2.45.0') && `SDK ${SDK_VERSION} has no includeEntry` }, async () => {
    await sbx.files.makeDir('/tmp/watched-entry')
    const got = []
    const h = await sbx.files.watchDir('/tmp/watched-entry', (e) => got.push(e), { includeEntry: true, allowNetworkMounts: true })
    await sbx.files.write('/tmp/watched-entry/f.txt', 'one')
    await waitFor(async () => got.some((e) => e.name === 'f.txt' && e.entry), 'an event with its entry', 5_000)
    const ev = got.find((e) => e.name === 'f.txt' && e.entry)
    assert.equal(ev.entry.path, '/tmp/watched-entry/f.txt')
    assert.equal(ev.entry.type, 'file')
    assert.equal(ev.entry.size, 3)
    await sbx.files.remove('/tmp/watched-entry/f.txt')
    await waitFor(async () => got.some((e) => e.type === FilesystemEventType.REMOVE), 'the remove event', 5_000)
    assert.equal(got.find((e) => e.type === FilesystemEventType.REMOVE).entry, undefined)
    await h.stop()
  })

  test('file metadata: X-Metadata-* as user.e2b.* attributes, shown by getInfo, list, rename; a rewrite replaces it', { skip: !sdkAtLeast('2.45.0') && `SDK ${SDK_VERSION} has no file metadata` }, async () => {
    const meta = { author: 'mish', purpose: 'upload' }
    const info = await sbx.files.write('/e2b-meta/a.txt', 'content', { metadata: meta })
    assert.deepEqual(info.metadata, meta)
    assert.deepEqual((await sbx.files.getInfo('/e2b-meta/a.txt')).metadata, meta)
    const listed = (await sbx.files.list('/e2b-meta')).find((e) => e.name === 'a.txt')
    assert.deepEqual(listed.metadata, meta)
    const moved = await sbx.files.rename('/e2b-meta/a.txt', '/e2b-meta/b.txt')
    assert.deepEqual(moved.metadata, meta)
    const plain = await sbx.files.write('/e2b-meta/b.txt', 'again')
    assert.equal(plain.metadata, undefined)
    assert.equal((await sbx.files.getInfo('/e2b-meta/b.txt')).metadata, undefined)
    const many = await sbx.files.write(
      [
        { path: '/e2b-meta/1.txt', data: '1' },
        { path: '/e2b-meta/2.txt', data: '2' },
      ],
      { metadata: { source: 'suite' } },
    )
    for (const f of many) assert.deepEqual((await sbx.files.getInfo(f.path)).metadata, { source: 'suite' })
    const oct = await sbx.files.write('/e2b-meta/o.txt', 'o', { metadata: { k: 'v' }, useOctetStream: true })
    assert.deepEqual(oct.metadata, { k: 'v' })
    assert.deepEqual((await sbx.files.getInfo('/e2b-meta/o.txt')).metadata, { k: 'v' })
    // What the SDK refuses to send, spaced refuses too: 400, and nothing is written.
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/files?path=/e2b-meta/bad.txt`, {
      method: 'POST',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken, 'Content-Type': 'application/octet-stream', 'X-Metadata-k': 'a\tb' },
      body: 'x',
    })
    assert.equal(res.status, 400, await res.text())
    assert.equal(await sbx.files.exists('/e2b-meta/bad.txt'), false)
  })

  test('getInfo of a symlink: what it leads to, and where, absolute (as envd)', async () => {
    await sbx.files.write('/tmp/ln/target.txt', 'x')
    const made = await sbx.commands.run('cd /tmp/ln && ln -s target.txt rel && ln -s /tmp/ln abs && ln -s nowhere dangling')
    assert.equal(made.exitCode, 0)
    const rel = await sbx.files.getInfo('/tmp/ln/rel')
    assert.equal(rel.symlinkTarget, '/tmp/ln/target.txt')
    assert.equal(rel.type, 'file')
    const abs = await sbx.files.getInfo('/tmp/ln/abs')
    assert.equal(abs.symlinkTarget, '/tmp/ln')
    assert.equal(abs.type, 'dir')
    assert.equal((await sbx.files.getInfo('/tmp/ln/dangling')).symlinkTarget, '/tmp/ln/nowhere')
    assert.equal((await sbx.files.getInfo('/tmp/ln/target.txt')).symlinkTarget, undefined)
  })

  test('signed file URLs: downloadUrl and uploadUrl, with and without expiry; expired, forged or misused ones are 401', async () => {
    await sbx.files.write('/tmp/signed.txt', 'signed content')
    const url = await sbx.downloadUrl('/tmp/signed.txt')
    assert.ok(new URL(url).searchParams.get('signature').startsWith('v1_'), url)
    let res = await fetch(url)  // nothing but the URL: no token, no sandbox header
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'signed content')
    res = await fetch(await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 60 }))
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'signed content')
    res = await fetch(await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: -10 }))
    assert.equal(res.status, 401)
    assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
    // The signature covers the path, the operation and the expiry.
    const other = new URL(url)
    other.searchParams.set('path', '/etc/passwd')
    assert.equal((await fetch(other)).status, 401)
    const later = new URL(await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 60 }))
    later.searchParams.set('signature_expiration', String(Number(later.searchParams.get('signature_expiration')) + 3600))
    assert.equal((await fetch(later)).status, 401)
    const form = () => {
      const f = new FormData()
      f.append('file', 'uploaded by url')
      return f
    }
    assert.equal((await fetch(url, { method: 'POST', body: form() })).status, 401)  // a read URL does not write
    const up = await sbx.uploadUrl('/tmp/up.txt', { useSignatureExpiration: 60 })
    res = await fetch(up, { method: 'POST', body: form() })
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), [{ name: 'up.txt', type: 'file', path: '/tmp/up.txt' }])
    assert.equal(await sbx.files.read('/tmp/up.txt'), 'uploaded by url')
    // Every connect gives the same envd token, so URLs signed through any handle work.
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(again.envdAccessToken, sbx.envdAccessToken)
    assert.equal((await fetch(await again.downloadUrl('/tmp/up.txt'))).status, 200)
  })

  test('the watcher RPCs and StreamInput on the wire', async () => {
    const envd = (method, body, type = 'application/json') =>
      fetch(`${process.env.E2B_SANDBOX_URL}/${method}`, {
        method: 'POST',
        headers: { 'Content-Type': type, 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken },
        body,
      })
    await sbx.files.makeDir('/tmp/polled')
    let res = await envd('filesystem.Filesystem/CreateWatcher', '{"path":"/tmp/polled","recursive":true}')
    assert.equal(res.status, 200)
    const { watcherId } = await res.json()
    await sbx.files.write('/tmp/polled/sub/x', 'x')
    res = await envd('filesystem.Filesystem/GetWatcherEvents', JSON.stringify({ watcherId }))
    const { events } = await res.json()
    assert.ok(events.some((e) => e.name === 'sub/x' && e.type === 'EVENT_TYPE_CREATE'), JSON.stringify(events))
    res = await envd('filesystem.Filesystem/RemoveWatcher', JSON.stringify({ watcherId }))
    assert.equal(res.status, 200)
    res = await envd('filesystem.Filesystem/GetWatcherEvents', JSON.stringify({ watcherId }))
    assert.equal(res.status, 404)

    const h = await sbx.commands.run('head -c 11', { background: true, stdin: true })
    const env = (obj) => {
      const p = Buffer.from(JSON.stringify(obj))
      const b = Buffer.alloc(5 + p.length)
      b.writeUInt32BE(p.length, 1)
      p.copy(b, 5)
      return b
    }
    const body = Buffer.concat([
      env({ start: { process: { pid: h.pid } } }),
      env({ data: { input: { stdin: Buffer.from('hello ').toString('base64') } } }),
      env({ keepalive: {} }),
      env({ data: { input: { stdin: Buffer.from('world').toString('base64') } } }),
    ])
    res = await envd('process.Process/StreamInput', body, 'application/connect+json')
    assert.equal(res.status, 200)
    const r = await h.wait()
    assert.equal(r.stdout, 'hello world')
  })
})
