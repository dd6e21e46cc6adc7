// The control plane through the official `e2b` npm SDK: create, kill,
// list with metadata, connect, setTimeout, getInfo, metrics, pause and
// resume (connect), fork (of a paused sandbox, which stays paused),
// snapshots (a file and a running program in a sandbox created from one,
// listed, deleted, another key's not found), and the refusals. Only
// environment variables point it here (tests/e2b/README.md).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'

import { Sandbox, NotFoundError, AuthenticationError, SandboxError } from 'e2b'

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_TEST_OTHER_KEY']) {
  if (!process.env[name]) throw new Error(`${name} is not set: run these tests with scripts/e2b-sdks test`)
}
const otherKey = process.env.E2B_TEST_OTHER_KEY

test('create, getInfo, setTimeout, metrics, kill', async () => {
  const tag = randomUUID()
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { tag } })
  try {
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.deepEqual(info.metadata, { tag })
    assert.equal(info.state, 'running')
    const before = info.endAt.getTime()
    await sbx.setTimeout(600_000)
    const after = (await sbx.getInfo()).endAt.getTime()
    assert.ok(after - before > 300_000, `${before} -> ${after}`)
    // The writable root starts empty: 2 MiB written into it show.
    await sbx.commands.run('head -c 2097152 /dev/urandom > ~/metrics.fill')
    const metrics = await sbx.getMetrics()
    assert.equal(metrics.length, 1)
    assert.ok(metrics[0].memTotal > 0)
    assert.ok(metrics[0].diskUsed >= 2 ** 21 && metrics[0].diskUsed <= metrics[0].diskTotal, `${metrics[0].diskUsed}`)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
})

test('list with metadata, in pages', async () => {
  const tag = randomUUID()
  const a = await Sandbox.create({ timeoutMs: 120_000, metadata: { tag, n: '1' } })
  const b = await Sandbox.create({ timeoutMs: 120_000, metadata: { tag, n: '2' } })
  try {
    const all = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    assert.deepEqual(all.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
    const one = await Sandbox.list({ query: { metadata: { tag, n: '2' } } }).nextItems()
    assert.deepEqual(one.map((s) => s.sandboxId), [b.sandboxId])
    const paginator = Sandbox.list({ query: { metadata: { tag } }, limit: 1 })
    const seen = []
    while (paginator.hasNext) {
      const page = await paginator.nextItems()
      assert.ok(page.length <= 1)
      seen.push(...page.map((s) => s.sandboxId))
    }
    assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort())
  } finally {
    await a.kill()
    await b.kill()
  }
})

test('pause, a fork of the paused sandbox, then connect resumes', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.files.write('/tmp/parent.txt', 'written before the pause')
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    // A paused sandbox forks as a running one does, and stays paused.
    const [child] = await sbx.fork({ count: 1 })
    assert.ok(!(child instanceof Error), String(child))
    try {
      assert.notEqual(child.sandboxId, sbx.sandboxId)
      assert.equal((await child.getInfo()).state, 'running')
      assert.equal(await child.files.read('/tmp/parent.txt'), 'written before the pause')
      assert.equal((await sbx.getInfo()).state, 'paused')
    } finally {
      await child.kill()
    }
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.equal((await sbx.getInfo()).state, 'running')
  } finally {
    await sbx.kill()
  }
})

test("a snapshot starts sandboxes with its file and running program; listed, deleted; another key's is not found", async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  const name = `e2b-${randomUUID().slice(0, 12)}`
  const notFound = (error) => {
    assert.equal(error.statusCode, 404, String(error))
    return true
  }
  try {
    await sbx.files.write('/tmp/snap.txt', 'in the snapshot')
    const counter = await sbx.commands.run(
      'i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done',
      { background: true },
    )
    await sbx.commands.run('while [ ! -s /tmp/count ]; do sleep 0.05; done', { timeoutMs: 30_000 })
    const info = await sbx.createSnapshot({ name })
    assert.deepEqual(info, { snapshotId: name, names: [name] })
    assert.equal((await sbx.getInfo()).state, 'running')
    const mine = await sbx.listSnapshots().nextItems()
    assert.deepEqual(mine.map((s) => s.snapshotId), [name])

    const copy = await Sandbox.create(info.snapshotId, { timeoutMs: 120_000 })
    try {
      assert.notEqual(copy.sandboxId, sbx.sandboxId)
      assert.equal((await copy.getInfo()).templateId, name)
      assert.equal(await copy.files.read('/tmp/snap.txt'), 'in the snapshot')
      const running = (await copy.commands.list()).map((p) => p.pid)
      assert.ok(running.includes(counter.pid), `${counter.pid} not in ${running}`)
      const before = Number(await copy.files.read('/tmp/count'))
      await copy.commands.run('sleep 1')
      assert.ok(Number(await copy.files.read('/tmp/count')) > before, 'the program runs on')
    } finally {
      await copy.kill()
    }

    const theirs = await Sandbox.listSnapshots({ apiKey: otherKey }).nextItems()
    assert.ok(!theirs.some((s) => s.snapshotId === name))
    await assert.rejects(Sandbox.create(name, { apiKey: otherKey }), notFound)
    assert.equal(await Sandbox.deleteSnapshot(name, { apiKey: otherKey }), false)

    assert.equal(await Sandbox.deleteSnapshot(name), true)
    assert.equal(await Sandbox.deleteSnapshot(name), false)
    const left = await Sandbox.listSnapshots().nextItems()
    assert.ok(!left.some((s) => s.snapshotId === name))
    await assert.rejects(Sandbox.create(name), notFound)
  } finally {
    await Sandbox.deleteSnapshot(name).catch(() => false)
    await sbx.kill()
  }
})

test("another key's sandbox is not found; a wrong key is refused", async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
    assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: otherKey }), false)
    const theirs = await Sandbox.list({ apiKey: otherKey }).nextItems()
    assert.ok(!theirs.some((s) => s.sandboxId === sbx.sandboxId))
    await assert.rejects(Sandbox.create({ apiKey: 'e2b_not-a-key-of-this-server' }), AuthenticationError)
    assert.equal((await sbx.getInfo()).state, 'running')
  } finally {
    await sbx.kill()
  }
})

test('an unknown template is refused by name', async () => {
  await assert.rejects(Sandbox.create('no-such-template-here'), (error) => {
    assert.ok(error instanceof SandboxError || error instanceof NotFoundError, String(error))
    assert.match(String(error.message), /no-such-template-here/)
    return true
  })
})
