"""scripts/check_readme_blocks.py against READMEs written here: blocks that run, blocks that
fail, blocks left unmarked, marks without a reason, and one scratch directory per README."""
import os
import subprocess
import sys
import textwrap

CHECK = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check_readme_blocks.py")


def check(tmp_path, text):
    readme = tmp_path / "README.md"
    readme.write_text(textwrap.dedent(text))
    build = tmp_path / "build"
    (build / "python").mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, CHECK, "--build", str(build), "--timeout", "60",
                             str(readme)], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


def test_blocks_run_in_order_in_one_directory(tmp_path):
    code, output = check(tmp_path, """\
        # A quick start

        ```sh
        echo 41 > answer.txt
        ```

        1. then, in a list:
           ```python
           import pathlib
           assert int(pathlib.Path("answer.txt").read_text()) + 1 == 42
           ```

        <!-- not run: the output of the commands above -->
        ```
        42
        ```
        """)
    assert code == 0, output
    assert "2 ran, 1 marked not run, 0 problem(s)" in output


def test_a_failing_block_is_reported_with_its_line(tmp_path):
    code, output = check(tmp_path, """\
        text

        ```python
        import hal_no_such_module
        ```
        """)
    assert code == 1
    assert "README.md:3: the python block failed" in output
    assert "hal_no_such_module" in output


def test_a_failing_shell_command_fails_the_block(tmp_path):
    code, output = check(tmp_path, """\
        ```bash
        false
        echo never
        ```
        """)
    assert code == 1 and "README.md:1: the bash block failed" in output


def test_an_unmarked_block_without_a_language_is_an_error(tmp_path):
    code, output = check(tmp_path, """\
        ```
        step 1/2 loss 5.5
        ```

        ```toml
        [x]
        ```
        """)
    assert code == 1
    assert "README.md:1: a block without a language cannot run" in output
    assert "README.md:5: a 'toml' block cannot run" in output


def test_a_mark_needs_a_reason(tmp_path):
    code, output = check(tmp_path, """\
        <!-- not run: -->
        ```sh
        rm -rf /nonexistent-hal-test
        ```
        """)
    assert code == 1 and "needs a reason" in output


def test_an_unclosed_block_is_an_error(tmp_path):
    code, output = check(tmp_path, """\
        ```sh
        echo open
        """)
    assert code == 1 and "never closed" in output
