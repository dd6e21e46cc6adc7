"""An agent loop: code a model wrote runs in the sandbox with a time limit,
and what happened (output, value, error, timeout) goes back to the model.

``next_code`` stands in for your model: it returns the cells a model might
write for the task, including one that never ends and one that fails. Wire
it to your model's API; everything else is what an agent needs.
"""

from typing import List, Optional

from airlock import Execution, Sandbox, TimeoutException

CELLS = [
    "import statistics\nscores = [3, 7, 5, 9, 4]\nstatistics.mean(scores)",
    "while True:\n    pass  # a model's mistake: it never ends",
    "statistics.stdev(scores) / undefined_name",
    "round(statistics.stdev(scores), 3)",
]


def next_code(transcript: List[str]) -> Optional[str]:
    """The model's next cell given the transcript so far (here: scripted)."""
    turn = sum(1 for line in transcript if line.startswith(">>>"))
    return CELLS[turn] if turn < len(CELLS) else None


def observe(execution: Execution) -> str:
    if execution.error:
        return f"error {execution.error.name}: {execution.error.value}"
    text = "".join(execution.logs.stdout)
    return (text + (execution.text or "")).strip() or "(no output)"


transcript: List[str] = []
with Sandbox.create(timeout=600) as sandbox:
    while (code := next_code(transcript)) is not None:
        transcript.append(">>> " + code.replace("\n", "\n... "))
        try:
            observation = observe(sandbox.run_code(code, timeout=5))
        except TimeoutException:
            observation = "timed out after 5 s (interrupted; variables kept)"
        transcript.append(observation)
print("\n".join(transcript))
