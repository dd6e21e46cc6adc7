"""The core the blocking and the asyncio clients share: everything but the
calls to the server.

Each module serves one part of the API, and each is the one place where
its requests are built, its answers become the SDK's models, and its
arguments are checked: :mod:`.lifecycle` (sandboxes: create, list,
pause, the connection options), :mod:`.commands` (programs, and the
decision a handle takes on each event), :mod:`.pty` (terminals),
:mod:`.output` (a program's or a cell's output as it streams in),
:mod:`.files` (files, watches, change trackers), :mod:`.tar` (directory
trees as tar streams), :mod:`.code` (cells and contexts),
:mod:`.network` (egress rules and the audit), :mod:`.ingress` (guest ports
reached from outside), :mod:`.snapshots` (named snapshots, and a create
naming one as its template), :mod:`.templates` (E2B's template builder,
the build's context and events), :mod:`.clock` (the API's times), :mod:`.limits`
(message and chunk sizes) and :mod:`.dual` (calls that work on an instance
and on the class).

:mod:`airlock.sandbox_sync` and :mod:`airlock.sandbox_async` hold only
the calls: each method builds its request here, makes the call (blocking,
or awaited), and hands the answer back here. Nothing in this package opens
a channel or waits for the server (``tests/test_core.py`` checks its
imports).
"""
