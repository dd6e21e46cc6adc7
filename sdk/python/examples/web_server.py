"""A web server in a sandbox, reached from the host through the server's
HTTP ingress.

``expose`` asks the server where guest port 8000 is served: ``url`` to
open in a browser (it carries the sandbox's traffic token), and for
programs ``path_url`` with the token in ``headers`` (Python's ``urllib``
cannot resolve ``*.localhost`` names, so it takes the path form). A port
made public at create (``public_ports=[8000]``) needs no token.
"""

import time
import urllib.error
import urllib.request

from airlock import Sandbox

# Requests to the ingress on this machine's loopback go there directly.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

with Sandbox.create() as sandbox:
    sandbox.files.write("/srv/index.html", "<h1>hello from a sandbox</h1>\n")
    sandbox.commands.run("python3 -m http.server 8000 --directory /srv", background=True)
    web = sandbox.expose(8000)
    print("host:", sandbox.get_host(8000))
    print("in a browser:", web.url)

    request = urllib.request.Request(web.path_url + "index.html", headers=web.headers)
    for attempt in range(100):
        try:
            print("urllib:", opener.open(request).read().decode(), end="")
            break
        except urllib.error.HTTPError as error:
            if error.code != 502:  # 502: nothing listens yet
                raise
            time.sleep(0.2)

    # A new token: the old one (and the URL printed above) stops working.
    sandbox.rotate_traffic_token()
    try:
        opener.open(request)
    except urllib.error.HTTPError as error:
        print("the old token now:", error.code)
