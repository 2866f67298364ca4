"""`python -m little_workflow.cli`: the `little` command."""

from .app import main

main()
