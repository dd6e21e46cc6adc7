// envd's files through E2B's own JavaScript SDK, changed only by
// environment variables (tests/e2b/README.md): text, bytes, blobs and
// streams, several files in one write, 100 MiB both ways with the same
// sha256, list, exists, rename, remove, makeDir, getInfo, watchDir, and
// bad input answered in E2B's shape while the server keeps serving.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'

import { Sandbox, FileType, FilesystemEventType, NotFoundError, FileNotFoundError, InvalidArgumentError } from 'e2b'

const MIB = 1 << 20
let sbx

before(async () => {
  sbx = await Sandbox.create()
})

after(async () => {
  await sbx?.kill()
})

function envd(token) {
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': token }
  return (path, init = {}) =>
    fetch(new URL(path, process.env.E2B_SANDBOX_URL), { ...init, headers: { ...headers, ...(init.headers ?? {}) } })
}

test('text, bytes and blobs', async () => {
  const info = await sbx.files.write('/tmp/js/hello.txt', 'héllo\n')
  assert.equal(info.path, '/tmp/js/hello.txt')
  assert.equal(info.name, 'hello.txt')
  assert.equal(await sbx.files.read('/tmp/js/hello.txt'), 'héllo\n')
  const bytes = Uint8Array.from({ length: 256 }, (_, i) => i)
  await sbx.files.write('/tmp/js/b.bin', bytes)
  assert.deepEqual(await sbx.files.read('/tmp/js/b.bin', { format: 'bytes' }), bytes)
  const blob = await sbx.files.read('/tmp/js/b.bin', { format: 'blob' })
  assert.equal(blob.size, 256)
  await sbx.files.write('/tmp/js/empty', new Uint8Array(0))
  assert.equal((await sbx.files.read('/tmp/js/empty', { format: 'bytes' })).length, 0)
})

test('gzip both ways', async () => {
  const data = new Uint8Array(3 * MIB).fill(122)
  data.set(randomBytes(MIB), 0)
  await sbx.files.write('/tmp/js/gz.bin', data, { gzip: true })
  assert.equal((await sbx.files.getInfo('/tmp/js/gz.bin')).size, data.length)
  assert.deepEqual(await sbx.files.read('/tmp/js/gz.bin', { format: 'bytes', gzip: true }), data)
})

test('relative paths resolve in the home', async () => {
  const info = await sbx.files.write('rel-js.txt', 'home')
  assert.ok(info.path.startsWith('/') && info.path.endsWith('/rel-js.txt'), info.path)
  assert.equal(await sbx.files.read('rel-js.txt'), 'home')
})

test('a list of files in one write', async () => {
  const infos = await sbx.files.write([
    { path: '/tmp/jsmany/a.txt', data: 'a' },
    { path: '/tmp/jsmany/sub/b.txt', data: new Uint8Array([98, 98]) },
  ])
  assert.deepEqual(infos.map((i) => i.path), ['/tmp/jsmany/a.txt', '/tmp/jsmany/sub/b.txt'])
  assert.equal(await sbx.files.read('/tmp/jsmany/sub/b.txt'), 'bb')
})

async function sha256OfStream(stream) {
  const hash = createHash('sha256')
  for await (const chunk of stream) hash.update(chunk)
  return hash.digest('hex')
}

test('100 MiB both ways with the same sha256', async () => {
  const block = randomBytes(MIB)
  const want = createHash('sha256')
  for (let i = 0; i < 100; i++) want.update(block)
  const digest = want.digest('hex')
  let sent = 0
  const upload = new ReadableStream({
    pull(controller) {
      if (sent === 100) return controller.close()
      sent += 1
      controller.enqueue(new Uint8Array(block))
    },
  })
  await sbx.files.write('/tmp/jsbig.bin', upload)
  assert.equal((await sbx.files.getInfo('/tmp/jsbig.bin')).size, 100 * MIB)
  const stream = await sbx.files.read('/tmp/jsbig.bin', { format: 'stream' })
  assert.equal(await sha256OfStream(stream), digest)
  await sbx.files.remove('/tmp/jsbig.bin')
})

