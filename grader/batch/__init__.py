"""A class: its submissions folders staged (`submissions`, `batch`), a `--submissions` run's plan
(`plan`), shards (`shards`), regrades (`regrade`) and the merge of shards' reports (`merge`).
Above the engine and the reports."""
