"""Airlock's interpreter driver: one persistent context for the agent.

The agent (guest-agent/src/services/code/driver.rs) starts it as

    python3 -c <this file> LANGUAGE MAX_OUTPUT_BYTES CHART_MIME_TYPE CHARTS

with one end of a Unix socket pair as its stdin, and pipes as its stdout
and stderr. LANGUAGE is "python" (cells run here, in one namespace) or
"bash" (cells run in one bash process this driver keeps).

Wire format (docs/protocol.md, "The interpreter driver"): on the socket,
each message is a 4-byte big-endian length and that many bytes of UTF-8
JSON, an object with a "type", named after Jupyter's messages:

  agent -> driver   {"type": "execute_request", "code": "..."}
  driver -> agent   {"type": "ready", "language": "python",
                     "language_version": "3.11.2"}
                    {"type": "unavailable", "message": "..."}   (then exits)
                    {"type": "stream", "name": "stdout", "text": "..."}
                    {"type": "execute_result", "execution_count": 3,
                     "data": {"text/plain": "2", "application/json": 2}}
                    {"type": "display_data", "data": {"image/png": "<base64>",
                     "text/plain": "<Figure ...>"}}
                    {"type": "error", "ename": "ZeroDivisionError",
                     "evalue": "division by zero", "traceback": ["..."]}
                    {"type": "execute_reply", "status": "ok" | "error",
                     "execution_count": 3}

A MIME bundle ("data") holds JSON values for application/json and */*+json,
base64 text for binary types (image/* but SVG, application/pdf) and text for
everything else; one output stays within MAX_OUTPUT_BYTES (text/plain is cut,
other representations that do not fit are left out, with a note in
text/plain). Every execute_request gets exactly one execute_reply, after the
cell's other messages; "restarted": true in it says the interpreter was
replaced during the cell (bash's `exit`).

A matplotlib figure (a cell's value, display(fig), plt.show() or a figure
left open) is shown as image/png and, under CHART_MIME_TYPE, its chart data:
CHARTS is the source of charts.py, loaded as a module when the first figure
is shown (an empty CHART_MIME_TYPE, or a figure it finds no axes in, gives
none).

Output: fds 1 and 2 are the agent's pipes, inherited by every program a
cell starts. The driver opens read ends of the same pipes
(/proc/self/fd/1 and 2) and forwards what a cell and its programs write as
`stream` messages (UTF-8; undecodable bytes become U+FFFD). Before any other
message it drains them, under the lock that serializes sending, so output
written before a display, a result or the reply arrives before it: the order
is the order things happened. The agent reads the pipes itself only once the
driver is gone, so what it left unsent is not lost.

SIGINT interrupts the running cell (KeyboardInterrupt; in bash the running
command) and is ignored between cells.
"""

import ast
import base64
import builtins
import codecs
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import linecache
import math
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
import types

LANGUAGE = sys.argv[1] if len(sys.argv) > 1 else "python"
MAX_OUTPUT = int(sys.argv[2]) if len(sys.argv) > 2 else 2 << 20
CHART_MIME = sys.argv[3] if len(sys.argv) > 3 else ""
CHARTS_SOURCE = sys.argv[4] if len(sys.argv) > 4 else ""
# Representations Jupyter carries as base64 text.
BINARY_PREFIXES = ("image/",)
BINARY_TYPES = ("application/pdf",)
TEXT_IMAGES = ("image/svg+xml",)
INLINE_BACKEND = "airlock_inline"


def is_binary(mime):
    if mime in TEXT_IMAGES:
        return False
    return mime.startswith(BINARY_PREFIXES) or mime in BINARY_TYPES


def is_json(mime):
    return mime == "application/json" or mime.endswith("+json")


