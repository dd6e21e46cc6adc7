"""A chart from run_code, saved as a PNG on the host.

The cell draws a bar chart: with matplotlib when the sandbox's image has it
(``plt.show()`` returns the figure as PNG), otherwise by hand, as an object
with ``_repr_png_`` (the code interpreter shows what an object can show, as
Jupyter does). Either way the result's ``png`` is base64 text, as in E2B.
"""

import base64
import sys

from airlock import Sandbox

CELL = r'''
values = {"mon": 3, "tue": 7, "wed": 5, "thu": 9, "fri": 4}
chart = None
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.bar(list(values), list(values.values()), color="#4a7")
    plt.title("tasks per day")
    plt.show()
except ImportError:
    import struct, zlib

    class BarChart:
        def __init__(self, values, width=200, height=120):
            self.values, self.width, self.height = values, width, height

        def _repr_png_(self):
            w, h, top = self.width, self.height, max(self.values.values())
            slot = w // len(self.values)
            rows = []
            for y in range(h):
                row = bytearray(b"\x00")
                for x in range(w):
                    bar = x // slot
                    level = list(self.values.values())[bar] * (h - 10) // top
                    inside = x % slot > 4 and h - y <= level
                    row += bytes((0x44, 0xAA, 0x77) if inside else (0xFF, 0xFF, 0xFF))
                rows.append(bytes(row))

            def chunk(kind, data):
                return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

            header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
            return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                    + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))

    chart = BarChart(values)
chart  # shown as the cell's value (None, with matplotlib, shows nothing)
'''

out = sys.argv[1] if len(sys.argv) > 1 else "chart.png"
with Sandbox.create() as sandbox:
    execution = sandbox.run_code(CELL)
    if execution.error:
        raise SystemExit(f"{execution.error.name}: {execution.error.value}\n{execution.error.traceback}")
    charts = [result for result in execution.results if result.png]
    with open(out, "wb") as png:
        png.write(base64.b64decode(charts[0].png))
    print(f"saved {out} ({len(base64.b64decode(charts[0].png))} bytes)")
