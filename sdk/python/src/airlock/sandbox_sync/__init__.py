"""The blocking client: :class:`~airlock.sandbox_sync.main.Sandbox` and the
modules it carries (commands, files, pty, network, code, snapshots), and
:class:`~airlock.sandbox_sync.template.Template`."""
