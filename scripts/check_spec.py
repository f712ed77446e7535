#!/usr/bin/env python3
"""SPEC.md and the public headers are one truth: every function the headers
declare (HAL_API, and the plugin entry's HAL_PLUGIN_EXPORT, in api/) has an entry in SPEC.md's function reference, and
every entry has its function, with the same parameters.

  check_spec.py [--spec SPEC.md] [--include api/]

Entries are the ```c prototypes of section 11 (return type, name and every
parameter's type and name are compared) and the `hal_name(params)` rows of the
collectives' table in section 13.2 (parameter names are compared). The prose is
checked too: every header of api/ in the header table, every chapter in the
contents line, chapter and section numbers in order, and no note addressed to
people ("the lead", "proposed to", "see the report"). Prints each problem and
exits 1 when there is one.
"""
import argparse
import os
import re
import sys

DECLARATION = re.compile(r"(?:HAL_API|HAL_PLUGIN_EXPORT)\s+([^;{}]*?)\b(hal_\w+)\s*\(([^;{}]*?)\)\s*;", re.S)
PROTOTYPE = re.compile(r"^([\w\s\*]*?)\b(hal_\w+)\s*\(([^;]*?)\)\s*;", re.M | re.S)


def normalise(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"\b(HAL_API|HAL_PLUGIN_EXPORT)\b", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"\s*\*\s*", "* ", text).replace("* )", "*)").strip()


def split_params(text):
    text = normalise(text)
    if text in ("", "void"):
        return []
    return [p.strip() for p in text.split(",")]


def param_name(param):
    match = re.search(r"(\w+)\s*(\[[^\]]*\])?$", param)
    return match.group(1) if match else param


def header_functions(include):
    functions = {}
    for folder, _, files in os.walk(include):
        for name in sorted(files):
            if not name.endswith(".h"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as handle:
                text = re.sub(r"/\*.*?\*/", " ", handle.read(), flags=re.S)
            text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)  # macros, includes
            for ret, fname, params in DECLARATION.findall(text):
                functions[fname] = (normalise(ret), split_params(params),
                                    os.path.relpath(path, include))
    return functions


def section(text, number):
    """The text of '## <number>.' up to the next '## ' heading."""
    match = re.search(r"^## %d\. .*?(?=^## )" % number, text, re.M | re.S)
    return match.group(0) if match else ""


def spec_entries(spec_text):
    prototypes = {}
    for block in re.findall(r"```c\n(.*?)```", section(spec_text, 11), re.S):
        for ret, fname, params in PROTOTYPE.findall(block):
            prototypes[fname] = (normalise(ret), split_params(params))
    rows = {}
    table = re.search(r"^### 13\.2 .*?(?=^### )", section(spec_text, 13), re.M | re.S)
    for line in (table.group(0) if table else "").splitlines():
        if not line.startswith("| `hal_"):
            continue
        cell = line.split("|")[1]
        names = re.findall(r"`(hal_\w+)(?:\(([^)`]*)\))?`", cell)
        # "`hal_send` / `hal_recv(buf, ...)`": one parameter list for both.
        shared = names[-1][1] if "/" in cell and names and names[-1][1] else None
        for fname, params in names:
            if not params and shared is not None:
                params = shared
            rows[fname] = [p.strip() for p in params.split(",") if p.strip()] if params else None
    return prototypes, rows


def compare(spec_text, functions, include_label):
    prototypes, rows = spec_entries(spec_text)
    problems = []
    for fname, (ret, params, header) in sorted(functions.items()):
        if fname in prototypes:
            spec_ret, spec_params = prototypes[fname]
            if spec_ret != ret:
                problems.append("%s: returns '%s' in %s, '%s' in SPEC.md" %
                                (fname, ret, header, spec_ret))
            if spec_params != params:
                problems.append("%s: parameters differ\n  %s: (%s)\n  SPEC.md:  (%s)" %
                                (fname, header, ", ".join(params), ", ".join(spec_params)))
        elif fname in rows:
            names = [param_name(p) for p in params]
            if rows[fname] is not None and rows[fname] != names:
                problems.append("%s: parameter names differ\n  %s: (%s)\n  SPEC.md §13.2: (%s)" %
                                (fname, header, ", ".join(names), ", ".join(rows[fname])))
        else:
            problems.append("%s (%s) has no entry in SPEC.md §11 or §13.2" % (fname, header))
    for fname in sorted(set(prototypes) | set(rows)):
        if fname not in functions:
            problems.append("SPEC.md documents %s, which no header in %s declares" %
                            (fname, include_label))
    return problems


