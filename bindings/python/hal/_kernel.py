"""@hal.kernel: a restricted Python function translated to HAL's kernel dialect (SPEC.md,
"Kernel dialect") and run on any device that compiles dialect source.

    @hal.kernel
    def vadd(a: hal.f32[:], b: hal.f32[:], c: hal.f32[:], n: hal.i32):
        i = hal.global_id(0)
        if i < n:
            c[i] = a[i] + b[i]

    vadd.launch(grid, block, a, b, c, n)     # compiled for the Buffers' device, cached

What a kernel may contain:
- parameters annotated with a scalar type (hal.i32, hal.u32, hal.i64, hal.u64, hal.f32,
  hal.f64) or an array of device memory (hal.f32[:], any scalar type, hal.f16[:] and
  hal.bf16[:] too: their elements read and write as f32);
- locals by assignment (their type is the first value's; ``x: hal.f32 = 0`` states it),
  arrays shared by the block (``tile = hal.shared(hal.f32, (16, 16))``) and arrays of each
  work-item (``row = hal.private(hal.f32, 64)``), constant sizes, declared at the top level
  of the body; ints and floats from the enclosing Python scope as constants;
- if/elif/else, while, ``for i in range(...)``, break, continue, return;
- arithmetic, comparisons, and/or/not, ``a if c else b``; ``/`` divides as floats like
  Python, ``//`` and ``%`` on ints truncate toward zero like C;
- the ids and sizes (hal.global_id(d), local_id, group_id, local_size, num_groups,
  global_size), hal.barrier(), the atomics (hal.atomic_add(array, index, value), atomic_sub,
  atomic_min, atomic_max, atomic_xchg; atomic_cas(array, index, expected, desired)), the math
  functions (hal.exp, hal.sqrt, ...; min, max, abs), casts (hal.f32(x), float(x), int(x)) and
  hal.inf.

Anything else is refused with hal.KernelSourceError naming the Python file and line; a
source the device's compiler rejects raises hal.InvalidModuleError whose message names the
Python lines too.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
import threading
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar, overload

from ._errors import InvalidModuleError

# One literal list: type checkers read it to know what `from ._kernel import *` brings.
__all__ = [
    "kernel", "KernelSourceError", "KernelFunction", "ScalarType", "ArrayType",
    "i32", "u32", "i64", "u64", "f32", "f64", "f16", "bf16", "inf",
    "global_id", "local_id", "group_id", "local_size", "num_groups", "global_size",
    "barrier", "shared", "private", "atomic_add", "atomic_sub", "atomic_min", "atomic_max",
    "atomic_xchg", "atomic_cas",
    "sqrt", "exp", "exp2", "log", "log2", "pow", "sin", "cos", "tan", "tanh", "erf", "fabs",
    "floor", "ceil", "round", "fmin", "fmax", "fma", "fmod", "atan2", "rsqrt",
]


class KernelSourceError(InvalidModuleError):
    """The Python function cannot be a kernel: the message starts with file:line."""

    def __init__(self, message: str, filename: str = "", lineno: int = 0) -> None:
        super().__init__(message, "hal.kernel", "bindings")
        self.filename = filename
        self.lineno = lineno


# ---- types --------------------------------------------------------------------------------

class ScalarType:
    """A scalar type of the dialect; ``t[:]`` is an array of it in device memory; calling it
    inside a kernel casts."""

    def __init__(self, name: str, c_name: str, rank: int, is_float: bool, storage_only: bool = False):
        self.name, self.c_name, self.rank, self.is_float = name, c_name, rank, is_float
        self.storage_only = storage_only  # f16/bf16: arrays only, elements are f32

    def __getitem__(self, item: object) -> "ArrayType":
        if item != slice(None):
            raise TypeError(f"hal.{self.name}[:] is the array type; got hal.{self.name}[{item!r}]")
        return ArrayType(self)

    def __call__(self, value: object) -> object:
        raise TypeError(f"hal.{self.name}(...) casts inside a @hal.kernel function only")

    def __repr__(self) -> str:
        return f"hal.{self.name}"


class ArrayType:
    def __init__(self, element: ScalarType) -> None:
        self.element = element

    def __repr__(self) -> str:
        return f"hal.{self.element.name}[:]"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrayType) and other.element is self.element

    def __hash__(self) -> int:
        return hash(("array", self.element.name))


if TYPE_CHECKING:
    # What type checkers see of the kernel language: the scalar types are Python's numbers,
    # and hal.mypy_plugin reads an annotation ``hal.f32[:]`` as Array[float] (a slice is no
    # type expression to mypy without it) and ``hal.i32`` as int.
    _Element = TypeVar("_Element")

    class Array(Generic[_Element]):
        """An array parameter, shared or private array of a kernel (type checking only)."""

        def __getitem__(self, index: int | tuple[int, ...]) -> _Element: ...

        def __setitem__(self, index: int | tuple[int, ...], value: _Element) -> None: ...

    class i32(int):
        pass

    class u32(int):
        pass

    class i64(int):
        pass

    class u64(int):
        pass

    class f32(float):
        pass

    class f64(float):
        pass

    class f16(float):
        pass

    class bf16(float):
        pass
else:
    i32 = ScalarType("i32", "int", 0, False)
    u32 = ScalarType("u32", "unsigned", 1, False)
    i64 = ScalarType("i64", "i64", 2, False)
    u64 = ScalarType("u64", "u64", 3, False)
    f32 = ScalarType("f32", "float", 4, True)
    f64 = ScalarType("f64", "double", 5, True)
    f16 = ScalarType("f16", "f16", 4, True, storage_only=True)
    bf16 = ScalarType("bf16", "bf16", 4, True, storage_only=True)
_SCALARS: dict[str, ScalarType] = {
    t.name: t for t in (i32, u32, i64, u64, f32, f64)}  # type: ignore[misc]

inf = float("inf")

# The hal.Buffer dtypes an array parameter takes: HAL has no unsigned 32- and 64-bit buffer
# types, so u32[:] and u64[:] read int32 and int64 buffers (the same bits, as C reads them).
_BUFFER_DTYPES = {"i32": ("int32",), "u32": ("int32",), "i64": ("int64",), "u64": ("int64",),
                  "f32": ("float32",), "f64": ("float64",), "f16": ("float16",),
                  "bf16": ("bfloat16",)}


def _builtin(name: str) -> Callable[..., Any]:
    def outside(*_args: object, **_kwargs: object) -> object:
        raise TypeError(f"hal.{name}() is usable inside a @hal.kernel function only")

    outside.__name__ = name
    outside.__qualname__ = name
    return outside


_IDS = ["global_id", "local_id", "group_id", "local_size", "num_groups", "global_size"]
_ATOMICS = ["atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_xchg", "atomic_cas"]
_MATH = ["sqrt", "exp", "exp2", "log", "log2", "pow", "sin", "cos", "tan", "tanh", "erf",
         "fabs", "floor", "ceil", "round", "fmin", "fmax", "fma", "fmod", "atan2", "rsqrt"]
_BUILTINS: dict[str, Callable[..., Any]] = {
    name: _builtin(name) for name in _IDS + _ATOMICS + _MATH + ["barrier", "shared", "private"]}
if TYPE_CHECKING:
    # The builtins' signatures inside a kernel (outside one, each raises TypeError).
    def global_id(dim: int) -> int: ...
    def local_id(dim: int) -> int: ...
    def group_id(dim: int) -> int: ...
    def local_size(dim: int) -> int: ...
    def num_groups(dim: int) -> int: ...
    def global_size(dim: int) -> int: ...
    def barrier() -> None: ...

    @overload
    def shared(element: type[int], dims: int | tuple[int, ...]) -> Array[int]: ...
    @overload
    def shared(element: type[float], dims: int | tuple[int, ...]) -> Array[float]: ...
    def shared(element: type, dims: int | tuple[int, ...]) -> Array[Any]: ...

    @overload
    def private(element: type[int], dims: int | tuple[int, ...]) -> Array[int]: ...
    @overload
    def private(element: type[float], dims: int | tuple[int, ...]) -> Array[float]: ...
    def private(element: type, dims: int | tuple[int, ...]) -> Array[Any]: ...

    _Number = TypeVar("_Number", int, float)

    def atomic_add(array: Array[_Number], index: int, value: _Number) -> _Number: ...
    def atomic_sub(array: Array[int], index: int, value: int) -> int: ...
    def atomic_min(array: Array[int], index: int, value: int) -> int: ...
    def atomic_max(array: Array[int], index: int, value: int) -> int: ...
    def atomic_xchg(array: Array[int], index: int, value: int) -> int: ...
    def atomic_cas(array: Array[int], index: int, expected: int, desired: int) -> int: ...
    def sqrt(x: float) -> float: ...
    def exp(x: float) -> float: ...
    def exp2(x: float) -> float: ...
    def log(x: float) -> float: ...
    def log2(x: float) -> float: ...
    def pow(x: float, y: float) -> float: ...
    def sin(x: float) -> float: ...
    def cos(x: float) -> float: ...
    def tan(x: float) -> float: ...
    def tanh(x: float) -> float: ...
    def erf(x: float) -> float: ...
    def fabs(x: float) -> float: ...
    def floor(x: float) -> float: ...
    def ceil(x: float) -> float: ...
    def round(x: float) -> float: ...
    def fmin(x: float, y: float) -> float: ...
    def fmax(x: float, y: float) -> float: ...
    def fma(x: float, y: float, z: float) -> float: ...
    def fmod(x: float, y: float) -> float: ...
    def atan2(y: float, x: float) -> float: ...
    def rsqrt(x: float) -> float: ...
else:
    globals().update(_BUILTINS)


# ---- names the backends reserve -------------------------------------------------------------

# A kernel's names become C identifiers in the dialect, then in C++ (the cpu plugin), OpenCL C,
# CUDA and HIP. Python accepts all of these as names; every backend refuses at least one of
# them, or gives it another meaning (``local`` is an address space in OpenCL C, ``double`` a
# type everywhere), so they are refused here, at the Python line, instead of in a wall of
# compiler errors.
_RESERVED = frozenset("""
    alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class concept
    const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend
    goto if inline int long mutable namespace new noexcept nullptr operator private protected
    public register reinterpret_cast requires restrict return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef
    typeid typename union unsigned using virtual void volatile wchar_t while
    and and_eq bitand bitor compl not not_eq or or_eq xor xor_eq
    _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert
    _Thread_local
    std NULL INFINITY NAN HUGE_VAL EOF assert errno size_t ptrdiff_t intptr_t uintptr_t
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    global local constant kernel read_only write_only read_write uniform pipe generic
    half uchar ushort uint ulong image1d_t image2d_t image3d_t image1d_array_t image2d_array_t
    image1d_buffer_t sampler_t event_t queue_t ndrange_t clk_event_t reserve_id_t cl_mem_fence_flags
    get_global_id get_local_id get_group_id get_local_size get_num_groups get_global_size
    get_work_dim get_global_offset atomic_inc atomic_dec atomic_and atomic_or atomic_xor
    atomic_cmpxchg atomic_exchange mem_fence read_mem_fence write_mem_fence
    async_work_group_copy wait_group_events prefetch printf clamp mix select vload vstore
    CLK_LOCAL_MEM_FENCE CLK_GLOBAL_MEM_FENCE
    threadIdx blockIdx blockDim gridDim warpSize dim3 atomicAdd atomicSub atomicMin atomicMax
    atomicExch atomicCAS atomicInc atomicDec atomicAnd atomicOr atomicXor nv_bfloat16
    hipThreadIdx_x hipThreadIdx_y hipThreadIdx_z hipBlockIdx_x hipBlockIdx_y hipBlockIdx_z
    hipBlockDim_x hipBlockDim_y hipBlockDim_z hipGridDim_x hipGridDim_y hipGridDim_z main
    shared max_block dynamic_shared global_id local_id group_id local_size num_groups
    global_size barrier atomic_add atomic_sub atomic_min atomic_max atomic_xchg atomic_cas
    f16 bf16 f32 f64 i32 u32 i64 u64 load_f16 store_f16 load_bf16 store_bf16
    sqrt exp exp2 log log2 pow sin cos tan tanh erf fabs floor ceil round fmin fmax fma fmod
    atan2 rsqrt min max abs isnan isinf isfinite