class Channel:
    """The socket to the agent: length-prefixed JSON both ways, and the
    driver's own stdout and stderr, forwarded as stream messages."""

    def __init__(self):
        # Take the socket off fd 0: the cell's stdin is /dev/null, and the
        # dup is close-on-exec, so no program a cell starts inherits it.
        self.sock = socket.socket(fileno=os.dup(0))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.lock = threading.Lock()
        self.pipes = {}
        # A KeyboardInterrupt must not cut a frame in half: while the main
        # thread sends, SIGINT is only noted, and raised once it is done.
        self.main_sending = False
        self.interrupt_pending = False

    def capture(self):
        """Reads fds 1 and 2 (pipes) from the other end: their bytes become
        stream messages."""
        for fd, name in ((1, "stdout"), (2, "stderr")):
            # Not inherited (O_CLOEXEC): a program holding a read end would
            # take output away.
            read = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self.pipes[read] = (name, codecs.getincrementaldecoder("utf-8")("replace"))
        threading.Thread(target=self.forward, name="airlock-output", daemon=True).start()

    def forward(self):
        while self.pipes:
            ready, _, _ = select.select(list(self.pipes), [], [])
            with self.lock:
                self.drain(ready)

    def drain(self, fds):
        """Sends what the pipes hold now; the lock is held."""
        for fd in fds:
            if fd not in self.pipes:
                continue
            name, decoder = self.pipes[fd]
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not data:
                    # Nobody holds the write end any more (the cell closed
                    # fd 1 or 2): stop watching it.
                    del self.pipes[fd]
                    os.close(fd)
                    break
                text = decoder.decode(data)
                if text:
                    self.write({"type": "stream", "name": name, "text": text})

    def send(self, message):
        flush_streams()
        main = threading.current_thread() is threading.main_thread()
        if main:
            self.main_sending = True
        try:
            with self.lock:
                self.drain(list(self.pipes))
                self.write(message)
        finally:
            if main:
                self.main_sending = False
        if main and self.interrupt_pending:
            self.interrupt_pending = False
            raise KeyboardInterrupt

    def write(self, message):
        # Lone surrogates (from undecodable bytes) become U+FFFD.
        body = json.dumps(message, ensure_ascii=False).encode("utf-8", "replace")
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def recv(self):
        header = self.read(4)
        if header is None:
            return None
        (length,) = struct.unpack(">I", header)
        body = self.read(length)
        if body is None:
            return None
        return json.loads(body.decode("utf-8"))

    def read(self, length):
        data = bytearray()
        while len(data) < length:
            chunk = self.sock.recv(length - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)


def flush_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def limit_bundle(data):
    """Keeps one output within MAX_OUTPUT bytes: text/plain first (cut if it
    alone is too long), then the other representations while they fit."""
    plain = data.get("text/plain")
    if not isinstance(plain, str):
        plain = "" if plain is None else str(plain)
    budget = MAX_OUTPUT // 2
    encoded = plain.encode("utf-8", "replace")
    if len(encoded) > budget:
        plain = encoded[:budget].decode("utf-8", "ignore")
        plain += "\n[... %d more bytes of text/plain]" % (len(encoded) - budget)
    used = len(plain.encode("utf-8", "replace"))
    kept = {}
    notes = []
    for mime, value in data.items():
        if mime == "text/plain":
            continue
        if is_json(mime):
            try:
                size = len(json.dumps(value, allow_nan=False).encode("utf-8"))
            except (TypeError, ValueError):
                continue
        elif isinstance(value, str):
            size = len(value.encode("utf-8", "replace"))
            if is_binary(mime):
                size = size * 3 // 4
        else:
            continue
        if used + size > MAX_OUTPUT:
            notes.append("[%s of %d bytes left out: larger than the output limit]" % (mime, size))
            continue
        used += size
        kept[mime] = value
    if notes:
        plain = "\n".join([plain] + notes) if plain else "\n".join(notes)
    kept["text/plain"] = plain
    return kept


