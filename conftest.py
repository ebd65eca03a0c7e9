pytest_plugins = ["grader.pytest_plugin"]
