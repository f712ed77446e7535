#!/usr/bin/env python3
"""The ABI table of HAL's public headers and library, and its comparison.

  abi_table.py generate --include DIR [--library LIBHAL] [--cc CLANG] > table.txt
  abi_table.py compare BASELINE CURRENT

`generate` asks clang for the AST of every header under DIR (as JSON), lists
every public struct, field, enumerator and function, then compiles and runs a
C program that prints what the compiler lays out: struct sizes and alignments,
field offsets and sizes, enumerator values. With --library it adds the
library's exported symbols (nm -D). One fact per line, sorted:

  struct hal_launch_config size=48 align=8 extensible=1
  field hal_launch_config.grid offset=16 size=12
  enum HAL_ERROR_OUT_OF_BOUNDS = 7
  function hal_launch_kernel
  export hal_launch_kernel

`compare` passes when CURRENT keeps every fact of BASELINE: an addition
(new struct, field, enumerator, function, export) is compatible; a struct may
grow only if it starts with struct_size (extensible=1); anything removed,
moved, resized or renumbered is a break. It prints both kinds and exits 1 on
a break.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def headers_under(include_dir):
    found = []
    for folder, _, files in os.walk(include_dir):
        for name in files:
            if name.endswith(".h"):
                found.append(os.path.relpath(os.path.join(folder, name), include_dir))
    return sorted(found)


def ast_of(cc, include_dir, headers):
    source = "".join(f'#include "{h}"\n' for h in headers)
    result = subprocess.run(
        [cc, "-x", "c", "-std=c11", "-fsyntax-only", "-Xclang", "-ast-dump=json", "-I", include_dir, "-"],
        input=source, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"abi_table: clang could not parse the headers:\n{result.stderr}")
    return json.loads(result.stdout)


def public_declarations(ast):
    """(records {tag: [fields]}, enumerators [names], functions [names])."""
    records, enumerators, functions = {}, [], []
    for decl in ast.get("inner", []):
        kind, name = decl.get("kind"), decl.get("name", "")
        if kind == "RecordDecl" and decl.get("completeDefinition") and name.startswith("hal_"):
            fields = [f["name"] for f in decl.get("inner", []) if f.get("kind") == "FieldDecl"]
            records[name] = fields
        elif kind == "EnumDecl" and name.startswith("hal_"):
            enumerators += [e["name"] for e in decl.get("inner", []) if e.get("kind") == "EnumConstantDecl"]
        elif kind == "FunctionDecl" and name.startswith("hal_") and not decl.get("isImplicit"):
            functions.append(name)
    return records, enumerators, sorted(set(functions))


def layout_program(headers, records, enumerators):
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <stdalign.h>"]
    lines += [f'#include "{h}"' for h in headers]
    lines.append("#define FIELD_SIZE(t, f) sizeof(((t*)0)->f)")
    lines.append("int main(void) {")
    for tag, fields in records.items():
        extensible = 1 if fields and fields[0] == "struct_size" else 0
        lines.append(f'  printf("struct {tag} size=%zu align=%zu extensible={extensible}\\n", '
                     f'sizeof(struct {tag}), alignof(struct {tag}));')
        for field in fields:
            lines.append(f'  printf("field {tag}.{field} offset=%zu size=%zu\\n", '
                         f'offsetof(struct {tag}, {field}), FIELD_SIZE(struct {tag}, {field}));')
    for name in enumerators:
        lines.append(f'  printf("enum {name} = %lld\\n", (long long){name});')
    lines.append("  return 0;\n}")
    return "\n".join(lines) + "\n"


def exports_of(library):
    result = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True,
                            check=True)
    names = []
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRW" and parts[2].startswith("hal_"):
            names.append(parts[2].split("@")[0])
    return sorted(set(names))


def generate(args):
    include_dir = os.path.abspath(args.include)
    headers = headers_under(include_dir)
    records, enumerators, functions = public_declarations(ast_of(args.cc, include_dir, headers))
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "layout.c")
        binary = os.path.join(scratch, "layout")
        with open(source, "w") as out:
            out.write(layout_program(headers, records, enumerators))
        subprocess.run([args.cc, "-std=c11", "-w", "-I", include_dir, source, "-o", binary], check=True)
        facts = subprocess.run([binary], capture_output=True, text=True, check=True).stdout.splitlines()
    facts += [f"function {name}" for name in functions]
    if args.library:
        facts += [f"export {name}" for name in exports_of(args.library)]
    print("\n".join(sorted(facts)))


def parse(path):
    """{key: (kind, value)}: the key names the fact, the value is what must not change."""
    facts = {}
    with open(path) as text:
        for line in text:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            kind, rest = line.split(" ", 1)
            if kind in ("function", "export"):
                facts[line] = (kind, "")
            elif kind == "enum":
                name, value = rest.split(" = ")
                facts[f"enum {name}"] = (kind, value)
            else:
                name, value = rest.split(" ", 1)
                facts[f"{kind} {name}"] = (kind, value)
    return facts


def struct_fields(value):
    return dict(item.split("=") for item in value.split())


def compare(args):
    baseline, current = parse(args.baseline), parse(args.current)
    breaks, additions = [], []
    for key, (kind, value) in sorted(baseline.items()):
        if key not in current:
            breaks.append(f"removed: {key}")
            continue
        now = current[key][1]
        if now == value:
            continue
        if kind == "struct":
            old, new = struct_fields(value), struct_fields(now)
            grew = int(new["size"]) > int(old["size"]) and new["align"] == old["align"]
            if grew and old["extensible"] == "1" and new["extensible"] == "1":
                additions.append(f"grew: {key} {value} -> {now}")
                continue
        breaks.append(f"changed: {key}: {value} -> {now}")
    additions += [f"added: {key}" for key in sorted(current) if key not in baseline]
    for line in additions:
        print(f"abi: compatible {line}")
    for line in breaks:
        print(f"abi: BREAK {line}")
    print(f"abi: {len(breaks)} breaking and {len(additions)} compatible differences "
          f"against {args.baseline}")
    return 1 if breaks else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate")
    gen.add_argument("--include", required=True, help="the public include directory (api/)")
    gen.add_argument("--library", help="libhal.so, for its exported symbols")
    gen.add_argument("--cc", default="clang", help="a clang, for the AST and the layout program")
    cmp_ = commands.add_parser("compare")
    cmp_.add_argument("baseline")
    cmp_.add_argument("current")
    args = parser.parse_args()
    if args.command == "generate":
        generate(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