def json_able(value, depth=0):
    """Whether `value` is faithfully JSON: no NaN, only string keys."""
    if value is None or isinstance(value, (bool, str, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 64:
        return False
    if isinstance(value, (list, tuple)):
        return all(json_able(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_able(v, depth + 1) for k, v in value.items())
    return False


REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
    ("application/pdf", "_repr_pdf_"),
)


def repr_method(obj, name):
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def mime_bundle(obj):
    """Jupyter's display formatter, reduced: the object's own _repr_*_
    methods, a matplotlib figure as PNG, then repr and JSON."""
    data = {}
    method = repr_method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            bundle = method(include=None, exclude=None)
        except TypeError:
            bundle = method()
        if isinstance(bundle, tuple):
            bundle = bundle[0]
        if isinstance(bundle, dict):
            data.update(bundle)
    for mime, name in REPR_METHODS:
        if mime in data:
            continue
        method = repr_method(obj, name)
        if method is None:
            continue
        value = method()
        if isinstance(value, tuple):
            value = value[0]
        if value is None:
            continue
        if is_binary(mime) and isinstance(value, (bytes, bytearray)):
            value = base64.b64encode(value).decode("ascii")
        data[mime] = value
    if is_figure(obj):
        if "image/png" not in data:
            data["image/png"] = figure_png(obj)
        add_chart(data, obj)
    for mime, value in list(data.items()):
        if isinstance(value, (bytes, bytearray)):
            data[mime] = bytes(value).decode("utf-8", "replace")
    if "text/plain" not in data:
        data["text/plain"] = repr(obj)
    if "application/json" not in data and json_able(obj):
        data["application/json"] = obj
    return data


def is_figure(obj):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


charts = None


def add_chart(data, fig):
    """Adds the figure's chart data (charts.py) to its bundle; after its
    PNG, so the figure is drawn and its tick labels are the image's. A
    figure the extraction fails on is shown without: the image is what
    was asked for."""
    global charts
    if not CHART_MIME or not CHARTS_SOURCE:
        return
    try:
        if charts is None:
            module = types.ModuleType("airlock_charts")
            exec(compile(CHARTS_SOURCE, "<airlock-charts>", "exec"), module.__dict__)
            charts = module
        chart = charts.chart(fig)
    except Exception:
        return
    if chart is not None:
        data[CHART_MIME] = chart


class Python:
    """Cells run in one `__main__` namespace."""

    def __init__(self, channel):
        self.channel = channel
        self.count = 0
        self.running = False
        self.loop = None
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        sys.argv = [""]
        self.namespace = main.__dict__
        builtins.display = self.display
        sys.meta_path.insert(0, MatplotlibHook(self))

    def serve(self):
        signal.signal(signal.SIGINT, self.on_sigint)
        version = sys.version.split()[0]
        self.channel.send({"type": "ready", "language": "python", "language_version": version})
        while True:
            try:
                message = self.channel.recv()
                if message is None:
                    return
                if message.get("type") == "execute_request":
                    self.execute(str(message.get("code", "")))
            except KeyboardInterrupt:
                # Only between the cell's end and its reply; see execute.
                continue

    def on_sigint(self, signum, frame):
        if not self.running:
            return
        if self.channel.main_sending:
            self.channel.interrupt_pending = True
            return
        raise KeyboardInterrupt

    def display(self, *objs, **_ignored):
        """Shows each object as a rich output (Jupyter's display())."""
        for obj in objs:
            self.channel.send({"type": "display_data", "data": limit_bundle(mime_bundle(obj))})

    def execute(self, code):
        self.count += 1
        status = "error"
        self.channel.interrupt_pending = False
        try:
            self.running = True
            status = self.run_cell(code)
        except BaseException as exc:
            self.running = False
            self.send_error(exc)
        finally:
            self.running = False
            self.channel.send(
                {"type": "execute_reply", "status": status, "execution_count": self.count}
            )

    def run_cell(self, code):
        """Runs the cell; sends its result or error; returns the status."""
        filename = "<cell-%d>" % self.count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            value, has_value = self.evaluate(code, filename)
            if has_value and value is not None:
                self.namespace["_"] = value
                data = limit_bundle(mime_bundle(value))
                self.channel.send(
                    {"type": "execute_result", "execution_count": self.count, "data": data}
                )
            status = "ok"
        except BaseException as exc:
            self.running = False
            self.send_error(exc)
            status = "error"
        self.flush_figures()
        return status

    def evaluate(self, code, filename):
        """Executes the cell; a last expression's value is returned."""
        tree = ast.parse(code, filename=filename, mode="exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        self.run(compile(tree, filename, "exec", flags=flags, dont_inherit=True))
        if last is None:
            return None, False
        return self.run(compile(last, filename, "eval", flags=flags, dont_inherit=True)), True

    def run(self, compiled):
        result = eval(compiled, self.namespace)
        if compiled.co_flags & 0x80:  # CO_COROUTINE: top-level await
            if self.loop is None:
                import asyncio

                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    def send_error(self, exc):
        self.channel.send(
            {
                "type": "error",
                "ename": type(exc).__name__,
                "evalue": safe_str(exc),
                "traceback": format_traceback(exc),
            }
        )

    def flush_figures(self):
        """Shows the figures a cell left open, as Jupyter's inline backend."""
        if "matplotlib.pyplot" not in sys.modules:
            return
        try:
            import matplotlib

            if matplotlib.get_backend() != "module://" + INLINE_BACKEND:
                return
            show_figures(self)
        except Exception as exc:
            print("airlock: cannot show figures: %s" % exc, file=sys.stderr)


def safe_str(exc):
    try:
        return str(exc)
    except Exception:
        return "<unprintable %s>" % type(exc).__name__


def format_traceback(exc):
    """The traceback from the first frame of a cell (none of the driver's)."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    try:
        if tb is None:
            return traceback.format_exception_only(type(exc), exc)
        return traceback.format_exception(type(exc), exc, tb)
    except Exception:
        return ["%s: %s\n" % (type(exc).__name__, safe_str(exc))]


def show_figures(python):
    from matplotlib._pylab_helpers import Gcf
    import matplotlib.pyplot as plt

    managers = Gcf.get_all_fig_managers()
    for manager in managers:
        figure = manager.canvas.figure
        data = {"image/png": figure_png(figure), "text/plain": repr(figure)}
        add_chart(data, figure)
        python.channel.send({"type": "display_data", "data": limit_bundle(data)})
    if managers:
        plt.close("all")


class MatplotlibHook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes matplotlib draw inline: once `matplotlib` is imported (and
    MPLBACKEND does not say otherwise) its backend is `airlock_inline`,
    Agg whose show() sends each open figure as a PNG display_data. Nothing
    goes into the environment, so programs a cell starts are unaffected."""

    def __init__(self, python):
        self.python = python
        self.hooked = False

    def find_spec(self, name, path=None, target=None):
        if name == INLINE_BACKEND:
            return importlib.util.spec_from_loader(name, self)
        if name != "matplotlib" or self.hooked:
            return None
        self.hooked = True
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            self.hooked = False
            return None
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            if "MPLBACKEND" not in os.environ:
                try:
                    module.use("module://" + INLINE_BACKEND)
                except Exception as exc:
                    print("airlock: cannot draw inline: %s" % exc, file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        python = self.python

        def show(*args, **kwargs):
            show_figures(python)

        module.FigureCanvas = FigureCanvasAgg
        module.FigureManager = FigureManagerBase
        module.show = show


class Bash:
    """Cells run in one bash process, so the working directory, variables,
    functions and aliases persist. Each cell's source goes to a memfd that
    bash sources (`. /proc/DRIVER/fd/N`); bash then writes the status to
    this driver's marker pipe, opened by path so no program inherits it.
    SIGINT makes the sourced cell return 130 (a trap), keeping the shell.
    A cell that ends the shell (`exit`) gets a fresh one, and its reply
    says so."""

    def __init__(self, channel):
        self.channel = channel
        self.count = 0
        self.bash = None
        self.proc = None

    def serve(self):
        # A handler, not SIG_IGN: bash must not inherit an ignored SIGINT.
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        self.bash = shutil.which("bash")
        if self.bash is None:
            self.channel.send({"type": "unavailable", "message": "bash is not installed in the guest"})
            return
        self.code = os.memfd_create("airlock-cell")
        self.marker, marker_w = os.pipe()
        self.marker_path = "/proc/%d/fd/%d" % (os.getpid(), marker_w)
        self.code_path = "/proc/%d/fd/%d" % (os.getpid(), self.code)
        version = self.start()
        if version is None:
            self.channel.send({"type": "unavailable", "message": "bash exited at start"})
            return
        self.channel.send({"type": "ready", "language": "bash", "language_version": version})
        while True:
            message = self.channel.recv()
            if message is None:
                return
            if message.get("type") == "execute_request":
                self.execute(str(message.get("code", "")))

    def start(self):
        """Starts bash; returns its version, or None if it did not start."""
        self.proc = subprocess.Popen(
            [self.bash, "--noprofile", "--norc"], stdin=subprocess.PIPE, close_fds=True
        )
        try:
            self.command("trap 'return 130 2>/dev/null' INT\n")
            self.command('printf "%%s\\n" "$BASH_VERSION" >%s\n' % self.marker_path)
        except BrokenPipeError:
            return None
        return self.read_marker()

    def command(self, text):
        self.proc.stdin.write(text.encode("utf-8", "replace"))
        self.proc.stdin.flush()

    def read_marker(self):
        """The next line bash writes to the marker pipe, or None if bash is
        gone."""
        line = bytearray()
        while True:
            ready, _, _ = select.select([self.marker], [], [], 0.2)
            if not ready:
                if self.proc.poll() is not None:
                    return None
                continue
            chunk = os.read(self.marker, 1)
            if not chunk:
                return None
            if chunk == b"\n":
                return line.decode("utf-8", "replace")
            line += chunk

    def execute(self, code):
        self.count += 1
        data = code.encode("utf-8", "replace")
        if not data.endswith(b"\n"):
            data += b"\n"
        os.ftruncate(self.code, 0)
        os.pwrite(self.code, data, 0)
        try:
            self.command(". %s </dev/null; printf '%%d\\n' \"$?\" >%s\n" % (self.code_path, self.marker_path))
            status = self.read_marker()
        except BrokenPipeError:
            status = None
        restarted = False
        if status is None:
            status = str(self.proc.wait())
            restarted = True
            if self.start() is None:
                self.channel.send({"type": "error", "ename": "ExitStatus", "evalue": status, "traceback": []})
                sys.exit(1)
        status = status.strip()
        reply = "ok"
        if status not in ("", "0"):
            self.channel.send({"type": "error", "ename": "ExitStatus", "evalue": status, "traceback": []})
            reply = "error"
        self.channel.send(
            {
                "type": "execute_reply",
                "status": reply,
                "execution_count": self.count,
                "restarted": restarted,
            }
        )


def main():
    # Whole lines reach the pipes at once (and everything before a message:
    # see Channel.send).
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    channel = Channel()
    channel.capture()
    if LANGUAGE == "bash":
        Bash(channel).serve()
    else:
        Python(channel).serve()


main()
