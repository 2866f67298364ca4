"""Workflows, steps, scheduling, replay, outer loops, pipelines and memory."""
