"""Demo 1: a run is SIGKILLed mid-flight, started again, and continues without
re-calling its completed steps. Same as `little demo`."""

import sys

from little_workflow.demo import run_demo

if __name__ == "__main__":
    outcome = run_demo(sys.argv[1] if len(sys.argv) > 1 else ".little-workflow")
    sys.exit(1 if outcome["recalled"] else 0)
