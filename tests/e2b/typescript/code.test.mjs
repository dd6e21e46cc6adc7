// runCode through the official @e2b/code-interpreter SDK, changed only by
// environment variables (tests/e2b/README.md): values, logs, errors, a
// matplotlib PNG and its chart, languages, and contexts (create with cwd,
// list, restart, remove). One sandbox of E2B's code-interpreter template
// serves the file.

import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

let sandbox

before(async () => {
  sandbox = await Sandbox.create({ timeoutMs: 600_000 })
})

after(async () => {
  await sandbox?.kill()
})

test('a value is its text, as IPython shows it', async () => {
  const execution = await sandbox.runCode('x = 41\nx + 1')
  assert.equal(execution.error, undefined)
  assert.equal(execution.text, '42')
  assert.equal(execution.results.length, 1)
  assert.equal(execution.results[0].isMainResult, true)
  assert.equal(execution.results[0].json, undefined)
})

test('logs reach the callbacks and the execution', async () => {
  const out = []
  const err = []
  const execution = await sandbox.runCode(
    "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
    { onStdout: (m) => out.push(m), onStderr: (m) => err.push(m) },
  )
  assert.equal(execution.logs.stdout.join(''), 'to stdout\n')
  assert.equal(execution.logs.stderr.join(''), 'to stderr\n')
  assert.equal(out.map((m) => m.line).join(''), 'to stdout\n')
  assert.equal(err.map((m) => m.line).join(''), 'to stderr\n')
})

test('an error has its name, value and traceback', async () => {
  const execution = await sandbox.runCode('def f():\n    return 1 / 0\nf()')
  assert.equal(execution.error?.name, 'ZeroDivisionError')
  assert.equal(execution.error?.value, 'division by zero')
  assert.match(execution.error?.traceback ?? '', /ZeroDivisionError/)
})

test('a matplotlib plot is a PNG', async () => {
  const execution = await sandbox.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()',
  )
  assert.equal(execution.error, undefined)
  const pngs = execution.results.filter((r) => r.png).map((r) => r.png)
  assert.equal(pngs.length, 1)
  const bytes = Buffer.from(pngs[0], 'base64')
  assert.deepEqual([...bytes.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47])
})

test("a line chart is the result's chart", async () => {
  const execution = await sandbox.runCode(
    "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9], label='squares')\n" +
      "plt.title('Squares')\nplt.show()",
  )
  assert.equal(execution.error, undefined)
  const [result] = execution.results.filter((r) => r.png)
  assert.equal(result.chart?.type, 'line')
  assert.equal(result.chart?.title, 'Squares')
  assert.deepEqual(result.chart?.elements, [
    { label: 'squares', points: [[1, 1], [2, 4], [3, 9]] },
  ])
})

test('bash runs and other languages are refused by name', async () => {
  const execution = await sandbox.runCode('echo hi from bash', { language: 'bash' })
  assert.equal(execution.logs.stdout.join(''), 'hi from bash\n')
  await assert.rejects(sandbox.runCode('1 + 1', { language: 'r' }), /400/)
})

test('contexts keep state apart and start in their cwd', async () => {
  const context = await sandbox.createCodeContext({ cwd: '/tmp' })
  assert.equal(context.cwd, '/tmp')
  assert.equal(context.language, 'python')
  const cwd = await sandbox.runCode('import os\nos.getcwd()', { context })
  assert.equal(cwd.text, "'/tmp'")

  const marker = `v_${Math.random().toString(16).slice(2, 10)}`
  await sandbox.runCode(`${marker} = 7`, { context })
  assert.equal((await sandbox.runCode(marker, { context })).text, '7')
  assert.equal((await sandbox.runCode(marker)).error?.name, 'NameError')

  const listed = await sandbox.listCodeContexts()
  assert.ok(listed.some((c) => c.id === context.id && c.cwd === '/tmp'))

  await sandbox.restartCodeContext(context)
  assert.equal((await sandbox.runCode(marker, { context })).error?.name, 'NameError')

  await sandbox.removeCodeContext(context)
  const left = await sandbox.listCodeContexts()
  assert.ok(!left.some((c) => c.id === context.id))
})
