#!/usr/bin/env python3
"""Unity-build name check: a name local to one source that silently takes the place of a name
another source of the same target reaches through `using namespace N;`.

CI compiles every target as a unity build: CMake concatenates up to 16 of a target's C++ sources
into one translation unit. Two sources that each declare the same file-local name (anonymous
namespace, or `static` at namespace scope) already fail to compile. This check finds the silent
case: source A declares a file-local `Buffer`, and source B of the same target says
`using namespace coll_test;` and writes `Buffer` meaning coll_test::Buffer. Concatenated, B's
unqualified `Buffer` finds A's (a nearer scope than the global one the directive's names appear
in), and B compiles against the wrong entity.

For each target it collects
  (1) file-local names: types, functions, variables and constants declared at namespace scope in
      an anonymous namespace, or `static` at namespace scope, in a source of the target;
  (2) reachable names: for each `using namespace N;` in another source B of the target, the names
      declared in namespace N in the project headers the target's sources include (transitively)
      and in N blocks of the target's own sources;
and reports each file-local name of A equal to a reachable name of N that B also writes
unqualified. The order of A and B within a batch is not required: the batches change as sources
are added, and a target's batches differ between trees only by the sources compiled alone.

Targets: add_executable / add_library / target_sources and the project's own CMake functions
whose arguments name C++ sources, with `set` / `list(APPEND)` variables of the same file and the
directory variables resolved. A C++ source no such call claims (a list built in ways this reader
does not follow) is grouped with the other unclaimed sources of its CMakeLists.txt directory, so
every source is checked with some plausible target. Sources compiled alone are left out:
SKIP_UNITY_BUILD_INCLUSION (hal_optimize_when_sanitized sets it), and source options, definitions
or include folders set outside an if() (CMake keeps such a source out of every batch).

The C++ reader is a tokenizer with a brace-scope tracker (comments, strings and the preprocessor
skipped; `#include` lines read), not a compiler: it reads the declared name of each namespace-scope
statement. Known false positives, with their reasons, go in check_unity_names.allow next to this
script, one `file-local-path:name` a line.
"""
import argparse
import os
import re
import subprocess
import sys
import time

CXX_SOURCE = (".cpp", ".cc", ".cxx")
HEADER = (".hpp", ".h", ".hh", ".hxx", ".inl", ".inc", ".ipp")
KEYWORDS = set("""
alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class concept
const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend
goto if inline int long mutable namespace new noexcept nullptr operator private protected public
register reinterpret_cast
requires return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while final override
""".split())

TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<rawstr>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)")
  | (?P<str>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
  | (?P<chr>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
  | (?P<num>\.?\d(?:[\w.']|[eEpP][+-])*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<punct>::|->|>>=|<<=|>>|<<|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%&|^!=<>]=?|[(){}\[\];,.?:~#])
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def tokenize(text):
    """Tokens (kind, value, line) without comments, strings' contents or preprocessor lines;
    `#include` lines become ("include", path, line)."""
    tokens = []
    line = 1
    pos = 0
    at_line_start = True
    while pos < len(text):
        if at_line_start:
            m = re.compile(r"[ \t]*#").match(text, pos)
            if m:
                # A preprocessor line, with its continuations.
                end = pos
                while True:
                    nl = text.find("\n", end)
                    if nl < 0:
                        nl = len(text)
                        break
                    if text[nl - 1] == "\\" or (nl > 0 and text[nl - 2:nl] == "\\\r"):
                        end = nl + 1
                        continue
                    break
                directive = text[m.end():nl]
                inc = re.match(r'\s*include\s*["<]([^">]+)[">]', directive)
                if inc:
                    tokens.append(("include", inc.group(1), line))
                line += text.count("\n", pos, nl)
                pos = nl
                continue
        m = TOKEN_RE.match(text, pos)
        kind = m.lastgroup if m.lastgroup != "delim" else "rawstr"
        value = m.group(0)
        if kind in ("ident", "punct", "num", "other"):
            tokens.append((kind, value, line))
        elif kind in ("str", "rawstr", "chr"):
            tokens.append(("str", '""', line))
        newlines = value.count("\n")
        if newlines:
            at_line_start = True
            line += newlines
        elif kind != "ws" and kind != "comment":
            at_line_start = False
        if kind == "ws" and "\n" in value:
            at_line_start = True
        pos = m.end()
    return tokens


class ParsedFile:
    def __init__(self, path):
        self.path = path
        self.includes = []  # as written
        self.locals = []  # (name, line, namespace-or-"")
        self.namespace_names = {}  # "a::b" -> [(name, line)]
        self.usings = []  # (candidate qualified names, innermost first; line)
        self.unqualified = set()  # identifiers written without a qualifier in front


def skip_balanced(tokens, i, open_, close):
    """From tokens[i] == open_, the index after its matching close."""
    depth = 0
    while i < len(tokens):
        v = tokens[i][1]
        if v == open_:
            depth += 1
        elif v == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def strip_attributes(stmt):
    out = []
    i = 0
    while i < len(stmt):
        v = stmt[i][1]
        if v == "[" and i + 1 < len(stmt) and stmt[i + 1][1] == "[":
            i = skip_balanced(stmt, i, "[", "]")
            continue
        attribute = v in ("__attribute__", "alignas", "__declspec")
        if attribute and i + 1 < len(stmt) and stmt[i + 1][1] == "(":
            i = skip_balanced(stmt, i + 1, "(", ")")
            continue
        out.append(stmt[i])
        i += 1
    return out


def declared_name(stmt):
    """The name a namespace-scope statement declares, with its line and whether it says `static`;
    None for anything else (a macro call, an out-of-line member definition, an operator)."""
    stmt = strip_attributes(stmt)
    if not stmt:
        return None
    # template <...> prefixes
    while stmt and stmt[0][1] == "template":
        if len(stmt) > 1 and stmt[1][1] == "<":
            depth = 0
            j = 1
            while j < len(stmt):
                v = stmt[j][1]
                if v == "<":
                    depth += 1
                elif v == ">":
                    depth -= 1
                elif v == ">>":
                    depth -= 2
                if depth <= 0:
                    break
                j += 1
            stmt = stmt[j + 1:]
        else:
            return None  # explicit instantiation
    if not stmt:
        return None
    values = [t[1] for t in stmt]
    is_static = "static" in values[:6]
    first = values[0]
    if first in ("using",):
        if len(values) >= 3 and stmt[1][0] == "ident" and values[2] == "=":
            return stmt[1][1], stmt[1][2], is_static
        return None
    if first in ("static_assert", "namespace", "friend", "export", "asm"):
        return None
    if first == "extern" and len(values) > 1 and values[1] == '""':
        return None  # extern "C" declarations: C functions, not file-local ones
    if first == "typedef":
        # typedef void (*name)(...);  or  typedef T name;
        for j in range(len(stmt) - 2):
            if values[j] == "(" and values[j + 1] == "*" and stmt[j + 2][0] == "ident":
                return stmt[j + 2][1], stmt[j + 2][2], is_static
        idents = [t for t in stmt if t[0] == "ident" and t[1] not in KEYWORDS]
        return (idents[-1][1], idents[-1][2], is_static) if idents else None
    # class-key declarations: struct/class/union/enum Name
    k = 0
    while k < len(values) and values[k] in ("static", "inline", "constexpr", "const", "volatile",
                                             "thread_local", "extern", "typename"):
        k += 1
    if k < len(values) and values[k] in ("struct", "class", "union", "enum"):
        j = k + 1
        if values[k] == "enum" and j < len(values) and values[j] in ("class", "struct"):
            j += 1
        # struct X final : Base {   /  struct X;  /  struct X { } x;  (the type's name)
        if j < len(stmt) and stmt[j][0] == "ident" and stmt[j][1] not in KEYWORDS:
            nxt = values[j + 1] if j + 1 < len(values) else ";"
            if nxt in ("{", ";", ":", "final"):
                return stmt[j][1], stmt[j][2], is_static
        # `struct X* p` etc.: an elaborated type in a variable declaration; fall through
    # A variable or function: the identifier before the first top-level ( = { [ ; outside <>.
    angle = 0
    paren = 0
    for j, (kind, v, ln) in enumerate(stmt):
        if v == "operator":
            return None
        if v == "<":
            angle += 1
            continue
        if v == ">" and angle:
            angle -= 1
            continue
        if v == ">>" and angle:
            angle = max(0, angle - 2)
            continue
        if angle:
            if v == "(":
                paren += 1
            elif v == ")":
                paren -= 1
            continue
        if v in ("(", "=", "{", "[", ";", ":", ","):
            if j == 0:
                return None
            prev = stmt[j - 1]
            if prev[0] != "ident" or prev[1] in KEYWORDS:
                return None
            if j >= 2 and values[j - 2] in ("::", ".", "->"):
                return None  # Class::member definition
            if j == 1:
                return None  # NAME(...) at the start: a macro call, not a declaration
            if v == "(" and values[0] == prev[1].upper() and prev[1].isupper():
                return None
            if v == "(" and all(t[0] == "ident" and t[1].isupper() for t in stmt[:j]):
                return None  # MACRO_A MACRO_B(...)
            return prev[1], prev[2], is_static
    return None


def parse_source(path, text):
    pf = ParsedFile(path)
    tokens = tokenize(text)
    # unqualified identifiers
    prev = None
    for kind, v, ln in tokens:
        if kind == "include":
            pf.includes.append(v)
            continue
        if kind == "ident" and prev not in ("::", ".", "->"):
            pf.unqualified.add(v)
        prev = v
    tokens = [t for t in tokens if t[0] != "include"]
    # scope stack entries: ("ns", name or "" for anonymous) | ("linkage",) | ("other",)
    stack = []
    stack_group_sizes = []  # how many stack entries each open namespace or linkage block holds

    def ns_path():
        return [s[1] for s in stack if s[0] == "ns"]

    def at_namespace_scope():
        return all(s[0] in ("ns", "linkage") for s in stack)

    def in_anonymous():
        return any(s[0] == "ns" and s[1] == "" for s in stack)

    stmt = []
    i = 0
    n = len(tokens)
    while i < n:
        kind, v, ln = tokens[i]
        if not at_namespace_scope():
            # inside a body: only braces and using-directives matter
            if v == "{":
                stack.append(("other",))
            elif v == "}":
                stack.pop()
            elif v == "using" and i + 2 < n and tokens[i + 1][1] == "namespace":
                i = read_using(tokens, i, pf, ns_path())
                continue
            i += 1
            continue
        if v == "namespace" and not stmt:
            # namespace a::b { | namespace { | namespace x = y;
            j = i + 1
            names = []
            while j < n and (tokens[j][0] == "ident" or tokens[j][1] == "::"):
                if tokens[j][0] == "ident" and tokens[j][1] != "inline":
                    names.append(tokens[j][1])
                j += 1
            if j < n and tokens[j][1] == "{":
                if names:
                    for name in names:
                        stack.append(("ns", name))
                    stack_group_sizes.append(len(names))
                else:
                    stack.append(("ns", ""))
                    stack_group_sizes.append(1)
                i = j + 1
                continue
            # namespace alias
            while j < n and tokens[j][1] != ";":
                j += 1
            i = j + 1
            continue
        if v == "using" and i + 1 < n and tokens[i + 1][1] == "namespace":
            i = read_using(tokens, i, pf, ns_path())
            stmt = []
            continue
        linkage = i + 2 < n and tokens[i + 1][0] == "str" and tokens[i + 2][1] == "{"
        if v == "extern" and not stmt and linkage:
            stack.append(("linkage",))
            stack_group_sizes.append(1)
            i += 3
            continue
        if v == "}":
            # closes a namespace or linkage block
            size = stack_group_sizes.pop() if stack_group_sizes else 0
            del stack[len(stack) - size:]
            stmt = []
            i += 1
            continue
        if v == ";":
            record(pf, stmt, ns_path(), in_anonymous())
            stmt = []
            i += 1
            continue
        if v == "{":
            stmt.append(tokens[i])
            result = record(pf, stmt, ns_path(), in_anonymous())
            # skip the body; a class or enum body may be followed by declarators up to ;
            end = skip_balanced(tokens, i, "{", "}")
            values = [t[1] for t in strip_attributes(stmt)]
            is_type_or_init = (any(w in ("struct", "class", "union", "enum") for w in values[:4])
                               or (len(values) >= 2 and values[-2] == "=")
                               or (result is None and values and values[0] == "typedef"))
            enum_body = any(w == "enum" for w in values[:3])
            scoped = "class" in values[:3] or "struct" in values[:3]
            if enum_body and (result is None or not scoped):
                # an unscoped enum's enumerators are members of the namespace
                record_enumerators(pf, tokens[i + 1:end - 1], ns_path(), in_anonymous())
            i = end
            if is_type_or_init or (result is not None and values[-1] == "{" and len(values) >= 2
                                   and values[-2] != ")" and "(" not in values):
                # declarators after the body, up to ;
                rest = []
                while i < n and tokens[i][1] != ";":
                    if tokens[i][1] in ("{", "}") and not rest:
                        break
                    rest.append(tokens[i])
                    i += 1
                if rest and rest[0][0] == "ident":
                    record(pf, [("ident", "int", rest[0][2])] + rest, ns_path(), in_anonymous(),
                           static_hint="static" in values[:4])
                if i < n and tokens[i][1] == ";":
                    i += 1
            stmt = []
            continue
        stmt.append(tokens[i])
        i += 1
    return pf


def read_using(tokens, i, pf, namespaces):
    j = i + 2
    parts = []
    while j < len(tokens) and tokens[j][1] != ";":
        if tokens[j][0] == "ident":
            parts.append(tokens[j][1])
        j += 1
    named = [p for p in namespaces if p]
    target = "::".join(parts)
    candidates = ["::".join(named[:k] + parts) for k in range(len(named), -1, -1)]
    if tokens[i + 2][1] == "::":
        candidates = [target]
    pf.usings.append((candidates, tokens[i][2]))
    return j + 1


def record(pf, stmt, namespaces, anonymous, static_hint=False):
    if not stmt:
        return None
    found = declared_name(stmt)
    if found is None:
        return None
    name, line, is_static = found
    is_static = is_static or static_hint
    named = "::".join(p for p in namespaces if p)
    if anonymous or is_static:
        pf.locals.append((name, line, named))
    if named:
        pf.namespace_names.setdefault(named, []).append((name, line))
    return found


def record_enumerators(pf, body, namespaces, anonymous):
    depth = 0
    expect = True
    for kind, v, ln in body:
        if v in ("(", "{", "["):
            depth += 1
        elif v in (")", "}", "]"):
            depth -= 1
        elif v == "," and depth == 0:
            expect = True
        elif expect and kind == "ident" and depth == 0:
            named = "::".join(p for p in namespaces if p)
            if anonymous:
                pf.locals.append((v, ln, named))
            if named:
                pf.namespace_names.setdefault(named, []).append((v, ln))
            expect = False


# ---------------------------------------------------------------- CMake targets

SOURCE_ALONE = {"COMPILE_OPTIONS", "COMPILE_DEFINITIONS", "COMPILE_FLAGS", "INCLUDE_DIRECTORIES"}

CMAKE_TOKEN_RE = re.compile(
    r'#\[(=*)\[.*?\]\1\]|#[^\n]*|"(?:\\.|[^"\\])*"|\[(=*)\[.*?\]\2\]|[()]|[^\s()#"]+', re.DOTALL)


def cmake_commands(text):
    """(name, [args], line) for each command of a CMake file."""
    out = []
    tokens = []
    for m in CMAKE_TOKEN_RE.finditer(text):
        t = m.group(0)
        if t.startswith("#"):
            continue
        tokens.append((t, text.count("\n", 0, m.start()) + 1))
    i = 0
    while i < len(tokens):
        t, ln = tokens[i]
        if i + 1 < len(tokens) and tokens[i + 1][0] == "(" and re.match(r"^[A-Za-z_]\w*$", t):
            depth = 0
            args = []
            j = i + 1
            while j < len(tokens):
                a = tokens[j][0]
                if a == "(":
                    depth += 1
                    if depth > 1:
                        args.append(a)
                elif a == ")":
                    depth -= 1
                    if depth == 0:
                        break
                    args.append(a)
                else:
                    args.append(a[1:-1] if a.startswith('"') else a)
                j += 1
            out.append((t.lower(), args, ln))
            i = j + 1
        else:
            i += 1
    return out


def expand(value, variables, depth=0):
    if depth > 8:
        return value
    def sub(m):
        return variables.get(m.group(1), "\0")
    new = re.sub(r"\$\{(\w+)\}", sub, value)
    return expand(new, variables, depth + 1) if new != value and "${" in new else new


def cmake_targets(root, cmake_files):
    """{target: [sources in order]} and the set of sources compiled alone."""
    user_functions = set()
    parsed = {}
    for f in cmake_files:
        text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        parsed[f] = cmake_commands(text)
        for name, args, _ in parsed[f]:
            if name in ("function", "macro") and args:
                user_functions.add(args[0].lower())
    user_functions.discard("hal_optimize_when_sanitized")
    targets = {}
    alone = set()
    for f, commands in parsed.items():
        here = os.path.dirname(os.path.join(root, f))
        variables = {"PROJECT_SOURCE_DIR": root, "CMAKE_SOURCE_DIR": root,
                     "CMAKE_CURRENT_SOURCE_DIR": here, "CMAKE_CURRENT_LIST_DIR": here}
        in_function = 0
        conditional = 0

        def sources_of(args):
            out = []
            for a in args:
                for item in expand(a, variables).split(";"):
                    if "\0" in item or "$<" in item or not item.endswith(CXX_SOURCE):
                        continue
                    p = os.path.normpath(item if os.path.isabs(item) else os.path.join(here, item))
                    if os.path.isfile(p):
                        out.append(os.path.relpath(p, root))
            return out

        for name, args, _ in commands:
            if name in ("function", "macro"):
                in_function += 1
                continue
            if name in ("endfunction", "endmacro"):
                in_function -= 1
                continue
            if in_function:
                continue
            if name == "set" and args:
                values = [a for a in args[1:] if a not in ("CACHE", "PARENT_SCOPE")]
                variables[args[0]] = ";".join(expand(a, variables) for a in values)
            elif name == "list" and len(args) >= 2 and args[0] in ("APPEND", "PREPEND"):
                old = variables.get(args[1], "")
                add = ";".join(expand(a, variables) for a in args[2:])
                both = (old, add) if args[0] == "APPEND" else (add, old)
                variables[args[1]] = ";".join(x for x in both if x)
            elif name == "if":
                conditional += 1
            elif name == "endif":
                conditional -= 1
            elif name == "hal_optimize_when_sanitized":
                alone.update(sources_of(args))
            elif name in ("set_property", "set_source_files_properties"):
                # CMake compiles alone a source with SKIP_UNITY_BUILD_INCLUSION, or with options,
                # definitions or include folders of its own: those only where every tree sets them
                # (not under an if()), lest a batch some tree builds go unchecked.
                keyword = "PROPERTY" if name == "set_property" else "PROPERTIES"
                files = args[:args.index(keyword)] if keyword in args else []
                props = set(args[len(files):])
                always_alone = not conditional and props & SOURCE_ALONE
                if "SKIP_UNITY_BUILD_INCLUSION" in props or always_alone:
                    alone.update(sources_of(files))
            elif name in ("add_executable", "add_library", "target_sources", *user_functions):
                if not args:
                    continue
                target = expand(args[0], variables)
                srcs = sources_of(args[1:])
                if srcs:
                    targets.setdefault(target, [])
                    targets[target].extend(s for s in srcs if s not in targets[target])
    return targets, alone


# ---------------------------------------------------------------- the check

def project_files(root):
    """The repository's files (git's tracked and untracked-not-ignored ones); outside a git
    checkout, every file under root but hidden folders and build trees."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split("\n")
        if os.path.isdir(os.path.join(root, ".git")) or os.path.isfile(os.path.join(root, ".git")):
            return [f for f in out if f and os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_build", "build")))
        files.extend(os.path.relpath(os.path.join(here, n), root) for n in sorted(names))
    return files


def load_allow(path):
    allowed = set()
    if os.path.isfile(path):
        for line in open(path, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    return allowed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--root", default=os.path.join(here, ".."))
    ap.add_argument("--allow", default=os.path.join(here, "check_unity_names.allow"))
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    started = time.monotonic()
    root = os.path.abspath(args.root)
    files = project_files(root)
    lists = [f for f in files if os.path.basename(f) == "CMakeLists.txt"]
    cmake_files = lists + [f for f in files if f.endswith(".cmake")]
    sources = [f for f in files if f.endswith(CXX_SOURCE)]
    headers = [f for f in files if f.endswith(HEADER) or f.endswith(CXX_SOURCE)]
    by_suffix = {}
    for h in headers:
        parts = h.split("/")
        for k in range(len(parts)):
            by_suffix.setdefault("/".join(parts[k:]), []).append(h)

    targets, alone = cmake_targets(root, cmake_files)
    claimed = {s for srcs in targets.values() for s in srcs}
    cmake_dirs = {os.path.dirname(f) for f in lists}
    for s in sources:
        if s in claimed:
            continue
        d = os.path.dirname(s)
        while d and d not in cmake_dirs:
            d = os.path.dirname(d)
        targets.setdefault("<unclaimed sources of %s/>" % (d or "."), []).append(s)

    cache = {}

    def parsed(path):
        if path not in cache:
            try:
                text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
            except OSError:
                text = ""
            cache[path] = parse_source(path, text)
        return cache[path]

    def resolve(including, written):
        local = os.path.normpath(os.path.join(os.path.dirname(including), written))
        if local in by_suffix.get(os.path.basename(written), []):
            return [local]
        return by_suffix.get(os.path.normpath(written), [])

    def closure(start):
        seen = set()
        todo = list(start)
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            for inc in parsed(f).includes:
                todo.extend(resolve(f, inc))
        return seen

    allowed = load_allow(args.allow)
    findings = set()
    for target, srcs in sorted(targets.items()):
        unity = [s for s in srcs if s not in alone]
        if len(unity) < 2:
            continue
        visible = closure(unity)
        declared = {}  # namespace -> name -> [(file, line)]
        for f in visible:
            for ns, names in parsed(f).namespace_names.items():
                for name, line in names:
                    declared.setdefault(ns, {}).setdefault(name, []).append((f, line))
        for b in unity:
            pb = parsed(b)
            for candidates, uline in pb.usings:
                ns = next((c for c in candidates if c in declared), None)
                if ns is None:
                    continue
                for a in unity:
                    if a == b:
                        continue
                    for name, line, local_ns in parsed(a).locals:
                        if name not in declared[ns] or name not in pb.unqualified:
                            continue
                        others = [(f, ln) for f, ln in declared[ns][name] if (f, ln) != (a, line)]
                        if not others:
                            continue
                        if "%s:%s" % (a, name) in allowed:
                            continue
                        f2, l2 = sorted(others)[0]
                        findings.add((a, line, name, local_ns, ns, f2, l2, b, uline, target))
    for a, line, name, local_ns, ns, f2, l2, b, uline, target in sorted(findings):
        where = ("%s::" % local_ns) if local_ns else ""
        print("%s:%d: file-local '%s%s' takes the place of %s::%s (%s:%d) for %s:%d "
              "(`using namespace %s;`) in a unity batch of %s"
              % (a, line, where, name, ns, name, f2, l2, b, uline, ns, target))
    elapsed = time.monotonic() - started
    print("check_unity_names: %d target(s), %d source(s), %d finding(s) in %.1f s"
          % (len(targets), len(sources), len(findings), elapsed),
          file=sys.stderr if findings else sys.stdout)
    if args.verbose:
        for target, srcs in sorted(targets.items()):
            print("  %s: %s" % (target, " ".join(srcs)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
