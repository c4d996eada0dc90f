"""Fault suite: candidates that hang, crash, exhaust or escape the evaluator, each run through
``check()`` and followed by a passing check of the good example (the next job is unharmed)."""