def anchor(heading):
    """The GitHub anchor of a heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return "#" + text.replace(" ", "-")


def prose_problems(spec_text, include):
    """The document's own shape: every public header in the header table, every chapter in the
    contents, section numbers in order, and no notes addressed to people instead of readers."""
    problems = []
    table = re.search(r"^\| header \| declares \|\n(.*?)\n\n", spec_text, re.M | re.S)
    listed = set(re.findall(r"`([\w/]+\.h)`", table.group(1))) if table else set()
    for folder, _, files in os.walk(include):
        for name in files:
            if name.endswith(".h"):
                header = os.path.relpath(os.path.join(folder, name), include)
                if header not in listed:
                    problems.append("header table: %s is not listed" % header)
    contents = re.search(r"^Contents:(.*?)\n\n", spec_text, re.M | re.S)
    links = set(re.findall(r"\((#[^)]+)\)", contents.group(1))) if contents else set()
    chapter, section_key = 0, None
    for level, title in re.findall(r"^(##|###) (.*)$", spec_text, re.M):
        if level == "##":
            if anchor(title) not in links:
                problems.append("contents: chapter '%s' is not linked" % title)
            number = re.match(r"(\d+)\. ", title)
            if number:
                if int(number.group(1)) != chapter + 1:
                    problems.append("chapter '%s' follows chapter %d" % (title, chapter))
                chapter = int(number.group(1))
                section_key = (0, "")
            continue
        number = re.match(r"(\d+)\.(\d+)([a-z]?) ", title)
        if not number:
            continue
        if int(number.group(1)) != chapter:
            problems.append("section '%s' is inside chapter %d" % (title, chapter))
            continue
        key = (int(number.group(2)), number.group(3))
        if section_key is not None and key <= section_key:
            problems.append("section '%s' comes after %d.%d%s" %
                            (title, chapter, section_key[0], section_key[1]))
        section_key = key
    for match in re.finditer(r"(?i)\b(the lead\b|proposed to|see the report)", spec_text):
        line = spec_text.count("\n", 0, match.start()) + 1
        problems.append("line %d: a note addressed to people ('%s'): write the rule" %
                        (line, match.group(1)))
    return problems


def self_test(spec_text, functions, include):
    """Plants one drift of each kind in a copy of SPEC.md; each must be caught."""
    plants = {
        "a function missing from SPEC": ("hal_result_t hal_device_count(uint32_t* out_count);",
                                         ""),
        "a parameter renamed": ("hal_result_t hal_stream_query(hal_stream_t stream);",
                                "hal_result_t hal_stream_query(hal_stream_t s);"),
        "a parameter retyped": ("hal_result_t hal_event_query(hal_event_t event);",
                                "hal_result_t hal_event_query(hal_stream_t event);"),
        "an entry with no function": ("```c\nuint32_t hal_get_version(void);\n```",
                                      "```c\nuint32_t hal_get_version(void);\n"
                                      "void hal_planted(void);\n```"),
        "a collective's parameter renamed": ("`hal_broadcast(sendbuf,", "`hal_broadcast(send,"),
    }
    prose_plants = {
        "a header left out of the table": ("| `hal/moe.h` |", "| `hal/moe_gone` |"),
        "a chapter left out of the contents": ("[15 Threat model](#15-threat-model)",
                                               "[15 Threat model](#15-gone)"),
        "two sections out of order": ("### 11.8 `hal/ops.h`", "### 11.10 `hal/ops.h`"),
        "a note to people": ("> **Note:** The headers define only `HAL_INIT_OPTIONS_INIT`.",
                             "> **Note:** The lead should confirm this."),
    }
    failed = 0
    for what, (old, new) in list(plants.items()) + list(prose_plants.items()):
        if spec_text.count(old) != 1:
            print("spec self-test: cannot plant %s: '%s' is not in SPEC.md once" % (what, old))
            failed += 1
            continue
        planted = spec_text.replace(old, new)
        if what in prose_plants:
            problems = prose_problems(planted, include)
        else:
            problems = compare(planted, functions, "api")
        if len(problems) != 1:
            print("spec self-test: %s gave %d problems, not 1: %s" % (what, len(problems), problems))
            failed += 1
    if failed == 0:
        total = len(plants) + len(prose_plants)
        print("spec self-test: caught %d/%d planted drifts" % (total, total))
    return 1 if failed else 0


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=os.path.join(root, "SPEC.md"))
    parser.add_argument("--include", default=os.path.join(root, "api"))
    parser.add_argument("--self-test", action="store_true",
                        help="plant drifts in a copy of SPEC.md and check each is caught")
    args = parser.parse_args()
    with open(args.spec, encoding="utf-8") as handle:
        spec_text = handle.read()
    functions = header_functions(args.include)
    if args.self_test:
        return self_test(spec_text, functions, args.include)
    problems = compare(spec_text, functions, os.path.relpath(args.include, root))
    problems += prose_problems(spec_text, args.include)
    for problem in problems:
        print("spec: " + problem)
    if problems:
        print("spec: %d problem(s) in SPEC.md or between it and the headers" % len(problems))
        return 1
    print("spec: SPEC.md matches the %d functions of the headers; its tables, contents and "
          "numbering are whole" % len(functions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
