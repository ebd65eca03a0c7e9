"""The grading engine: the options, the session, the pytest plugin, the runner, the `Grade` client
and the release recordings. The reports it feeds are `grader.reports`, a class's batches
`grader.batch`, the warm grading service `grader.service`; none of them is imported here."""
