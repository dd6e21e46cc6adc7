"""run_code through the official `e2b_code_interpreter` SDK, changed only by
environment variables (tests/e2b/README.md): values, logs, errors, a
matplotlib PNG and its chart, SVG and JSON of an object, the execution
count, shell escapes, languages, contexts (create with cwd, list, restart,
remove) and the default one's cwd, and commands as E2B's user.

One sandbox of E2B's code-interpreter template (`code-interpreter-v1`,
templates/e2b/code-interpreter) serves every test of the file: a boot under
TCG is slow, and each test makes its own names.
"""

import base64
import uuid

import pytest
from e2b import SandboxException
from e2b_code_interpreter import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    sbx = Sandbox.create(timeout=600)
    try:
        yield sbx
    finally:
        sbx.kill()


def test_a_value_is_its_text_as_ipython_shows_it(sandbox):
    execution = sandbox.run_code("x = 41\nx + 1")
    assert execution.error is None
    assert execution.text == "42"
    [result] = execution.results
    assert result.is_main_result
    assert result.json is None, "a plain value is text only, as E2B's kernel gives it"
    assert execution.execution_count is not None and execution.execution_count >= 1


def test_logs_reach_the_callbacks_and_the_execution(sandbox):
    out, err = [], []
    execution = sandbox.run_code(
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
        on_stdout=lambda message: out.append(message),
        on_stderr=lambda message: err.append(message),
    )
    assert execution.error is None
    assert "".join(execution.logs.stdout) == "to stdout\n"
    assert "".join(execution.logs.stderr) == "to stderr\n"
    assert "".join(m.line for m in out) == "to stdout\n"
    assert "".join(m.line for m in err) == "to stderr\n"
    assert all(not m.error for m in out) and all(m.error for m in err)
    assert all(m.timestamp > 0 for m in out + err)


def test_an_error_has_its_name_value_and_traceback(sandbox):
    seen = []
    execution = sandbox.run_code(
        "def f():\n    return 1 / 0\nf()", on_error=lambda error: seen.append(error)
    )
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value == "division by zero"
    assert "ZeroDivisionError" in execution.error.traceback
    assert "f()" in execution.error.traceback
    assert [e.name for e in seen] == ["ZeroDivisionError"]


def test_a_matplotlib_plot_is_a_png(sandbox):
    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "plt.show()"
    )
    assert execution.error is None, execution.error
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1, execution.results
    assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
    assert not any(r.is_main_result for r in execution.results if r.png)


def test_a_line_chart_is_the_results_chart(sandbox):
    from e2b_code_interpreter.charts import ChartType, LineChart

    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9], label='squares')\n"
        "plt.title('Squares')\n"
        "plt.xlabel('n')\n"
        "plt.show()"
    )
    assert execution.error is None, execution.error
    [result] = [r for r in execution.results if r.png]
    assert "chart" in result.formats()
    chart = result.chart
    assert isinstance(chart, LineChart), chart
    assert chart.type == ChartType.LINE
    assert chart.title == "Squares"
    assert chart.x_label == "n"
    [line] = chart.elements
    assert line.label == "squares"
    assert line.points == [(1.0, 1.0), (2.0, 4.0), (3.0, 9.0)]
    assert len(chart.x_ticks) == len(chart.x_tick_labels) > 0


def test_the_execution_count_rises_cell_by_cell(sandbox):
    context = sandbox.create_code_context()
    counts = [sandbox.run_code(f"{n} + 1", context=context).execution_count for n in range(3)]
    assert counts == [1, 2, 3]
    sandbox.remove_code_context(context)


def test_an_objects_svg_and_json_are_results(sandbox):
    execution = sandbox.run_code(
        "class Shape:\n"
        "    def _repr_svg_(self):\n"
        "        return '<svg xmlns=\"http://www.w3.org/2000/svg\"><circle r=\"1\"/></svg>'\n"
        "class Report:\n"
        "    def _repr_json_(self):\n"
        "        return {'rows': 3, 'names': ['a', 'b']}\n"
        "display(Shape())\n"
        "Report()"
    )
    assert execution.error is None, execution.error
    shown, value = execution.results
    assert not shown.is_main_result and "<circle" in (shown.svg or ""), shown
    assert value.is_main_result and value.json == {"rows": 3, "names": ["a", "b"]}, value


