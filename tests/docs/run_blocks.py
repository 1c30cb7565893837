"""Run one chain of documentation blocks as written: `python run_blocks.py steps.json`.

Started by `tests/docs/test_snippets.py` in a fresh interpreter, in the chain's working
directory. Python blocks are executed in one namespace, in order, compiled with their
page as the file name and their own line numbers (a traceback points into the page);
shell blocks run with `bash -e -o pipefail`. The first failure ends the run naming the
block.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def main(steps_file: str) -> int:
    steps = json.loads(Path(steps_file).read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": "__main__"}
    for step in steps:
        if step["language"] == "python":
            padded = "\n" * (step["first_line"] - 1) + step["source"]
            exec(compile(padded, step["path"], "exec"), namespace)
        else:
            script = ["bash", "-e", "-o", "pipefail", "-c", step["source"]]
            done = subprocess.run(script, check=False)
            if done.returncode != 0:
                print(f"{step['where']}: the shell block exited {done.returncode}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
