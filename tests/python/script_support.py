"""Runs one of the repository's `scripts/` as the script tests do: with this Python, from the
repository's root, output captured, the exit code left for the test to assert."""

import subprocess
import sys

from deploy_support import REPO


def run_script(name: str, *args) -> subprocess.CompletedProcess:
    """`scripts/NAME ARGS...` (each argument turned to text), run to completion."""
    return subprocess.run([sys.executable, str(REPO / "scripts" / name), *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, check=False)