def test_the_default_context_and_commands_are_the_users(sandbox):
    assert sandbox.run_code("import os\nos.getcwd()").text == "'/home/user'"
    assert "/home/user" in [c.cwd for c in sandbox.list_code_contexts() if c.language == "python"]
    result = sandbox.commands.run("id -un; pwd; echo $HOME")
    assert result.stdout == "user\n/home/user\n/home/user\n"


def test_a_dataframe_is_html_and_text(sandbox):
    execution = sandbox.run_code(
        "import pandas as pd, numpy as np\n"
        "pd.DataFrame({'a': np.arange(3), 'b': ['x', 'y', 'z']})"
    )
    assert execution.error is None, execution.error
    [result] = execution.results
    assert result.is_main_result
    assert "<table" in (result.html or "")
    assert "a" in result.text and "z" in result.text


def test_a_shell_escape_runs_in_a_shell(sandbox):
    execution = sandbox.run_code("!echo from-the-shell\n1 + 1")
    assert execution.error is None, execution.error
    assert "from-the-shell\n" in "".join(execution.logs.stdout)
    assert execution.text == "2"
    # `%pip` is pip for this interpreter (installing needs a network rule).
    pip = sandbox.run_code("%pip --version")
    assert pip.error is None, pip.error
    assert "".join(pip.logs.stdout).startswith("pip ")


def test_envs_hold_for_one_run(sandbox):
    execution = sandbox.run_code(
        "import os, subprocess\n"
        "print(subprocess.run('echo $E2B_RUN_VAR', shell=True, capture_output=True, text=True).stdout, end='')\n"
        "os.environ['E2B_RUN_VAR']",
        envs={"E2B_RUN_VAR": "for this run"},
    )
    assert execution.error is None, execution.error
    assert execution.text == "'for this run'"
    assert "".join(execution.logs.stdout) == "for this run\n"
    after = sandbox.run_code("import os\nos.environ.get('E2B_RUN_VAR', 'gone')")
    assert after.text == "'gone'"


def test_a_cell_past_its_timeout_is_e2bs_timeout_and_is_interrupted(sandbox):
    import time

    from e2b import TimeoutException

    context = sandbox.create_code_context()
    began = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\ntime.sleep(120)\nfinished = True", context=context, timeout=3)
    # The request's end interrupted the cell: the context answers at once,
    # and the rest of the cell did not run.
    after = sandbox.run_code("'finished' in dir()", context=context, timeout=60)
    assert after.text == "False"
    assert time.monotonic() - began < 60
    sandbox.remove_code_context(context)


def test_bash_runs_and_other_languages_are_refused_by_name(sandbox):
    execution = sandbox.run_code("echo hi from bash", language="bash")
    assert execution.error is None, execution.error
    assert "".join(execution.logs.stdout) == "hi from bash\n"
    with pytest.raises(SandboxException) as refused:
        sandbox.run_code("1 + 1", language="r")
    assert "python and bash" in str(refused.value)


def test_contexts_keep_state_apart_and_start_in_their_cwd(sandbox):
    context = sandbox.create_code_context(cwd="/tmp")
    assert context.cwd == "/tmp"
    assert context.language == "python"
    assert sandbox.run_code("import os\nos.getcwd()", context=context).text == "'/tmp'"

    marker = "v_" + uuid.uuid4().hex[:8]
    assert sandbox.run_code(f"{marker} = 7", context=context).error is None
    assert sandbox.run_code(marker, context=context).text == "7"
    # Another context does not see it.
    assert sandbox.run_code(marker).error.name == "NameError"

    listed = {c.id: c for c in sandbox.list_code_contexts()}
    assert context.id in listed
    assert listed[context.id].cwd == "/tmp"

    sandbox.restart_code_context(context)
    after = sandbox.run_code(marker, context=context)
    assert after.error is not None and after.error.name == "NameError"

    sandbox.remove_code_context(context)
    assert context.id not in {c.id for c in sandbox.list_code_contexts()}


