"""A run folder's analysis, in stages: tables, losses, fidelity, the summary, and the report."""
