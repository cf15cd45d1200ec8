// The E2B code-interpreter JS SDK half of bench/code.sh: create -> first runCode('1+1')
// result, and runCode('1+1') round trips on a warm context, through the unmodified
// @e2b/code-interpreter (installed by bench/code.sh from tests/e2b/code-interpreter's lock).
// Configured as an E2B user would be (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY).
// Usage: node code_e2b.mjs CREATES ROUND_TRIPS   prints one JSON object
import { Sandbox } from '@e2b/code-interpreter'

const creates = Number(process.argv[2] || 5)
const trips = Number(process.argv[3] || 20)
const ms = (t) => Number(t.toFixed(1))
const out = { create: [], first_result: [], create_to_first_result: [], warm: [], inside: [] }

// The baseline: the same /execute of 1+1 made inside the sandbox, straight to the kernel
// runner on 127.0.0.1:49999 (Python's http.client, one keep-alive connection), no spaced.
const INSIDE = `
import http.client, json, sys, time
N = int(sys.argv[1])
c = http.client.HTTPConnection("127.0.0.1", 49999)
def run():
    c.request("POST", "/execute", body=json.dumps({"code": "1+1"}), headers={"Content-Type": "application/json"})
    r = c.getresponse(); body = r.read().decode()
    assert '"text": "2"' in body or '"text":"2"' in body, body
for _ in range(3): run()
out = []
for _ in range(N):
    t = time.perf_counter(); run(); out.append(round((time.perf_counter() - t) * 1000, 1))
print(json.dumps(out))
`

for (let i = 0; i < creates; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  const t1 = performance.now()
  const r = await sbx.runCode('1+1')
  const t2 = performance.now()
  if (r.text !== '2') throw new Error(`1+1 gave ${JSON.stringify(r)}`)
  out.create.push(ms(t1 - t0))
  out.first_result.push(ms(t2 - t1))
  out.create_to_first_result.push(ms(t2 - t0))
  if (i === creates - 1) {
    for (let j = 0; j < 3; j++) await sbx.runCode('1+1')  // warm-up
    for (let j = 0; j < trips; j++) {
      const a = performance.now()
      const w = await sbx.runCode('1+1')
      out.warm.push(ms(performance.now() - a))
      if (w.text !== '2') throw new Error('warm 1+1 failed')
    }
    await sbx.files.write('/tmp/bench_inside.py', INSIDE)
    const r = await sbx.commands.run(`python3 /tmp/bench_inside.py ${trips}`)
    out.inside = JSON.parse(r.stdout.trim())
  }
  await sbx.kill()
}
console.log(JSON.stringify(out))