def test_a_bash_context_keeps_its_shell(sandbox):
    context = sandbox.create_code_context(language="bash")
    assert context.language == "bash"
    assert sandbox.run_code("export GREETING=hello", context=context).error is None
    execution = sandbox.run_code('echo "$GREETING $(whoami)"', context=context)
    assert "".join(execution.logs.stdout) == "hello user\n"
    sandbox.remove_code_context(context.id)


def test_an_unknown_context_is_not_found(sandbox):
    from e2b import NotFoundException

    with pytest.raises(NotFoundException):
        sandbox.restart_code_context("no-such-context")


def _raw(sandbox, method, path, token, **kwargs):
    """A request to the sandbox's code interpreter past the SDK."""
    import os

    import httpx

    headers = {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "E2b-Sandbox-Port": "49999",
        **({"X-Access-Token": token} if token is not None else {}),
        **kwargs.pop("headers", {}),
    }
    return httpx.request(
        method, os.environ["E2B_SANDBOX_URL"] + path, headers=headers, timeout=60, **kwargs
    )


def test_bad_requests_get_e2bs_error_shape_and_the_server_keeps_serving(sandbox):
    token = sandbox._envd_access_token
    assert token, "the control plane returns the sandbox's access token"

    cases = [
        # (method, path, token, body, status, a word of the message); one
        # wrong token only: refusals count against 127.0.0.1 (README.md)
        ("POST", "/execute", "wrong", b'{"code": "1"}', 401, "not this sandbox"),
        ("POST", "/execute", token, b"{not json", 400, "JSON"),
        ("POST", "/execute", token, b'{"language": "python"}', 400, "code"),
        (
            "POST",
            "/execute",
            token,
            b'{"code": "true", "language": "bash", "env_vars": {"A": "1"}}',
            400,
            "env_vars",
        ),
        ("POST", "/contexts", token, b'{"language": "java"}', 400, "python and bash"),
        ("POST", "/contexts", token, b'{"cwd": "relative/dir"}', 400, "cwd"),
        ("DELETE", "/contexts/no-such-context", token, None, 404, "no-such-context"),
        ("GET", "/nowhere", token, None, 404, "/execute"),
    ]
    for method, path, tok, body, status, word in cases:
        response = _raw(
            sandbox, method, path, tok, content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == status, (method, path, response.text)
        error = response.json()
        assert error["code"] == status and word in error["message"], (path, error)

    too_big = b'{"code": "' + b"x" * (9 << 20) + b'"}'
    response = _raw(sandbox, "POST", "/execute", token, content=too_big)
    assert response.status_code == 413, response.text

    assert sandbox.run_code("6 * 7").text == "42"


def test_the_async_sdk_runs_code_and_contexts():
    import asyncio

    from e2b_code_interpreter import AsyncSandbox

    async def scenario():
        sbx = await AsyncSandbox.create(timeout=300)
        try:
            out = []
            execution = await sbx.run_code(
                "print('async out')\n2 ** 10", on_stdout=lambda m: out.append(m.line)
            )
            assert execution.text == "1024"
            assert "".join(out) == "async out\n"
            context = await sbx.create_code_context(cwd="/tmp", language="python")
            assert context.cwd == "/tmp"
            assert (await sbx.run_code("import os\nos.getcwd()", context=context)).text == "'/tmp'"
            assert context.id in {c.id for c in await sbx.list_code_contexts()}
            await sbx.restart_code_context(context)
            await sbx.remove_code_context(context)
            assert context.id not in {c.id for c in await sbx.list_code_contexts()}
        finally:
            await sbx.kill()

    asyncio.run(scenario())
