pytest_plugins = ["grader.grading.pytest_plugin"]
