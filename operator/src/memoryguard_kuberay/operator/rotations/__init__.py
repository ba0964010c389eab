"""Rotating a worker: the rotation's phases (rotation.py) and their record
(ledger.py), draining the Ray node (drain.py, raynodes.py), and the budgets
that bound it (budgets.py, remembered.py)."""
