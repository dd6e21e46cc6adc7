"""A background server in a sandbox, as E2B's docs start one: files written
for it, `python3 -m http.server` in the background, the sandbox asked for
its host, the page fetched from inside the sandbox (by `localhost`, which
the default image's /etc/hosts names), and the server killed.

Written against E2B's SDK; the suite runs it with the import changed only.
(From outside, E2B code fetches `https://{get_host(port)}`; Airlock's
ingress answers plain HTTP on a name urllib cannot resolve, so the suite
fetches through it separately, the documented way: `expose(port)`.)"""

import time

from e2b import CommandExitException, Sandbox

sandbox = Sandbox.create()
try:
    sandbox.files.write("site/index.html", "<h1>hello from the sandbox</h1>")
    server = sandbox.commands.run("cd ~/site && python3 -m http.server 8000", background=True)
    host = sandbox.get_host(8000)
    assert host.startswith("8000-"), host
    fetch = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://localhost:8000/').read().decode())\""
    for _ in range(100):
        try:
            page = sandbox.commands.run(fetch)
            break
        except Exception:
            time.sleep(0.2)
    else:
        raise AssertionError("the server never answered")
    assert page.stdout == "<h1>hello from the sandbox</h1>\n", page.stdout
    assert any(p.pid == server.pid for p in sandbox.commands.list())
    assert server.kill() is True
    try:
        server.wait()
    except CommandExitException as killed:
        assert killed.exit_code != 0
    assert server.kill() is False  # E2B: false for a command that has ended
    print(f"served at https://{host}")
finally:
    sandbox.kill()
print("ok")
