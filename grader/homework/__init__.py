"""Homework: the student release (`release`) and the Gradescope autograder bundle (`autograder`)."""
