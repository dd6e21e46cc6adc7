"""A LangChain-style tool over a code interpreter sandbox, as langchain-e2b
writes its data analysis tool: files uploaded for the model, its Python run,
and the answer given back to the model as JSON text (stdout, stderr,
results, or the error).

Written against E2B's SDK; the suite runs it with the import changed only."""

import json

from e2b_code_interpreter import Sandbox


class E2BDataAnalysisTool:
    name = "e2b_data_analysis"
    description = "Runs Python code in a sandbox; files uploaded are in its home directory."

    def __init__(self):
        self.session = Sandbox.create()
        self.description += f" Python: {self.session.run_code('import sys; sys.version.split()[0]').text}"

    def upload_file(self, name, content):
        info = self.session.files.write(name, content)
        return f"uploaded {name} to {info.path}"

    def _run(self, python_code):
        execution = self.session.run_code(python_code)
        if execution.error:
            return json.dumps(
                {"error": f"{execution.error.name}: {execution.error.value}", "traceback": execution.error.traceback}
            )
        return json.dumps(
            {
                "stdout": "".join(execution.logs.stdout),
                "stderr": "".join(execution.logs.stderr),
                "results": [result.text for result in execution.results],
            }
        )

    def list_files(self):
        return sorted(entry.name for entry in self.session.files.list("."))

    def close(self):
        self.session.kill()


tool = E2BDataAnalysisTool()
try:
    assert tool.description.endswith("Python: '3.11.2'") or "Python: '3." in tool.description, tool.description
    uploaded = tool.upload_file("sales.csv", "region,amount\nnorth,10\nsouth,32\n")
    assert uploaded.startswith("uploaded sales.csv to /"), uploaded
    assert "sales.csv" in tool.list_files(), tool.list_files()
    answer = json.loads(
        tool._run(
            "import csv, os, sys\n"
            "rows = list(csv.DictReader(open(os.path.expanduser('~/sales.csv'))))\n"
            "print(len(rows), 'rows')\n"
            "print('warn', file=sys.stderr)\n"
            "sum(int(r['amount']) for r in rows)"
        )
    )
    assert answer == {"stdout": "2 rows\n", "stderr": "warn\n", "results": ["42"]}, answer
    failed = json.loads(tool._run("open('missing.csv')"))
    assert failed["error"].startswith("FileNotFoundError: "), failed
    assert "Traceback" in failed["traceback"] and "\n\n" not in failed["traceback"], failed
finally:
    tool.close()
print("ok")
