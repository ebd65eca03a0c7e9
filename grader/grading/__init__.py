"""Grading: options, statuses and records, the session, the pytest plugin, the runner and the reports."""
