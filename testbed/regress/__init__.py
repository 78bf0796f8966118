"""Regression testing: the tracked metrics and their tolerances, their physical limits, and
expectations, baselines and verdicts."""
