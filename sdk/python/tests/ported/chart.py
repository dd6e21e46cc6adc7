"""A chart from a code interpreter sandbox, as E2B's cookbook draws one:
matplotlib in the sandbox, `plt.show()`, the result's PNG decoded and saved
on this machine.

Written against E2B's SDK; the suite runs it with the import changed only."""

import base64
import sys

from e2b_code_interpreter import Sandbox

CODE = """
import matplotlib.pyplot as plt
import numpy as np

x = np.linspace(0, 2 * np.pi, 50)
plt.plot(x, np.sin(x))
plt.title("sine")
plt.show()
"""

with Sandbox.create() as sandbox:
    execution = sandbox.run_code(CODE)
    assert execution.error is None, execution.error
    charts = [result for result in execution.results if result.png]
    assert len(charts) == 1, execution.results
    png = base64.b64decode(charts[0].png)
    assert png.startswith(b"\x89PNG\r\n\x1a\n"), png[:8]
    assert "png" in charts[0].formats(), charts[0].formats()
    with open(sys.argv[1], "wb") as out:
        out.write(png)
print("ok")
