// `getHost(port)` and an HTTP fetch of a server in the sandbox through the
// front's one endpoint (E2B's two headers; fetch cannot set Host), carried
// by the ingress with the sandbox's token. Needs envd's commands.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox } from 'e2b'

const endpoint = process.env.E2B_SANDBOX_URL

test('getHost and a fetch of a server in the sandbox', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.files.write('/tmp/site/hello.txt', 'hello through the ingress\n')
    const server = await sbx.commands.run('python3 -m http.server 8080 --bind 0.0.0.0 --directory /tmp/site', {
      background: true,
    })
    try {
      assert.ok(sbx.getHost(8080).startsWith(`8080-${sbx.sandboxId}.`))
      const route = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080' }
      const token = { 'X-Access-Token': sbx.envdAccessToken ?? '' }
      assert.ok(token['X-Access-Token'], 'the create answered an access token')
      let answer
      const deadline = Date.now() + 30_000
      do {
        answer = await fetch(`${endpoint}/hello.txt`, { headers: { ...route, ...token } })
        if (answer.status === 200) break
        await new Promise((resolve) => setTimeout(resolve, 500))
      } while (Date.now() < deadline)
      assert.equal(answer.status, 200)
      assert.equal(await answer.text(), 'hello through the ingress\n')
      const refused = await fetch(`${endpoint}/hello.txt`, { headers: route })
      assert.equal(refused.status, 401)
    } finally {
      await server.kill()
    }
  } finally {
    await sbx.kill()
  }
})
