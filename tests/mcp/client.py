"""Drives `airlock mcp` with the official MCP Python SDK, as an agent host would.

tests/tests/mcp.rs runs this file with the virtualenv scripts/mcp-client-venv
makes, against a private Airlock server with real VMs:

    client.py stdio AIRLOCK_BINARY [CHECK...]
    client.py http URL KEY CA_FILE [CHECK...] [refusals] [idle=SECONDS]

Each check prints `ok NAME` or `FAIL NAME: why`; every sandbox a call used is
printed as `sandbox ID` (the test looks for them on the server after the
client has gone). The exit code is 1 when a check failed.
"""

import asyncio
import base64
import os
import sys
import time
import traceback
import urllib.error
import urllib.request

import httpx2
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOOLS = {
    "create_sandbox",
    "list_sandboxes",
    "kill_sandbox",
    "pause_sandbox",
    "resume_sandbox",
    "run_command",
    "run_code",
    "read_file",
    "write_file",
    "list_files",
    "changed_files",
    "network_log",
    "expose_port",
    "snapshot_sandbox",
    "list_snapshots",
    "delete_snapshot",
}
# Parameters each tool must take, and which of them are required.
PARAMETERS = {
    "create_sandbox": ({"image", "template", "snapshot", "memory_mib", "lifetime_secs", "allow_net", "env"},
                       set()),
    "run_command": ({"command", "sandbox_id", "cwd", "env", "timeout_secs", "background"}, {"command"}),
    "run_code": ({"code", "sandbox_id", "language", "context", "timeout_secs"}, {"code"}),
    "read_file": ({"path", "sandbox_id", "offset", "length"}, {"path"}),
    "write_file": ({"path", "content", "sandbox_id", "append"}, {"path", "content"}),
    "list_files": ({"path", "sandbox_id", "depth"}, set()),
    "changed_files": ({"sandbox_id"}, set()),
    "network_log": ({"sandbox_id"}, set()),
    "expose_port": ({"port", "sandbox_id"}, {"port"}),
    "kill_sandbox": ({"sandbox_id"}, set()),
    "pause_sandbox": ({"sandbox_id", "to_disk"}, set()),
    "resume_sandbox": ({"sandbox_id"}, set()),
    "snapshot_sandbox": ({"sandbox_id", "name"}, set()),
    "list_snapshots": ({"sandbox_id"}, set()),
    "delete_snapshot": ({"name"}, {"name"}),
}
BIG = 10 * 1024 * 1024
# What the exposed server serves.
PAGE = b"served from the sandbox\n"
# How long the server started in the background may take to answer.
SERVE_LIMIT = 120
# What the 10 MiB command prints, line by line.
BIG_LINE = b"0123456789\n"


class Failed(Exception):
    pass


def expect(condition, why):
    if not condition:
        raise Failed(why)


