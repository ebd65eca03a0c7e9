"""The kit's grader: property checks of the exercises, run in isolated workers, scored from a catalog."""
