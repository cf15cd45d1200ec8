// What the E2B SDK suite's files share (e2b.test.mjs, e2b_platform.test.mjs): the SDK
// release under test, the environment it is configured by, and the sandboxes a file made
// (killed when that file's tests are done). Configured only by the environment, as an E2B
// user would:
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT E2B_API_KEY=<key>
// (or https:// with NODE_EXTRA_CA_CERTS naming spaced's CA, docs/tls.md), plus
// SPACE_MAX_FILE_BYTES (spaced's --max-file-bytes) for the oversize-upload check and
// SPACE_TLS_CA (that CA) when spaced serves TLS.
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { after } from 'node:test'

// E2B_SDK_PACKAGE names the SDK release to drive: `e2b` (the newest pinned) or one of the
// older releases package.json pins under npm aliases (e2b-2-7, e2b-2-45).
export const SDK_PACKAGE = process.env.E2B_SDK_PACKAGE || 'e2b'
export const {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  NotFoundError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
  Volume,
  VolumeError,
  FilesystemEventType,
  Template,
  BuildError,
} = await import(SDK_PACKAGE)
export const SDK_VERSION = JSON.parse(
  fs.readFileSync(new URL(`./node_modules/${SDK_PACKAGE}/package.json`, import.meta.url), 'utf8'),
).version

// Whether the SDK under test is at least release `want` ("2.19.0").
export const sdkAtLeast = (want) => {
  const a = SDK_VERSION.split('.').map(Number)
  const b = want.split('.').map(Number)
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0)
  return true
}

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} must be set`)
}
export const API = process.env.E2B_API_URL
export const MAX_FILE_BYTES = Number(process.env.SPACE_MAX_FILE_BYTES || 0)
export const RUN = `run-${process.pid}-${Date.now()}`
// E2B's control plane on the raw wire, with the suite's key.
export const KEY = process.env.E2B_API_KEY
export const api = (path, opts = {}) =>
  fetch(`${API}${path}`, {
    ...opts,
    headers: { 'X-API-KEY': KEY, 'Content-Type': 'application/json', ...(opts.headers ?? {}) },
  })

export const created = []
export async function create(opts = {}) {
  // SPACE's busybox base by its full name: E2B's `base` is SPACE's e2b-base (docs/e2b-compat.md).
  const sbx = await Sandbox.create('base:latest', {
    timeoutMs: 600_000,
    ...opts,
    metadata: { suite: RUN, ...(opts.metadata ?? {}) },
  })
  created.push(sbx)
  return sbx
}

export async function waitFor(pred, what, ms = 10_000) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await pred()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  assert.fail(`timed out waiting for ${what}`)
}

after(async () => {
  for (const s of created) await s.kill().catch(() => {})
})
