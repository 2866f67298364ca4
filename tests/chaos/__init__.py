"""The chaos test: many real processes on one World, then a history checker
(`history.py`). `flows.py` holds the workflows, `actors.py` the processes, `driver.py`
runs one backend end to end."""
