"""`python -m chaos.unfenced WHAT ARGS...`: a chaos process with DESIGN §15's protections
taken away, for the test of the test (does the chaos catch their absence?).

WHAT is `little` (the CLI: `little worker ...`) or `actor` (`chaos.actors` ROLE ...);
`LW_CHAOS_UNFENCED` says what to take away: `locks` (the kernel locks of local files:
the log still fences executors) or `locks,fence` (the log fence too: executors then
interleave their records, as before §15).
"""

from __future__ import annotations

import contextlib
import os
import sys

from little_workflow.testing import without_kernel_locks, without_log_fence

UNFENCED_ENV = "LW_CHAOS_UNFENCED"


def main() -> None:
    what, args = sys.argv[1], sys.argv[2:]
    removed = set(os.environ.get(UNFENCED_ENV, "locks").split(","))
    with contextlib.ExitStack() as stack:
        if "locks" in removed:
            stack.enter_context(without_kernel_locks())
        if "fence" in removed:
            stack.enter_context(without_log_fence())
        if what == "little":
            from little_workflow.cli import main as little

            sys.argv = ["little", *args]
            little()
        else:
            from chaos.actors import main as actor

            actor(args)


if __name__ == "__main__":
    main()
