"""Which stack `make demo` / `make test` pick (scripts/stack.sh), on machines this one is not: fake
interpreters on an otherwise empty PATH, each a shell script that answers the version query with
the version it pretends to be (or fails, as a pyenv shim of an inactive version does)."""
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO_ROOT = Path(__file__).resolve().parents[2]


def pick(tmp_path, interpreters: dict[str, str | None], stack: str | None = None, java: str | None = "17.0.9"):
    """(exit status, STACK, the one line stack_pick printed, java check's output) with only
    `interpreters` (name -> the version it reports; None: it exits 127) and java on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, version in interpreters.items():
        answer = f'echo "{version}"' if version else 'echo "pyenv: {name}: command not found" >&2; exit 127'
        (bin_dir / name).write_text(f"#!/bin/sh\n{answer}\n")
        (bin_dir / name).chmod(0o755)
    if java:
        (bin_dir / "java").write_text(f'#!/bin/sh\necho \'openjdk version "{java}" 2023-10-17\' >&2\n')
        (bin_dir / "java").chmod(0o755)
    env = {"PATH": str(bin_dir)}
    if stack is not None:
        env["SHARDLINE_STACK"] = stack
    script = '. scripts/stack.sh; stack_pick; status=$?; echo "STACK=${STACK:-}"; [ $status = 0 ] && stack_check_java "$STACK"; exit $status'
    result = subprocess.run(["/bin/bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30)
    lines = result.stderr.strip().splitlines()
    chosen = result.stdout.strip().removeprefix("STACK=")
    return result.returncode, chosen, lines[0] if lines else "", "\n".join(lines[1:])


def test_a_python3_of_3_13_alone_gets_the_current_stack_and_says_why(tmp_path):
    status, stack, said, _ = pick(tmp_path, {"python3": "3.13"})
    assert (status, stack) == (0, "current")
    assert said.startswith("shardline: stack current with ") and "python3 is 3.13" in said and "3.10-3.12" in said


def test_a_python3_12_beside_a_python3_of_3_13_gets_the_petastorm_stack(tmp_path):
    status, stack, said, _ = pick(tmp_path, {"python3": "3.13", "python3.12": "3.12"})
    assert (status, stack) == (0, "petastorm")
    assert said.startswith("shardline: stack petastorm with ") and said.split()[4].endswith("/python3.12")


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12"])
def test_a_python3_petastorm_runs_on_gets_the_petastorm_stack(tmp_path, version):
    assert pick(tmp_path, {"python3": version})[:2] == (0, "petastorm")


def test_a_shim_of_an_inactive_version_is_passed_over(tmp_path):
    # pyenv puts python3.12 on PATH even when 3.12 is not the active version; calling it fails.
    status, stack, said, _ = pick(tmp_path, {"python3": "3.13", "python3.12": None, "python3.11": "3.11"})
    assert (status, stack) == (0, "petastorm") and said.split()[4].endswith("/python3.11")


def test_shardline_stack_current_is_honoured_where_petastorm_could_run(tmp_path):
    status, stack, said, _ = pick(tmp_path, {"python3": "3.11"}, stack="current")
    assert (status, stack) == (0, "current") and said.endswith("as SHARDLINE_STACK says")


def test_asking_for_petastorm_on_a_3_13_only_machine_is_a_one_line_error_saying_what_to_install(tmp_path):
    status, stack, said, rest = pick(tmp_path, {"python3": "3.13"}, stack="petastorm")
    assert status != 0 and stack == "" and rest == ""
    assert said.startswith("SHARDLINE_STACK=petastorm needs Python 3.10, 3.11, 3.12") and "python3 is 3.13" in said
    assert "install one" in said
    status, _, said, _ = pick(tmp_path / "39", {"python3": "3.9"}, stack="current")
    assert status != 0 and said.startswith("SHARDLINE_STACK=current needs Python 3.10, 3.11, 3.12, 3.13")


def test_the_current_stack_runs_on_a_python_3_10(tmp_path):
    # On 3.10 its pins take Spark 4.2 and numpy 2.2 (constraints-current.txt's 3.10 lines).
    status, stack, said, _ = pick(tmp_path, {"python3": "3.9", "python3.10": "3.10"}, stack="current")
    assert (status, stack) == (0, "current") and said.split()[4].endswith("/python3.10,")


def test_an_unknown_stack_name_and_a_machine_with_no_usable_python_are_one_line_errors(tmp_path):
    status, _, said, rest = pick(tmp_path, {"python3": "3.11"}, stack="spark4")
    assert status != 0 and rest == "" and said == "SHARDLINE_STACK=spark4 is not a stack; use petastorm or current"
    status, _, said, rest = pick(tmp_path / "old", {"python3": "3.9"})
    assert status != 0 and rest == "" and said.startswith("shardline needs Python 3.10-3.13 (python3 is 3.9)")


@pytest.mark.parametrize(("interpreters", "java", "warned"), [
    ({"python3": "3.11"}, "17.0.9", False), ({"python3": "3.11"}, "1.8.0_392", False),
    ({"python3": "3.11"}, "21.0.1", True),  # Spark 3.5 is not tested on 21
    ({"python3": "3.13"}, "21.0.1", False), ({"python3": "3.13"}, "11.0.21", True),  # Spark 4 needs 17+
])
def test_the_java_check_accepts_what_each_stacks_spark_supports(tmp_path, interpreters, java, warned):
    status, _, _, rest = pick(tmp_path, interpreters, java=java)
    assert status == 0
    assert rest.startswith("warning: Java ") == warned, rest