test('list, exists, getInfo', async () => {
  await sbx.files.write([
    { path: '/tmp/jsls/one.txt', data: '1' },
    { path: '/tmp/jsls/d/two.txt', data: '22' },
  ])
  const entries = await sbx.files.list('/tmp/jsls')
  assert.deepEqual(entries.map((e) => e.name).sort(), ['d', 'one.txt'])
  const types = Object.fromEntries(entries.map((e) => [e.name, e.type]))
  assert.deepEqual(types, { d: FileType.DIR, 'one.txt': FileType.FILE })
  const deep = await sbx.files.list('/tmp/jsls', { depth: 2 })
  assert.deepEqual(deep.map((e) => e.path).sort(), ['/tmp/jsls/d', '/tmp/jsls/d/two.txt', '/tmp/jsls/one.txt'])
  assert.equal(await sbx.files.exists('/tmp/jsls/one.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/jsls/nope'), false)
  const info = await sbx.files.getInfo('/tmp/jsls/d/two.txt')
  assert.equal(info.size, 2)
  assert.equal(info.type, FileType.FILE)
  assert.ok(info.modifiedTime instanceof Date)
  await assert.rejects(sbx.files.getInfo('/tmp/jsls/nope'), (e) => e instanceof FileNotFoundError || e instanceof NotFoundError)
})

test('rename, remove, makeDir', async () => {
  assert.equal(await sbx.files.makeDir('/tmp/jsmk/a'), true)
  assert.equal(await sbx.files.makeDir('/tmp/jsmk/a'), false)
  await sbx.files.write('/tmp/jsmk/x.txt', 'x')
  const moved = await sbx.files.rename('/tmp/jsmk/x.txt', '/tmp/jsmk/a/y.txt')
  assert.equal(moved.path, '/tmp/jsmk/a/y.txt')
  assert.equal(await sbx.files.exists('/tmp/jsmk/x.txt'), false)
  await sbx.files.remove('/tmp/jsmk')
  assert.equal(await sbx.files.exists('/tmp/jsmk'), false)
})

test('a missing file is FileNotFoundError', async () => {
  await assert.rejects(sbx.files.read('/tmp/no/such/file'), (e) => e instanceof FileNotFoundError || e instanceof NotFoundError)
})

test('watchDir reports the file written', async () => {
  await sbx.files.makeDir('/tmp/jsw')
  const seen = []
  const handle = await sbx.files.watchDir('/tmp/jsw', (event) => seen.push([event.name, event.type]))
  try {
    await sbx.files.write('/tmp/jsw/file.txt', 'watched')
    await sbx.files.remove('/tmp/jsw/file.txt')
    const deadline = Date.now() + 20000
    while (Date.now() < deadline && !seen.some(([n, t]) => n === 'file.txt' && t === FilesystemEventType.REMOVE)) {
      await new Promise((r) => setTimeout(r, 200))
    }
    assert.ok(seen.some(([n, t]) => n === 'file.txt' && t === FilesystemEventType.WRITE), JSON.stringify(seen))
    assert.ok(seen.some(([n, t]) => n === 'file.txt' && t === FilesystemEventType.REMOVE), JSON.stringify(seen))
    assert.ok(seen.every(([n]) => n === 'file.txt'), JSON.stringify(seen))
  } finally {
    await handle.stop()
  }
  await assert.rejects(sbx.files.watchDir('/tmp/no/such/dir', () => {}))
})

test('bad input in E2B shape, and the server keeps serving', async () => {
  // A missing or wrong access token is test_files.py's: failed
  // authentications count against the client's address (the front's
  // throttle, shared by every suite on one server), so the suites make
  // as few as they can.
  const raw = envd(sbx.envdAccessToken)
  let r = await raw('/files', {
    method: 'POST',
    headers: { 'Content-Type': 'multipart/form-data; boundary=xx' },
    body: '--xx\r\nContent-Disposition: form-data; name="file"; filename="/tmp/jscut"\r\n\r\nabc',
  })
  assert.equal(r.status, 400)
  assert.equal((await r.json()).code, 400)
  r = await raw('/files?path=%2Ftmp%2Fa%00b')
  assert.equal(r.status, 400)
  assert.equal(await sbx.files.exists('/tmp/jscut'), false)
  await assert.rejects(sbx.files.write('/tmp/a\0b', 'x'), (e) => e instanceof InvalidArgumentError || e instanceof Error)
  await assert.rejects(sbx.files.remove('/tmp/..'), (e) => e instanceof InvalidArgumentError)
  assert.equal(await sbx.files.exists('/etc'), true)
  assert.equal(await sbx.files.read('/tmp/js/hello.txt'), 'héllo\n')
})
