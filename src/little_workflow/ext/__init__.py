"""Integrations with agent frameworks, each behind its own extra.

- `little_workflow.ext.langgraph` (`pip install 'little-workflow[langgraph]'`):
  `WorldCheckpointSaver(world)`, LangGraph checkpoints in any World.
- `little_workflow.ext.pydantic_ai` (`pip install 'little-workflow[pydantic-ai]'`):
  `LittleWorkflowDurability()`, a Pydantic AI capability that makes every model request
  and tool call of an agent run inside a workflow a durable step.

The core never imports these modules; importing one without its framework installed
raises an ImportError naming the extra.
"""
