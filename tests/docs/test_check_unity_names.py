"""scripts/check_unity_names.py against small trees written here: a file-local name that another
source of the same target reaches through `using namespace` is flagged with both places; a
renamed one, a qualified use, a source compiled alone, another target, comments and strings, and
an allow-listed name are not."""
import os
import subprocess
import sys
import textwrap

import pytest

CHECK = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check_unity_names.py")

HEADER = """\
    #pragma once
    namespace coll_test {
    struct Buffer {
      int bytes = 0;
    };
    int scale(int value);
    }  // namespace coll_test
    """

USER = """\
    #include "coll.hpp"
    namespace {
    using namespace coll_test;
    int use() {
      Buffer buffer{};
      return buffer.bytes;
    }
    }  // namespace
    """


def run(tmp_path, files, allow=None):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    command = [sys.executable, CHECK, "--root", str(tmp_path)]
    allow_path = tmp_path / "allow.txt"
    if allow is not None:
        allow_path.write_text(allow)
    command += ["--allow", str(allow_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout + result.stderr


def planted(local="struct Buffer {\n  double seconds = 0;\n};",
            cmake="add_executable(t a.cpp b.cpp)\n"):
    return {
        "CMakeLists.txt": cmake,
        "coll.hpp": HEADER,
        "a.cpp": "namespace {\n" + local + "\n}  // namespace\nint main() { return 0; }\n",
        "b.cpp": USER,
    }


def test_a_local_type_that_a_later_source_reaches_through_using_namespace_is_flagged(tmp_path):
    code, output = run(tmp_path, planted())
    assert code == 1, output
    assert ("a.cpp:2: file-local 'Buffer' takes the place of coll_test::Buffer (coll.hpp:3)"
            in output)
    assert "for b.cpp:3 (`using namespace coll_test;`) in a unity batch of t" in output
    assert "1 finding(s)" in output


def test_a_renamed_local_passes(tmp_path):
    code, output = run(tmp_path, planted(local="struct TimingBuffer {\n  double seconds = 0;\n};"))
    assert code == 0, output
    assert "0 finding(s)" in output


def test_a_qualified_use_is_not_flagged(tmp_path):
    files = planted()
    files["b.cpp"] = """\
        #include "coll.hpp"
        using namespace coll_test;
        int use() { return coll_test::Buffer{}.bytes; }
        """
    code, output = run(tmp_path, files)
    assert code == 0, output


@pytest.mark.parametrize("alone", [
    "hal_optimize_when_sanitized(a.cpp)",
    "set_property(SOURCE a.cpp PROPERTY SKIP_UNITY_BUILD_INCLUSION ON)",
    'set_source_files_properties(a.cpp PROPERTIES COMPILE_OPTIONS "-O3")',
])
def test_a_source_compiled_alone_is_not_in_a_batch(tmp_path, alone):
    code, output = run(tmp_path, planted(cmake="add_executable(t a.cpp b.cpp)\n" + alone + "\n"))
    assert code == 0, output


def test_options_set_in_only_some_trees_leave_the_source_in_the_batches_of_the_others(tmp_path):
    cmake = textwrap.dedent("""\
        add_executable(t a.cpp b.cpp)
        if(FAST)
          set_source_files_properties(a.cpp PROPERTIES COMPILE_OPTIONS "-O3")
        endif()
        """)
    code, output = run(tmp_path, planted(cmake=cmake))
    assert code == 1, output


def test_sources_of_different_targets_are_not_compared(tmp_path):
    cmake = "add_executable(t1 a.cpp)\nadd_executable(t2 b.cpp)\n"
    code, output = run(tmp_path, planted(cmake=cmake))
    assert code == 0, output


def test_a_static_function_against_a_namespace_block_of_another_source_is_flagged(tmp_path):
    files = planted(cmake=textwrap.dedent("""\
        set(sources a.cpp)
        list(APPEND sources b.cpp)
        add_library(lib STATIC ${sources})
        """))
    files["a.cpp"] = "static int scale(double value) { return int(value); }\n"
    files["b.cpp"] = """\
        namespace coll_ops {
        int scale(int value) { return value * 2; }
        }  // namespace coll_ops
        using namespace coll_ops;
        int twice() { return scale(1); }
        """
    code, output = run(tmp_path, files)
    assert code == 1, output
    assert "a.cpp:1: file-local 'scale' takes the place of coll_ops::scale (b.cpp:2)" in output
    assert "in a unity batch of lib" in output


def test_comments_and_strings_declare_nothing(tmp_path):
    files = planted(local=textwrap.dedent("""\
        // struct Buffer {};
        /* int Buffer; */
        const char* kText = "struct Buffer {};";
        const char* kRaw = R"(namespace { int Buffer; })";"""))
    code, output = run(tmp_path, files)
    assert code == 0, output


def test_unclaimed_sources_are_grouped_by_directory(tmp_path):
    # A source list this reader cannot follow: the directory's sources form the target.
    code, output = run(tmp_path, planted(cmake="add_executable(t ${sources_from_elsewhere})\n"))
    assert code == 1, output
    assert "unclaimed sources of" in output


def test_an_allow_listed_name_is_not_flagged(tmp_path):
    code, output = run(tmp_path, planted(), allow="a.cpp:Buffer  # the test's reason\n")
    assert code == 0, output
