"""The asyncio client: :class:`~airlock.sandbox_async.main.AsyncSandbox` and
the modules it carries (commands, files, pty, network, code, snapshots),
and :class:`~airlock.sandbox_async.template.AsyncTemplate`."""
