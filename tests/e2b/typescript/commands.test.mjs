// envd's process service through the official `e2b` npm SDK (Node's fetch,
// HTTP/1.1): commands in the foreground and the background with onStdout
// and onStderr, stdin, kill, the command timeout, cwd, envs, user, a
// failing command's exit error, and a PTY (create, sendInput, resize, kill).
// Only environment variables point it here (tests/e2b/README.md).
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox, CommandExitError, TimeoutError } from 'e2b'

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
  if (!process.env[name]) throw new Error(`${name} is not set: run these tests with scripts/e2b-sdks test`)
}

async function withSandbox(body) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await body(sbx)
  } finally {
    await sbx.kill()
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

test('a foreground command, its output, cwd, envs and user', () =>
  withSandbox(async (sbx) => {
    const out = []
    const err = []
    const result = await sbx.commands.run('echo hi; echo oops >&2', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    })
    assert.equal(result.exitCode, 0)
    assert.equal(result.stdout, 'hi\n')
    assert.equal(result.stderr, 'oops\n')
    assert.equal(out.join(''), 'hi\n')
    assert.equal(err.join(''), 'oops\n')
    const env = await sbx.commands.run('pwd; echo $GREETING', { cwd: '/tmp', envs: { GREETING: 'hello' } })
    assert.equal(env.stdout, '/tmp\nhello\n')
    const root = await sbx.commands.run('id -un', { user: 'root' })
    assert.equal(root.stdout.trim(), 'root')
  }))

test('a failing command is a CommandExitError with its code', () =>
  withSandbox(async (sbx) => {
    await assert.rejects(sbx.commands.run('echo partial; exit 7'), (error) => {
      assert.ok(error instanceof CommandExitError, String(error))
      assert.equal(error.exitCode, 7)
      assert.equal(error.stdout, 'partial\n')
      return true
    })
  }))

test('a background command: stdin, output as it comes, kill', () =>
  withSandbox(async (sbx) => {
    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'line one\n')
    await sbx.commands.closeStdin(cat.pid)
    assert.equal((await cat.wait()).stdout, 'line one\n')

    const out = []
    const ticking = await sbx.commands.run('for i in 1 2 3; do echo tick$i; sleep 0.2; done; sleep 600', {
      background: true,
      onStdout: (d) => out.push(d),
    })
    const deadline = Date.now() + 30_000
    while (!out.join('').includes('tick3') && Date.now() < deadline) await sleep(100)
    assert.equal(out.join(''), 'tick1\ntick2\ntick3\n')
    assert.ok((await sbx.commands.list()).some((p) => p.pid === ticking.pid))
    assert.equal(await sbx.commands.kill(ticking.pid), true)
    await assert.rejects(ticking.wait(), CommandExitError)
    assert.equal(await sbx.commands.kill(ticking.pid), false)
  }))

test('a command past its timeout is a TimeoutError', () =>
  withSandbox(async (sbx) => {
    const started = Date.now()
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 2_000 }), TimeoutError)
    assert.ok(Date.now() - started < 20_000)
  }))

test('a PTY: create, resize, sendInput, kill', () =>
  withSandbox(async (sbx) => {
    const chunks = []
    const terminal = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => chunks.push(Buffer.from(d)) })
    await sbx.pty.resize(terminal.pid, { rows: 40, cols: 100 })
    await sbx.pty.sendInput(terminal.pid, new TextEncoder().encode('stty size; exit 3\n'))
    await assert.rejects(terminal.wait(), (error) => error instanceof CommandExitError && error.exitCode === 3)
    assert.ok(Buffer.concat(chunks).toString().includes('40 100'))

    const other = await sbx.pty.create({ rows: 24, cols: 80, onData: () => {} })
    assert.equal(await sbx.pty.kill(other.pid), true)
    await assert.rejects(other.wait(), CommandExitError)
  }))