def enums(schema):
    """Every enum in a schema and its subschemas."""
    if isinstance(schema, dict):
        if "enum" in schema:
            yield schema["enum"]
        for value in schema.values():
            yield from enums(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from enums(value)


def texts(result):
    return "".join(block.text for block in result.content if block.type == "text")


class Checks:
    def __init__(self, client):
        self.client = client
        self.sandboxes = []

    async def call(self, tool, arguments):
        result = await self.client.call_tool(tool, arguments)
        sandbox = (result.structured_content or {}).get("sandbox_id")
        if sandbox and sandbox not in self.sandboxes:
            self.sandboxes.append(sandbox)
            print(f"sandbox {sandbox}", flush=True)
        return result

    async def tools(self):
        listed = await self.client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        expect(set(tools) == TOOLS, f"tools {sorted(tools)}")
        for name, tool in tools.items():
            expect(len(tool.description or "") >= 40, f"{name} has a short description")
            schema = tool.input_schema
            expect(schema.get("type") == "object", f"{name}: {schema}")
            expect(schema.get("additionalProperties") is False, f"{name} takes unknown fields")
            properties = schema.get("properties", {})
            wanted, required = PARAMETERS.get(name, (set(), set()))
            expect(wanted <= set(properties), f"{name} lacks {wanted - set(properties)}")
            expect(set(schema.get("required", [])) == required, f"{name} requires {schema.get('required')}")
            for parameter, spec in properties.items():
                description = spec.get("description", "")
                expect(len(description) >= 10, f"{name}.{parameter} is not described")
                expect("\n" not in description, f"{name}.{parameter}: a broken line")
        command = tools["run_command"].input_schema["properties"]
        expect("string" in command["command"]["type"], f"command: {command['command']}")
        expect("boolean" in command["background"]["type"], f"background: {command['background']}")
        net = tools["create_sandbox"].input_schema["properties"]["allow_net"]
        expect(net["type"] == "array" and net["items"]["type"] == "string", f"allow_net: {net}")
        expect(["python", "bash"] in list(enums(tools["run_code"].input_schema)), "language: python, bash")

    async def value(self):
        result = await self.call("run_code", {"code": "1 + 1"})
        expect(not result.is_error, texts(result))
        expect(texts(result).strip() == "2", repr(texts(result)))
        expect(result.structured_content["value"] == "2", result.structured_content)

    async def state(self):
        first = await self.call("run_code", {"code": "x = 41"})
        expect(not first.is_error, texts(first))
        second = await self.call("run_code", {"code": "x + 1"})
        expect(texts(second).strip() == "42", repr(texts(second)))
        # The same sandbox answered both: the session's own.
        expect(first.structured_content["sandbox_id"] == second.structured_content["sandbox_id"],
               "two sandboxes")

    async def exit3(self):
        result = await self.call("run_command", {"command": "echo before; exit 3"})
        expect(result.is_error is True, f"not an error result: {texts(result)}")
        expect(result.structured_content["exit_code"] == 3, result.structured_content)
        expect("exit code 3" in texts(result) and "before" in texts(result), texts(result))

    async def big(self):
        result = await self.call("run_command", {"command": f"yes 0123456789 | head -c {BIG}"})
        text = texts(result)
        expect(not result.is_error, text[:2000])
        expect(result.structured_content["stdout_bytes"] == BIG, result.structured_content)
        expect(len(text) < 40_000, f"{len(text)} characters came back")
        log = result.structured_content["stdout_log"]
        expect(log and log in text, f"no log named: {result.structured_content}")
        expect("cut here" in text and "read_file" in text, text[:6000])
        # The log is whole: its size, and its end read back through read_file.
        size = await self.call("run_command", {"command": f"wc -c < {log}"})
        expect(texts(size).split("---")[-1].strip().endswith(str(BIG)), texts(size))
        whole = (BIG_LINE * (BIG // len(BIG_LINE) + 1))[:BIG]
        end = await self.call("read_file", {"path": log, "offset": BIG - 25, "length": 25})
        expect(texts(end).endswith(whole[-25:].decode()), repr(texts(end)))

    async def plot(self):
        created = await self.call("create_sandbox", {"image": "test-matplotlib", "memory_mib": 1024})
        expect(not created.is_error, texts(created))
        sandbox = created.structured_content["sandbox_id"]
        code = "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])\nplt.title('squares')\nplt.show()"
        result = await self.call("run_code", {"code": code, "sandbox_id": sandbox, "timeout_secs": 600})
        expect(not result.is_error, texts(result))
        images = [block for block in result.content if block.type == "image"]
        expect(len(images) == 1, f"{len(images)} images: {texts(result)}")
        expect(images[0].mime_type == "image/png", images[0].mime_type)
        expect(base64.b64decode(images[0].data).startswith(PNG_SIGNATURE), "not a PNG")

    async def expose(self):
        """A server started in the background answers through the URL expose_port gives."""
        written = await self.call("write_file", {"path": "/tmp/www/page.txt", "content": PAGE.decode()})
        expect(not written.is_error, texts(written))
        started = await self.call("run_command", {
            "command": "cd /tmp/www && python3 -m http.server 8000", "background": True})
        expect(not started.is_error, texts(started))
        bad = await self.call("expose_port", {"port": 70000})
        expect(bad.is_error and "65535" in texts(bad), texts(bad))
        result = await self.call("expose_port", {"port": 8000})
        expect(not result.is_error, texts(result))
        found = result.structured_content
        token = found["token"]
        expect(token and not found["public"], found)
        expect(found["url"] in texts(result) and token in texts(result), texts(result))
        # The path form with the token answers the file's bytes, once the server listens.
        page = found["path_url"] + "page.txt"
        deadline = time.monotonic() + SERVE_LIMIT
        while True:
            status, body = await fetch(page, {"X-Airlock-Token": token})
            if status == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        expect(status == 200 and body == PAGE, f"{status} {body[:300]!r}")
        # The named form: the ingress's address, with the Host header.
        status, body = await fetch(f"http://{found['address']}/page.txt",
                                   {"Host": found["host"], "X-Airlock-Token": token})
        expect(status == 200 and body == PAGE, f"{status} {body[:300]!r}")
        # Without the token: refused.
        status, _ = await fetch(page, {})
        expect(status == 401, f"{status} without the token")
        # The connections are in the sandbox's network log.
        log = await self.call("network_log", {})
        expect(not log.is_error and "ingress" in texts(log), texts(log))

    async def snapshot(self):
        """A snapshot of the session's sandbox starts a copy with its file and its Python
        variable; it is listed, deleted, and then no longer started from."""
        written = await self.call("write_file", {"path": "/root/snap.txt", "content": "from the snapshot"})
        expect(not written.is_error, texts(written))
        cell = await self.call("run_code", {"code": "kept = 6 * 7"})
        expect(not cell.is_error, texts(cell))
        name = f"mcp-{os.getpid()}"
        taken = await self.call("snapshot_sandbox", {"name": name})
        expect(not taken.is_error and taken.structured_content["snapshot"] == name, texts(taken))
        expect(taken.structured_content["size_bytes"] > 0, taken.structured_content)
        listed = await self.call("list_snapshots", {})
        expect(name in listed.structured_content["snapshots"], texts(listed))
        expect(name in texts(listed), texts(listed))
        created = await self.call("create_sandbox", {"snapshot": name})
        expect(not created.is_error, texts(created))
        copy = created.structured_content["sandbox_id"]
        expect(created.structured_content["snapshot"] == name, created.structured_content)
        expect(copy != taken.structured_content["source_sandbox_id"], "the copy is the source")
        read = await self.call("read_file", {"path": "/root/snap.txt", "sandbox_id": copy})
        expect("from the snapshot" in texts(read), texts(read))
        value = await self.call("run_code", {"code": "kept", "sandbox_id": copy})
        expect(texts(value).strip() == "42", repr(texts(value)))
        deleted = await self.call("delete_snapshot", {"name": name})
        expect(not deleted.is_error, texts(deleted))
        listed = await self.call("list_snapshots", {})
        expect(name not in listed.structured_content["snapshots"], texts(listed))
        again = await self.call("create_sandbox", {"snapshot": name})
        expect(again.is_error and "list_snapshots" in texts(again), texts(again))
        gone = await self.call("delete_snapshot", {"name": name})
        expect(gone.is_error and f"no snapshot named {name}" in texts(gone), texts(gone))
        # The copy runs on without its snapshot.
        still = await self.call("run_command", {"command": "cat /root/snap.txt", "sandbox_id": copy})
        expect("from the snapshot" in texts(still), texts(still))

    async def expose_refused(self):
        """A server that serves no ingress is an error result saying how to serve it."""
        result = await self.call("expose_port", {"port": 8000})
        expect(result.is_error and "--ingress" in texts(result), texts(result))


async def fetch(url, headers):
    """GET `url`: its status and body, whatever the status."""
    # Straight to the ingress on loopback, whatever proxy the environment names.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get():
        request = urllib.request.Request(url, headers=headers)
        try:
            with opener.open(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError as error:
            return None, str(error).encode()
    return await asyncio.to_thread(get)


async def run(client, names):
    checks = Checks(client)
    failed = False
    for name in names:
        try:
            await getattr(checks, name)()
            print(f"ok {name}", flush=True)
        except Exception as error:  # a check's failure is reported, the rest still run
            failed = True
            detail = str(error) if isinstance(error, Failed) else traceback.format_exc()
            print(f"FAIL {name}: {detail}", flush=True)
    return failed


async def refusals(url, key, ca):
    """Requests without a key, or with a wrong one, never reach a session."""
    failed = False
    wrong = "ak_" + "A" * 43
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "refusals", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(verify=ca) as http:
        for name, extra in [("no_key", {}), ("wrong_key", {"Authorization": f"Bearer {wrong}"})]:
            response = await http.post(url, json=initialize, headers=headers | extra)
            if response.status_code == 401 and "API key" in response.text:
                print(f"ok {name}", flush=True)
            else:
                failed = True
                print(f"FAIL {name}: {response.status_code} {response.text[:300]}", flush=True)
    # The SDK's own client with the wrong key gets no session either.
    try:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {wrong}"}, verify=ca)
        async with Client(streamable_http_client(url, http_client=http)) as client:
            await client.list_tools()
        failed = True
        print("FAIL sdk_wrong_key: the session opened", flush=True)
    except Exception:  # the SDK raises its own error for the 401
        print("ok sdk_wrong_key", flush=True)
    return failed


def http_client(url, key, ca):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, verify=ca,
                              timeout=httpx2.Timeout(900))
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=900)


async def idle(url, key, ca, seconds):
    """A session with no call in flight for its idle timeout ends, and its sandbox with it."""
    async with http_client(url, key, ca) as quiet:
        first = await quiet.call_tool("run_code", {"code": "1 + 1"})
        sandbox = (first.structured_content or {}).get("sandbox_id")
        print(f"sandbox {sandbox}", flush=True)
        await asyncio.sleep(seconds * 2 + 5)
        # Another session looks while this one is still open.
        async with http_client(url, key, ca) as other:
            listed = texts(await other.call_tool("list_sandboxes", {}))
        line = next((line for line in listed.splitlines() if line.startswith(f"{sandbox} ")), "")
        if sandbox and (not line or "  ended" in line):
            print("ok idle", flush=True)
            return False
        print(f"FAIL idle: {sandbox} is still there: {listed}", flush=True)
        return True


async def main(argv):
    mode = argv[1]
    if mode == "stdio":
        names = argv[3:]
        params = StdioServerParameters(command=argv[2], args=["mcp"], env=dict(os.environ))
        async with Client(params, read_timeout_seconds=900) as client:
            print(f"protocol {client.protocol_version}", flush=True)
            failed = await run(client, names)
        return failed
    url, key, ca = argv[2], argv[3], argv[4]
    extras = argv[5:]
    names = [n for n in extras if n != "refusals" and not n.startswith("idle=")]
    async with http_client(url, key, ca) as client:
        print(f"protocol {client.protocol_version}", flush=True)
        failed = await run(client, names)
    for extra in extras:
        if extra.startswith("idle="):
            failed = await idle(url, key, ca, float(extra[len("idle="):])) or failed
    # Last: the failures it makes get this address refused for a while.
    if "refusals" in extras:
        failed = await refusals(url, key, ca) or failed
    return failed

if __name__ == "__main__":
    sys.exit(1 if asyncio.run(main(sys.argv)) else 0)
