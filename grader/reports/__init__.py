"""The reports written from TargetResults: the terminal and JSON/CSV report (`report`), Gradescope's
markdown (`markdown`), the class report (`class_report`) and Canvas's grade import (`canvas`).
Above the engine: they read records and `grader.text`, never the engine's session or runner."""
