"""The devcontainer (.devcontainer/) and the hosted platforms' workflow (.github/workflows/platforms.yml).

Neither runs here (no container, no hosted runner): these tests check what the files promise against the
kit itself: the JSON parses as devcontainer.json's JSONC, the image is a slim Python the kit supports with
the CPU torch the lock pins and the notebook extra, the commands they name exist in the kit, and the
workflow runs the README's commands on each platform. .ci/run lints the Dockerfile with hadolint.
"""

import json
import os
import re

import pytest

try:
    import tomllib  # novm: tomli below
except ImportError:
    import tomli as tomllib

from tests.kit.harness import KIT_ROOT

FOLDER = os.path.join(KIT_ROOT, ".devcontainer")
WORKFLOW = os.path.join(KIT_ROOT, ".github", "workflows", "platforms.yml")


def read(*path):
    with open(os.path.join(KIT_ROOT, *path)) as handle:
        return handle.read()


def jsonc(text):
    """JSON with comments (devcontainer.json's JSONC): `//` and `/* */` outside strings dropped."""
    out, index, in_string = [], 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[index + 1])
                index += 1
            elif char == '"':
                in_string = False
        elif text.startswith("//", index):
            index = text.find("\n", index) if "\n" in text[index:] else len(text)
            continue
        elif text.startswith("/*", index):
            index = text.index("*/", index) + 2
            continue
        else:
            in_string = char == '"'
            out.append(char)
        index += 1
    return json.loads("".join(out))


@pytest.fixture(scope="module")
def config():
    return jsonc(read(".devcontainer", "devcontainer.json"))


@pytest.fixture(scope="module")
def dockerfile():
    return read(".devcontainer", "Dockerfile")


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads(read("pyproject.toml"))


def locked_torch():
    """The torch version requirements.lock pins (2.13.0 of `torch==2.13.0+cpu`)."""
    return re.search(r"^torch==([\d.]+)\+cpu ", read("requirements.lock"), re.M).group(1)


def test_jsonc_reads_comments_and_leaves_strings_alone():
    assert jsonc('// a\n{"a": "x // y", /* b */ "c": "/* d */"} // e') == {"a": "x // y", "c": "/* d */"}


def test_the_devcontainer_builds_the_dockerfile_and_opens_the_kit_ready(config, dockerfile, pyproject):
    assert config["build"] == {"dockerfile": "Dockerfile", "context": ".."}  # the kit's root: COPY pyproject.toml
    assert os.path.isfile(os.path.join(FOLDER, config["build"]["dockerfile"]))
    assert config["containerEnv"]["HF_HUB_OFFLINE"] == "1"
    assert {"ms-python.python", "ms-toolsai.jupyter"} <= set(config["customizations"]["vscode"]["extensions"])
    assert config["postCreateCommand"] == "pip install -e '.[notebook]'"
    assert "notebook" in pyproject["project"]["optional-dependencies"]
    venv = re.search(r"^\s*VIRTUAL_ENV=(\S+)", dockerfile, re.M).group(1)
    assert config["customizations"]["vscode"]["settings"]["python.defaultInterpreterPath"] == venv + "/bin/python"
    user = re.search(r"useradd .*--uid (\d+) .*?(\w+) \\\n", dockerfile).groups()
    assert config["remoteUser"] == user[1] and re.search(rf"^USER {user[0]}(:\d+)?$", dockerfile, re.M)
    assert not {"runArgs", "privileged", "securityOpt", "capAdd"} & set(config)  # Docker's default profile


def test_the_image_is_a_slim_python_the_kit_supports_with_the_locked_cpu_torch(dockerfile, pyproject):
    base = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert len(base) == 1 and re.fullmatch(r"python:3\.(1[0-3])-slim", base[0]), base
    minimum = pyproject["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, base[0][7:-5].split("."))) >= tuple(map(int, minimum.split(".")))
    assert f"pip install torch=={locked_torch()} --index-url \"$TORCH_INDEX_URL\"" in dockerfile
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu\n" in dockerfile
    assert 'pip install "/tmp/kit[notebook]"' in dockerfile and "HF_HUB_OFFLINE=1" in dockerfile
    for source in re.findall(r"^COPY (?:--\S+ )*(\S+) ", dockerfile, re.M):  # from the build context: the kit's root
        assert os.path.exists(os.path.join(KIT_ROOT, source)), source
    assert "--privileged" not in dockerfile.replace("Never run it with --privileged", "")


@pytest.fixture(scope="module")
def workflow():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(read(".github", "workflows", "platforms.yml"))


def run_lines(job):
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_the_workflow_runs_the_quick_tier_and_grades_the_references_on_each_platform(workflow):
    jobs = workflow["jobs"]
    runners = {name: job["runs-on"] for name, job in jobs.items()}
    assert runners == {"linux": "ubuntu-latest", "macos": "macos-14", "wsl": "windows-latest",
                       "windows-native": "windows-latest", "devcontainer": "ubuntu-latest"}
    assert jobs["linux"]["strategy"]["matrix"]["user"] == ["root", "non-root"]
    for name in ("linux", "macos", "wsl"):
        lines = run_lines(jobs[name])
        assert 'python -m pytest tests/kit -m "not slow" -q' in lines, name
        assert "python -m grader --target solutions" in lines, name
        assert f"pip install torch=={locked_torch()}" in lines and "pip install -e '.[notebook]'" in lines, name
    assert jobs["wsl"]["defaults"]["run"]["shell"] == "wsl-bash {0}"
    setup = next(s for s in jobs["wsl"]["steps"] if s.get("uses", "").startswith("Vampire/setup-wsl@"))
    assert setup["with"]["wsl-version"] == 2
    assert 'returncode == 2' in run_lines(jobs["windows-native"]) and '"WSL" in lines[0]' in run_lines(
        jobs["windows-native"])
    assert all("timeout-minutes" in job for job in jobs.values())


def test_the_devcontainer_job_builds_the_image_and_grades_in_it_as_devcontainer_json_says(workflow, config):
    lines = run_lines(workflow["jobs"]["devcontainer"])
    assert re.search(r"docker build -f \.devcontainer/Dockerfile -t kit-devcontainer \.$", lines, re.M)
    assert f"{config['postCreateCommand']} && python -m grader ex01" in lines
    assert "--privileged" not in lines and "seccomp" not in lines.replace("default seccomp", "")