""".split())

# Vector types of OpenCL C and CUDA/HIP: float2, int4, uchar16, ...
_VECTOR_TYPE = re.compile(r"(char|uchar|short|ushort|int|uint|long|ulong|float|double|half|"
                          r"longlong|ulonglong)(2|3|4|8|16)")


def _reserved_reason(name: str) -> str | None:
    """Why |name| cannot name something in a kernel, or None when it can."""
    if name in _RESERVED or _VECTOR_TYPE.fullmatch(name):
        return "a keyword, type or builtin of a backend language (C++, OpenCL C, CUDA, HIP)"
    if name.startswith("__") or (name.startswith("_") and name[1:2].isupper()):
        return "C and C++ reserve names starting with '__' or '_' and a capital"
    if name.lower().startswith("hal_"):
        return "names starting with 'hal_' belong to HAL's kernel prelude"
    if re.search(r"_(end|step)_\d+_$", name):
        return "the translator names its own loop bounds so"
    return None


# ---- translation --------------------------------------------------------------------------

class _Value:
    """A translated expression: its C text and its type (None: a bool/int condition)."""

    def __init__(self, text: str, type_: ScalarType, constant: object = None) -> None:
        self.text, self.type, self.constant = text, type_, constant


def _common(a: ScalarType, b: ScalarType) -> ScalarType:
    return a if a.rank >= b.rank else b


def _float_literal(value: float, type_: ScalarType) -> str:
    if value != value:
        return "(0.0f / 0.0f)" if type_ is f32 else "(0.0 / 0.0)"
    if value in (float("inf"), float("-inf")):
        return ("-" if value < 0 else "") + "INFINITY"
    text = repr(float(value))
    return text + ("f" if type_ is f32 else "")


_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Mod: "%", ast.LShift: "<<",
           ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class _Translator:
    def __init__(self, fn: Callable[..., Any], max_block: int) -> None:
        self.fn = fn
        self.max_block = max_block
        lines, first = inspect.getsourcelines(fn)
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        self.first_line = first
        source = textwrap.dedent("".join(lines))
        self.tree = ast.parse(source)
        self.scope: dict[str, object] = dict(fn.__globals__)
        closure = inspect.getclosurevars(fn)
        self.scope.update(closure.nonlocals)
        self.params: dict[str, object] = {}
        self.locals: dict[str, tuple[ScalarType, int]] = {}  # name -> (type, first line)
        # Arrays declared at the top: (name, element, dims, line, "shared " or "").
        self.shared: list[tuple[str, ScalarType, tuple[int, ...], int, str]] = []
        self.shared_names: dict[str, ScalarType] = {}
        self.lines: list[tuple[str, int]] = []  # (generated text, python line)
        self.depth = 1

    # errors and lines
    def line_of(self, node: ast.AST) -> int:
        return self.first_line + getattr(node, "lineno", 1) - 1

    def fail(self, node: ast.AST, message: str) -> KernelSourceError:
        line = self.line_of(node)
        return KernelSourceError(f"{self.filename}:{line}: {message}", self.filename, line)

    def emit(self, text: str, node: ast.AST) -> None:
        self.lines.append(("  " * self.depth + text, self.line_of(node)))

    # names
    def resolve(self, node: ast.expr) -> object:
        """The Python object a Name or Attribute chain names (hal builtins, constants)."""
        if isinstance(node, ast.Name):
            if node.id in self.scope:
                return self.scope[node.id]
            import builtins
            if hasattr(builtins, node.id):
                return getattr(builtins, node.id)
            raise self.fail(node, f"'{node.id}' is not defined")
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if not hasattr(base, node.attr):
                raise self.fail(node, f"'{ast.unparse(node)}' is not defined")
            return getattr(base, node.attr)
        raise self.fail(node, f"'{ast.unparse(node)}' is not a name")

    def builtin_name(self, obj: object) -> str | None:
        for name, builtin in _BUILTINS.items():
            if obj is builtin:
                return name
        return None

    # the function
    def translate(self) -> str:
        fdef = self.tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise self.fail(fdef, "@hal.kernel applies to a plain function")
        if fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs or fdef.args.defaults:
            raise self.fail(fdef, "kernel parameters are positional, without defaults")
        self.check_name(fdef.name, fdef, "the kernel's name")
        signature = inspect.signature(self.fn)
        params = []
        written = self.written_arrays(fdef)
        self.read_only_args: list[int] = []
        for index, arg in enumerate(fdef.args.args):
            self.check_name(arg.arg, arg, "a parameter")
            annotation = signature.parameters[arg.arg].annotation
            if isinstance(annotation, str):
                annotation = eval(annotation, self.scope)  # noqa: S307 - the user's own module
            if isinstance(annotation, ScalarType) and not annotation.storage_only:
                params.append(f"{annotation.c_name} {arg.arg}")
            elif isinstance(annotation, ArrayType):
                const = "" if arg.arg in written else "const "
                if const:
                    self.read_only_args.append(index)
                params.append(f"global {const}{annotation.element.c_name}* {arg.arg}")
            else:
                raise self.fail(arg, f"parameter '{arg.arg}' needs a type: a scalar (hal.f32, "
                                     f"hal.i32, ...) or an array (hal.f32[:], ...)")
            self.params[arg.arg] = annotation
        body = fdef.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        self.analyse_scopes(body)
        for stmt in body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                    self.builtin_name(self.resolve_call(stmt.value)) in ("shared", "private"):
                self.declare_array(stmt, self.builtin_name(self.resolve_call(stmt.value)))
            else:
                self.statement(stmt)
        head = f"kernel {'max_block(%d) ' % self.max_block if self.max_block else ''}void " \
               f"{fdef.name}({', '.join(params)}) {{"
        declarations = [(f"  {storage}{t.c_name} {name}{''.join(f'[{d}]' for d in dims)};", line)
                        for name, t, dims, line, storage in self.shared]
        declarations += [(f"  {t.c_name} {name};", line) for name, (t, line) in self.locals.items()
                         if self.scopes.get(name, "top") == "top"]
        out = [(head, self.line_of(fdef))] + declarations + self.lines + [("}", self.line_of(fdef))]
        self.line_map = [line for _, line in out]
        return "\n".join(text for text, _ in out) + "\n"

    def check_name(self, name: str, node: ast.AST, what: str) -> None:
        reason = _reserved_reason(name)
        if reason is not None:
            raise self.fail(node, f"'{name}' cannot be {what} in a kernel: {reason}; rename it")

    def resolve_call(self, call: ast.Call) -> object:
        try:
            return self.resolve(call.func)
        except KernelSourceError:
            return None

    def written_arrays(self, fdef: ast.FunctionDef) -> set[str]:
        """Names of arrays the body stores to or passes to an atomic (the rest are const)."""
        written = set()
        for node in ast.walk(fdef):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    written.add(target.value.id)
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
                if self.builtin_name(self.resolve_call(node)) in _ATOMICS:
                    written.add(node.args[0].id)
        return written

    def analyse_scopes(self, body: list[ast.stmt]) -> None:
        """Where each local is declared, as narrowly as Python's semantics allow (the cpu
        plugin keeps a value that lives across a barrier per work-item, so narrow scopes make
        faster kernels): "loop" (every use inside loops over it: declared by each for),
        ("inline", id(statement)) (its first use assigns it, directly in the innermost block
        holding every use: declared there), else "top" (the start of the kernel)."""
        uses: dict[str, list[tuple[tuple, int, ast.stmt, str]]] = {}
        counter = [0]

        def names(node: ast.AST | None) -> list[str]:
            return [] if node is None else [
                n.id for n in ast.walk(node) if isinstance(n, ast.Name)]

        def record(node: ast.AST | None, chain: tuple, stmt: ast.stmt, kind: str) -> None:
            for name in names(node):
                uses.setdefault(name, []).append((chain, counter[0], stmt, kind))

        def visit(stmts: list[ast.stmt], chain: tuple) -> None:
            for stmt in stmts:
                counter[0] += 1
                if isinstance(stmt, ast.For):
                    record(stmt.iter, chain, stmt, "read")
                    record(stmt.target, chain + ((id(stmt), "header"),), stmt, "for")
                    visit(stmt.body, chain + ((id(stmt), "body"),))
                elif isinstance(stmt, ast.While):
                    record(stmt.test, chain, stmt, "read")
                    visit(stmt.body, chain + ((id(stmt), "body"),))
                elif isinstance(stmt, ast.If):
                    record(stmt.test, chain, stmt, "read")
                    visit(stmt.body, chain + ((id(stmt), "body"),))
                    visit(stmt.orelse, chain + ((id(stmt), "orelse"),))
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(
                        stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target,
                        ast.Name):
                    target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                    record(stmt.value, chain, stmt, "read")
                    record(target, chain, stmt, "assign")
                else:
                    record(stmt, chain, stmt, "read")

        visit(body, ())
        loops = {id(n): n for n in ast.walk(self.tree) if isinstance(n, ast.For)}
        self.scopes: dict[str, object] = {}
        for name, found in uses.items():
            # Loop-scoped: each use inside a for over |name| (not nested in another), and
            # the range() does not read it.
            owners = []
            for chain, _, stmt, kind in found:
                own = [key for key, _ in chain if key in loops and
                       isinstance(loops[key].target, ast.Name) and loops[key].target.id == name]
                owners.append(own)
            if all(len(own) == 1 for own in owners):
                self.scopes[name] = "loop"
                continue
            common = found[0][0]
            for chain, *_ in found[1:]:
                length = 0
                while length < min(len(common), len(chain)) and common[length] == chain[length]:
                    length += 1
                common = common[:length]
            chain, _, stmt, kind = min(found, key=lambda use: use[1])
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            if kind == "assign" and chain == common and name not in names(value):
                self.scopes[name] = ("inline", id(stmt))
            else:
                self.scopes[name] = "top"

    def declare_array(self, stmt: ast.Assign, kind: str) -> None:
        call = stmt.value
        assert isinstance(call, ast.Call)
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name) or \
                len(call.args) != 2:
            raise self.fail(stmt, f"arrays: name = hal.{kind}(hal.f32, (rows, cols))")
        element = self.resolve(call.args[0])
        if not isinstance(element, ScalarType) or element.storage_only:
            raise self.fail(stmt, f"hal.{kind}'s first argument is a scalar type (hal.f32, ...)")
        dims_node = call.args[1]
        items = dims_node.elts if isinstance(dims_node, ast.Tuple) else [dims_node]
        dims = []
        for item in items:
            value = self.constant_of(item)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise self.fail(item, "shared array sizes are positive integer constants")
            dims.append(value)
        name = stmt.targets[0].id
        self.check_name(name, stmt, f"a hal.{kind} array")
        if name in self.shared_names or name in self.params:
            raise self.fail(stmt, f"'{name}' is already defined")
        self.shared.append((name, element, tuple(dims), self.line_of(stmt),
                            "shared " if kind == "shared" else ""))
        self.shared_names[name] = element

    def constant_of(self, node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Name, ast.Attribute)):
            if isinstance(node, ast.Name) and (node.id in self.params or node.id in self.locals):
                return None
            try:
                value = self.resolve(node)
            except KernelSourceError:
                return None
            return value if isinstance(value, (int, float)) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.constant_of(node.operand)
            return -value if isinstance(value, (int, float)) else None
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult,
                                                             ast.FloorDiv):
            a, b = self.constant_of(node.left), self.constant_of(node.right)
            if isinstance(a, int) and isinstance(b, int):
                op = type(node.op)
                return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(
                    op, a // b if b else None)
        return None

    # statements
    def block(self, stmts: list[ast.stmt]) -> None:
        self.depth += 1
        for stmt in stmts:
            self.statement(stmt)
        self.depth -= 1

    def declare(self, name: str, type_: ScalarType, node: ast.AST) -> None:
        self.check_name(name, node, "a local")
        if name in self.params or name in self.shared_names:
            raise self.fail(node, f"'{name}' is a parameter or a shared array: it cannot be "
                                  "assigned")
        known = self.locals.get(name)
        if known is None:
            self.locals[name] = (type_, self.line_of(node))
        elif known[0].is_float != type_.is_float and not known[0].is_float:
            raise self.fail(node, f"'{name}' holds {known[0]!r} (line {known[1]}) and is "
                                  f"assigned {type_!r} here: state its type where it is first "
                                  f"assigned ({name}: {type_!r} = ...)")

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise self.fail(stmt, "one assignment target at a time")
            target = stmt.targets[0]
            if not isinstance(target, (ast.Name, ast.Subscript)):
                raise self.fail(stmt, "assign to a name or an element (a[i]); tuples are not "
                                      "supported")
            value = self.expr(stmt.value)
            if isinstance(target, ast.Name):
                self.declare(target.id, value.type, stmt)
                if self.scopes.get(target.id) == ("inline", id(stmt)):
                    type_ = self.locals[target.id][0]
                    self.emit(f"{type_.c_name} {target.id} = {value.text};", stmt)
                else:
                    self.emit(f"{target.id} = {value.text};", stmt)
            elif isinstance(target, ast.Subscript):
                self.store(target, value, stmt)
            else:
                raise self.fail(stmt, "assign to a name or an element (a[i]); tuples are not "
                                      "supported")
        elif isinstance(stmt, ast.AnnAssign):
            if not isinstance(stmt.target, ast.Name) or stmt.value is None:
                raise self.fail(stmt, "annotated assignments declare a local: x: hal.f32 = 0")
            type_ = self.resolve(stmt.annotation)
            if not isinstance(type_, ScalarType) or type_.storage_only:
                raise self.fail(stmt, "a local's type is a scalar type (hal.f32, hal.i32, ...)")
            self.check_name(stmt.target.id, stmt, "a local")
            if stmt.target.id in self.locals and self.locals[stmt.target.id][0] is not type_:
                raise self.fail(stmt, f"'{stmt.target.id}' was declared with another type")
            self.locals[stmt.target.id] = (type_, self.line_of(stmt))
            value = self.expr(stmt.value)
            inline = self.scopes.get(stmt.target.id) == ("inline", id(stmt))
            self.emit(f"{type_.c_name + ' ' if inline else ''}{stmt.target.id} = "
                      f"({type_.c_name})({value.text});", stmt)
        elif isinstance(stmt, ast.AugAssign):
            op = _BINARY.get(type(stmt.op))
            if isinstance(stmt.op, ast.Div):
                op = "/"
            if op is None:
                raise self.fail(stmt, f"'{ast.unparse(stmt)}': this operator cannot update")
            value = self.expr(stmt.value)
            if isinstance(stmt.target, ast.Name):
                if stmt.target.id not in self.locals:
                    raise self.fail(stmt, f"'{stmt.target.id}' is updated before it is assigned")
                known, first = self.locals[stmt.target.id]
                if value.type.is_float and not known.is_float or op == "/" and \
                        not known.is_float:
                    # Python would make it a float; C would truncate it silently.
                    raise self.fail(stmt, f"'{stmt.target.id}' holds {known!r} (line {first}) "
                                          f"and would become a float here: start it as a float "
                                          f"({stmt.target.id} = 0.0, or "
                                          f"{stmt.target.id}: hal.f32 = 0)")
                self.emit(f"{stmt.target.id} {op}= {value.text};", stmt)
            elif isinstance(stmt.target, ast.Subscript):
                current = self.expr(stmt.target)
                combined = _Value(f"({current.text} {op} {value.text})", current.type)
                self.store(stmt.target, combined, stmt)
            else:
                raise self.fail(stmt, "update a name or an element")
        elif isinstance(stmt, ast.If):
            self.emit(f"if ({self.expr(stmt.test).text}) {{", stmt)
            self.block(stmt.body)
            if stmt.orelse:
                self.emit("} else {", stmt)
                self.block(stmt.orelse)
            self.emit("}", stmt)
        elif isinstance(stmt, ast.While):
            if stmt.orelse:
                raise self.fail(stmt, "while ... else is not supported")
            self.emit(f"while ({self.expr(stmt.test).text}) {{", stmt)
            self.block(stmt.body)
            self.emit("}", stmt)
        elif isinstance(stmt, ast.For):
            self.for_range(stmt)
        elif isinstance(stmt, ast.Break):
            self.emit("break;", stmt)
        elif isinstance(stmt, ast.Continue):
            self.emit("continue;", stmt)
        elif isinstance(stmt, ast.Pass):
            pass
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                raise self.fail(stmt, "a kernel returns nothing: write results to an array")
            self.emit("return;", stmt)
        elif isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                return  # a string statement (comment)
            if not isinstance(stmt.value, ast.Call):
                raise self.fail(stmt, "an expression statement must be a call (hal.barrier(), "
                                      "an atomic)")
            self.emit(f"{self.expr(stmt.value, statement=True).text};", stmt)
        else:
            raise self.fail(stmt, f"'{type(stmt).__name__}' statements are not supported in a "
                                  "kernel")

    def for_range(self, stmt: ast.For) -> None:
        if stmt.orelse:
            raise self.fail(stmt, "for ... else is not supported")
        if not isinstance(stmt.target, ast.Name):
            raise self.fail(stmt, "the loop variable is one name")
        call = stmt.iter
        if not (isinstance(call, ast.Call) and self.resolve_call(call) is range
                and 1 <= len(call.args) <= 3 and not call.keywords):
            raise self.fail(stmt, "loops run over range(stop), range(start, stop) or "
                                  "range(start, stop, step)")
        args = [self.expr(a) for a in call.args]
        for a, node in zip(args, call.args):
            if a.type.is_float:
                raise self.fail(node, "range() takes integers")
        start, stop = (args[0], args[1]) if len(args) >= 2 else (_Value("0", i32, 0), args[0])
        step: object = 1
        if len(args) == 3:
            step = self.constant_of(call.args[2])
            if step == 0:
                raise self.fail(call.args[2], "range()'s step must not be zero")
            if not isinstance(step, int):
                step = None  # known at run time only
        name = stmt.target.id
        type_ = _common(start.type, stop.type)
        self.check_name(name, stmt, "a loop variable")
        loop_scoped = self.scopes.get(name) == "loop"
        if loop_scoped:
            known = self.locals.get(name)
            self.locals[name] = (type_, self.line_of(stmt))
        else:
            self.declare(name, type_, stmt)
            type_ = self.locals[name][0]
        # Python evaluates range() once: a bound or step that could change is kept in a
        # variable of the loop's.
        stop_node = call.args[1] if len(call.args) >= 2 else call.args[0]
        fixed = self.constant_of(stop_node) is not None or (
            isinstance(stop_node, ast.Name) and stop_node.id in self.params)
        init = f"{name} = {start.text}"
        extra = []  # (name, value) evaluated once before the loop
        bound = stop.text
        if not fixed:
            bound = f"{name}_end_{len(self.lines)}_"
            extra.append((bound, stop.text))
        if step is None:
            step_text = f"{name}_step_{len(self.lines)}_"
            extra.append((step_text, args[2].text))
            # Either sign, as range() does (zero runs no iteration rather than raising).
            condition = (f"({step_text} > 0 ? {name} < {bound} : "
                         f"({step_text} < 0 && {name} > {bound}))")
        else:
            step_text = str(step)
            condition = f"{name} {'<' if step > 0 else '>'} {bound}"
        for variable, value in extra:
            if loop_scoped:
                init += f", {variable} = {value}"
            else:
                self.locals[variable] = (type_, self.line_of(stmt))
                self.scopes[variable] = "top"
                self.emit(f"{variable} = {value};", stmt)
        if loop_scoped:
            init = f"{type_.c_name} {init}"
        self.emit(f"for ({init}; {condition}; {name} += {step_text}) {{", stmt)
        self.block(stmt.body)
        self.emit("}", stmt)
        if loop_scoped and known is not None:
            self.locals[name] = known

    def store(self, target: ast.Subscript, value: _Value, stmt: ast.AST) -> None:
        address, element = self.element(target)
        if element.storage_only:
            self.emit(f"store_{element.name}(&{address}, (float)({value.text}));", stmt)
        else:
            self.emit(f"{address} = {value.text};", stmt)

    def element(self, node: ast.Subscript) -> tuple[str, ScalarType]:
        if not isinstance(node.value, ast.Name):
            raise self.fail(node, "index an array parameter or a shared array by name")
        name = node.value.id
        indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if name in self.shared_names:
            dims = next(d for n, _, d, _, _ in self.shared if n == name)
            if len(indices) != len(dims):
                raise self.fail(node, f"'{name}' has {len(dims)} dimension(s)")
            element = self.shared_names[name]
        elif isinstance(self.params.get(name), ArrayType):
            if len(indices) != 1:
                raise self.fail(node, f"'{name}' is one-dimensional: index it with one integer")
            element = self.params[name].element  # type: ignore[union-attr]
        else:
            raise self.fail(node, f"'{name}' is not an array")
        text = name
        for index in indices:
            if isinstance(index, ast.Slice):
                raise self.fail(node, "slices are not supported: index one element")
            value = self.expr(index)
            if value.type.is_float:
                raise self.fail(index, "array indices are integers")
            text += f"[{value.text}]"
        return text, element

    # expressions
    def expr(self, node: ast.expr, statement: bool = False) -> _Value:
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool):
                return _Value("1" if value else "0", i32, int(value))
            if isinstance(value, int):
                if -(2 ** 31) <= value < 2 ** 31:
                    return _Value(str(value), i32, value)
                return _Value(f"((i64){value}LL)", i64, value)
            if isinstance(value, float):
                return _Value(_float_literal(value, f32), f32, value)
            raise self.fail(node, f"the constant {value!r} has no kernel type")
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                return _Value(node.id, self.locals[node.id][0])
            if node.id in self.params:
                annotation = self.params[node.id]
                if isinstance(annotation, ArrayType):
                    raise self.fail(node, f"'{node.id}' is an array: index it")
                return _Value(node.id, annotation)  # type: ignore[arg-type]
            if node.id in self.shared_names:
                raise self.fail(node, f"'{node.id}' is a shared array: index it")
        if isinstance(node, (ast.Name, ast.Attribute)):
            obj = self.resolve(node)
            if isinstance(obj, bool):
                return _Value("1" if obj else "0", i32, int(obj))
            if isinstance(obj, int):
                return self.expr(ast.copy_location(ast.Constant(obj), node))
            if isinstance(obj, float):
                return _Value(_float_literal(obj, f32), f32, obj)
            raise self.fail(node, f"'{ast.unparse(node)}' ({type(obj).__name__}) cannot be used "
                                  "in a kernel: only ints and floats come from Python")
        if isinstance(node, ast.Subscript):
            address, element = self.element(node)
            if element.storage_only:
                return _Value(f"load_{element.name}(&{address})", f32)
            return _Value(address, element)
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand)
            if isinstance(node.op, ast.USub):
                return _Value(f"(-{operand.text})", operand.type)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return _Value(f"(!{operand.text})", i32)
            if operand.type.is_float:
                raise self.fail(node, "~ applies to integers")
            return _Value(f"(~{operand.text})", operand.type)
        if isinstance(node, ast.BoolOp):
            op = " && " if isinstance(node.op, ast.And) else " || "
            return _Value("(" + op.join(self.expr(v).text for v in node.values) + ")", i32)
        if isinstance(node, ast.Compare):
            parts = []
            left = self.expr(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                if type(op) not in _COMPARE:
                    raise self.fail(node, f"'{ast.unparse(node)}': only < <= > >= == != compare")
                right = self.expr(right_node)
                parts.append(f"({left.text} {_COMPARE[type(op)]} {right.text})")
                left = right
            return _Value("(" + " && ".join(parts) + ")", i32)
        if isinstance(node, ast.IfExp):
            a, b = self.expr(node.body), self.expr(node.orelse)
            type_ = _common(a.type, b.type)
            return _Value(f"({self.expr(node.test).text} ? ({type_.c_name})({a.text}) : "
                          f"({type_.c_name})({b.text}))", type_)
        if isinstance(node, ast.Call):
            return self.call(node, statement)
        raise self.fail(node, f"'{ast.unparse(node)}': {type(node).__name__} is not supported in "
                              "a kernel")

    def binary(self, node: ast.BinOp) -> _Value:
        a, b = self.expr(node.left), self.expr(node.right)
        type_ = _common(a.type, b.type)
        if type_.is_float:
            # A float literal next to an f64 operand is an f64 literal.
            for value in (a, b):
                if isinstance(value.constant, float) and type_ is f64:
                    value.text = _float_literal(value.constant, f64)
        if isinstance(node.op, ast.Div):
            if not type_.is_float:  # Python's / on ints gives a float
                type_ = f32
            return _Value(f"(({type_.c_name})({a.text}) / ({type_.c_name})({b.text}))", type_)
        if isinstance(node.op, ast.FloorDiv):
            if type_.is_float:
                return _Value(f"floor({a.text} / {b.text})", type_)
            return _Value(f"({a.text} / {b.text})", type_)
        if isinstance(node.op, ast.Pow):
            if not type_.is_float:
                exponent = self.constant_of(node.right)
                if isinstance(exponent, int) and 0 <= exponent <= 4:
                    return _Value("(" + " * ".join([f"({a.text})"] * exponent or ["1"]) + ")",
                                  a.type)
                raise self.fail(node, "** on integers takes a constant exponent 0..4")
            return _Value(f"pow(({type_.c_name})({a.text}), ({type_.c_name})({b.text}))", type_)
        op = _BINARY.get(type(node.op))
        if op is None:
            raise self.fail(node, f"'{ast.unparse(node)}': operator not supported")
        if op in ("%", "<<", ">>", "&", "|", "^") and type_.is_float:
            if op == "%":
                return _Value(f"fmod({a.text}, {b.text})", type_)
            raise self.fail(node, f"'{op}' applies to integers")
        return _Value(f"({a.text} {op} {b.text})", type_)

    def call(self, node: ast.Call, statement: bool) -> _Value:
        if node.keywords:
            raise self.fail(node, "keyword arguments are not supported in a kernel")
        target = self.resolve(node.func)
        args_nodes = node.args
        if isinstance(target, ScalarType):
            if target.storage_only or len(args_nodes) != 1:
                raise self.fail(node, f"{target!r}(x) casts one value")
            return _Value(f"(({target.c_name})({self.expr(args_nodes[0]).text}))", target)
        if target is float or target is int:
            type_ = f32 if target is float else i32
            if len(args_nodes) != 1:
                raise self.fail(node, f"{target.__name__}(x) casts one value")
            return _Value(f"(({type_.c_name})({self.expr(args_nodes[0]).text}))", type_)
        if target in (min, max):
            if len(args_nodes) != 2:
                raise self.fail(node, f"{target.__name__}() takes two values in a kernel")
            a, b = self.expr(args_nodes[0]), self.expr(args_nodes[1])
            type_ = _common(a.type, b.type)
            return _Value(f"{target.__name__}(({type_.c_name})({a.text}), "
                          f"({type_.c_name})({b.text}))", type_)
        if target is abs:
            value = self.expr(args_nodes[0])
            if value.type.is_float:
                return _Value(f"fabs({value.text})", value.type)
            return _Value(f"({value.text} < 0 ? -{value.text} : {value.text})", value.type)
        name = self.builtin_name(target)
        if name is None:
            raise self.fail(node, f"'{ast.unparse(node.func)}' cannot be called in a kernel "
                                  "(hal builtins, casts, min, max and abs can)")
        if name in _IDS:
            dim = self.constant_of(args_nodes[0]) if len(args_nodes) == 1 else None
            if dim not in (0, 1, 2):
                raise self.fail(node, f"hal.{name}(d) takes a constant dimension 0, 1 or 2")
            return _Value(f"{name}({dim})", i32)
        if name == "barrier":
            if args_nodes:
                raise self.fail(node, "hal.barrier() takes no arguments")
            if not statement:
                raise self.fail(node, "hal.barrier() is a statement")
            return _Value("barrier()", i32)
        if name in ("shared", "private"):
            raise self.fail(node, f"hal.{name}(...) declares an array at the top level of the "
                                  f"kernel: name = hal.{name}(hal.f32, (rows, cols))")
        if name in _ATOMICS:
            want = 4 if name == "atomic_cas" else 3
            if len(args_nodes) != want:
                raise self.fail(node, f"hal.{name}(array, index, {'expected, desired' if want == 4 else 'value'})")
            subscript = ast.copy_location(
                ast.Subscript(value=args_nodes[0], slice=args_nodes[1], ctx=ast.Load()), node)
            address, element = self.element(subscript)
            if element.storage_only or element in (f64, i64, u64) or \
                    (element is f32 and name != "atomic_add"):
                raise self.fail(node, f"hal.{name} works on i32 and u32 arrays (and atomic_add "
                                      "on f32)")
            values = [self.expr(v).text for v in args_nodes[2:]]
            return _Value(f"{name}(&{address}, {', '.join(values)})", element)
        # math
        values = [self.expr(v) for v in args_nodes]
        type_ = f32
        for value in values:
            if value.type is f64:
                type_ = f64
        return _Value(f"{name}({', '.join(f'({type_.c_name})({v.text})' for v in values)})", type_)


class KernelFunction:
    """A @hal.kernel function: its dialect source (``source``), compiled per device on first
    use (``compile(device)``) and launched like hal.Kernel.launch."""

    def __init__(self, fn: Callable[..., Any], max_block: int = 0) -> None:
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        translator = _Translator(fn, max_block)
        self.source = translator.translate()
        self._line_map = translator.line_map
        self._filename = translator.filename
        self._params = list(translator.params.items())  # (name, annotation), in order
        self._read_only_args = translator.read_only_args
        self._compiled: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise TypeError(f"{self.__name__} is a kernel: call {self.__name__}.launch(grid, block, "
                        "*args)")

    def _python_lines(self, message: str) -> str:
        def replace(match: re.Match[str]) -> str:
            line = int(match.group(2))
            if 1 <= line <= len(self._line_map):
                return f"{self._filename}:{self._line_map[line - 1]}"
            return match.group(0)
        return re.sub(r"(hal-dialect:|line )(\d+)", replace, message)

    def compile(self, device: Any) -> Any:
        """The hal.Kernel for |device|, compiled once per device."""
        from . import Module

        key = device.index
        with self._lock:
            kernel = self._compiled.get(key)
            if kernel is None or kernel.module.closed:
                try:
                    module = Module(device, source=self.source)
                except InvalidModuleError as error:
                    raise type(error)(self._python_lines(error.message), error.function,
                                      error.plugin, error.native_code) from None
                kernel = module.kernel(self.__name__)
                self._compiled[key] = kernel
            return kernel

    def launch(self, grid: object, block: object, *args: object, stream: Any = None,
               shared_memory_bytes: int = 0, device: Any = None) -> None:
        """Compiles for |device| (else the first Buffer argument's device) and launches."""
        if device is None:
            from . import Buffer

            device = next((a.device for a in args if isinstance(a, Buffer)), None)
            if device is None:
                raise TypeError(f"{self.__name__}.launch: no Buffer argument; pass device=")
        self.check_arguments(args)
        self.compile(device).launch(grid, block, *args, stream=stream,
                                    shared_memory_bytes=shared_memory_bytes,
                                    _read_only_args=self._read_only_args)

    def check_arguments(self, args: tuple[object, ...]) -> None:
        """Each array parameter gets a Buffer of its element type: the kernel would read the
        bits of another type as its own (an int32 buffer for hal.f32[:] runs, and computes
        garbage)."""
        from . import Buffer

        if len(args) != len(self._params):
            raise TypeError(f"{self.__name__}.launch takes {len(self._params)} kernel "
                            f"arguments ({', '.join(n for n, _ in self._params)}), got "
                            f"{len(args)}")
        for position, ((name, annotation), value) in enumerate(zip(self._params, args)):
            if not isinstance(annotation, ArrayType) or not isinstance(value, Buffer):
                continue  # scalars and non-Buffers: Kernel.launch converts or refuses them
            accepted = _BUFFER_DTYPES[annotation.element.name]
            if value.dtype not in accepted:
                raise TypeError(
                    f"{self.__name__}.launch: argument {position} ('{name}: {annotation!r}') "
                    f"needs a buffer of {' or '.join(accepted)}, got a {value.dtype} buffer "
                    f"(the kernel would read its bits as {annotation.element.name}); convert it "
                    f"first, e.g. hal.ops.cast")

    def __repr__(self) -> str:
        return f"<hal.kernel {self.__name__}>"


def kernel(fn: Callable[..., Any] | None = None, *, max_block: int = 0) -> Any:
    """Translates |fn| to the kernel dialect (at decoration time, so errors show at once)."""
    if fn is None:
        return lambda f: KernelFunction(f, max_block)
    return KernelFunction(fn, max_block)
