"""mypy over @hal.kernel code, with hal.mypy_plugin (samples/python/mypy.ini): the samples are
clean; kernels with type errors get them reported; and without the plugin the array
annotations are what mypy refuses (so the plugin is what makes the samples pass). CTest runs
this as python.mypy with the build's package on MYPYPATH and PYTHONPATH, and MYPY_CACHE_DIR
in the build tree."""
import os
import textwrap

import pytest

api = pytest.importorskip("mypy.api", reason="mypy is not installed (scripts/setup.sh --for-tests)")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CONFIG = os.path.join(ROOT, "samples", "python", "mypy.ini")


def mypy(*arguments):
    # MYPY_CACHE_DIR (CTest: in the build tree) keeps numpy's stubs analysed between runs.
    out, err, status = api.run(list(arguments))
    return status, out + err


def test_the_samples_type_check():
    status, report = mypy("--config-file", CONFIG, os.path.join(ROOT, "samples", "python"))
    assert status == 0, report
    assert "Success: no issues found in 3 source files" in report


BAD = '''
import hal


@hal.kernel
def k(a: hal.f32[:], b: hal.i32[:], n: hal.i32) -> None:
    i = hal.global_id("0")                 # a string dimension
    a[i] = "one"                           # a string into a float array
    b[i] = a[i]                            # a float into an int array
    x: int = hal.sqrt(a[i])                # sqrt gives a float
    hal.barrier(1)                         # barrier takes nothing
    tile = hal.shared(hal.f32, (16, 16))
    tile[0, 0] = a[0]
'''


def test_kernels_with_type_errors_are_reported(tmp_path):
    source = tmp_path / "bad_kernels.py"
    source.write_text(textwrap.dedent(BAD))
    status, report = mypy("--config-file", CONFIG, str(source))
    assert status == 1, report
    lines = {int(line.split(":")[1]) for line in report.splitlines() if ": error:" in line}
    assert lines == {7, 8, 9, 10, 11}, report


def test_without_the_plugin_array_annotations_are_refused(tmp_path):
    source = tmp_path / "kernels.py"
    source.write_text(textwrap.dedent(BAD).split("    i = ")[0] + "    pass\n")
    status, report = mypy(str(source))
    assert status == 1 and "Invalid type comment or annotation" in report, report
