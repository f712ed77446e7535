"""hal.ops: HAL's operators (api/hal/ops.h) from Python.

Two levels, both over the same C calls (hal_op_plan_create, hal_op_execute):

- ``hal.ops.plan(op, device, **fields)`` makes a ``hal.OpPlan`` from the fields of the op's C
  descriptor (SPEC.md §17 names them; tensor fields take a ``hal.Tensor`` or a ``hal.Buffer``
  for their layout), and ``plan.execute(operands, scalars)`` runs it in the C operand order;
- one function per op (``matmul``, ``softmax``, ``layer_norm``, ``attention``...) that takes
  buffers or tensor views, allocates the outputs it is not given, plans once per layout (plans
  are cached) and enqueues the execution on ``stream`` (the device's default stream when None).

Every call is asynchronous on its stream, like the C API: read results with
``buffer.to_numpy()`` (which synchronises) or synchronise the stream. Outputs live on the device
of the first input. A tensor that does not fit its op raises ``ValueError``/``TypeError`` or the
``hal.Error`` the C API gives, whose message names the field and the rule.
"""
from __future__ import annotations

import builtins
import math as _math
from collections import OrderedDict
from typing import Any, NamedTuple, Sequence, Union

from . import _hal
from ._hal import Buffer, Device, OpPlan, Stream, Tensor

__all__ = [
    "OPS", "plan", "clear_cache", "matmul", "grouped_matmul", "bias_activation_backward",
    "softmax", "softmax_backward", "layer_norm", "rms_norm", "norm_backward", "binary", "add",
    "sub", "mul", "div", "maximum", "minimum", "unary", "unary_backward", "relu", "gelu", "silu",
    "swiglu", "swiglu_backward", "reduce", "rope", "embedding", "embedding_backward",
    "cross_entropy", "CrossEntropy", "adamw", "cast", "permute", "dropout", "attention",
    "attention_backward", "topk_gating",
    # the PyTorch device's ops (issue 33)
    "unary_math", "binary_scalar", "where", "clamp", "cumsum", "cumprod", "gather",
    "index_select", "scatter", "scatter_add", "index_add", "index_copy", "cat", "fill", "full",
    "arange", "argmax", "argmin", "IndexOutOfRange",
    # low precision (SPEC §17.6)
    "quantize", "dequantize", "scaled_matmul", "fake_quantize", "fake_quantize_backward", *(
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
        "sin", "cos", "tan", "tanh", "atan", "sigmoid", "erf", "erfinv", "abs", "neg", "sign",
        "floor", "ceil", "round", "trunc", "logical_not", "isnan", "isinf", "isfinite",
        "bitwise_not"),
    *("pow", "fmod", "remainder", "floor_divide", "trunc_divide", "atan2", "eq", "ne", "lt",
      "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
      "bitwise_xor"),
]

TensorLike = Union[Tensor, Buffer]

#: The op names HAL's operators API has (hal_op_kind_t's short names).
OPS: tuple[str, ...] = tuple(_hal.op_names())

_CACHE_LIMIT = 512
_cache: "OrderedDict[tuple, OpPlan]" = OrderedDict()


def _layout_key(value: Any) -> Any:
    # A Buffer is dense: its dtype and shape are its layout. A Tensor with the same layout gets
    # its own entry, which costs a plan, never a wrong one.
    if isinstance(value, Buffer):
        return (value.dtype, value.shape)
    if isinstance(value, Tensor):
        return (value.dtype, value.shape, value.strides)
    if isinstance(value, (list, tuple)):
        return tuple(_layout_key(v) for v in value)
    return value


def plan(op: str, device: Device, *, deterministic: bool = False, **fields: Any) -> OpPlan:
    """A new plan of ``op`` on ``device`` from its descriptor's fields (never cached)."""
    return OpPlan(device, op, fields, deterministic)


def _planned(op: str, device: Device, fields: dict) -> OpPlan:
    # Each function builds its fields in one order, so the items need no sorting. The device
    # by index: a plan of an earlier HAL session is closed (hal.shutdown) and made again.
    key = (op, device.index, *[(k, _layout_key(v)) for k, v in fields.items()])
    found = _cache.get(key)
    if found is not None and not found.closed:
        try:
            _cache.move_to_end(key)
        except KeyError:  # another thread evicted it meanwhile: it is still a valid plan
            pass
        return found
    made = OpPlan(device, op, fields, False)
    _cache[key] = made
    if len(_cache) > _CACHE_LIMIT:
        _cache.popitem(last=False)
    return made


def clear_cache() -> None:
    """Drops the cached plans (hal.shutdown makes them unusable; they are re-planned then)."""
    _cache.clear()


def _run(op: str, device: Device, fields: dict, operands: list, scalars: Sequence = (),
         stream: Stream | None = None) -> None:
    _planned(op, device, fields).execute(operands, scalars, stream=stream)


def _device(x: TensorLike) -> Device:
    if not isinstance(x, (Tensor, Buffer)):
        raise TypeError(f"expected a hal.Tensor or hal.Buffer, got {type(x).__name__}")
    return x.device


def _new(shape: Sequence[int], dtype: str, device: Device) -> Buffer:
    return Buffer(device, tuple(int(e) for e in shape), dtype)


def _out(out: TensorLike | None, shape: Sequence[int], dtype: str, device: Device) -> TensorLike:
    return _new(shape, dtype, device) if out is None else out


# The wrappers never reshape what they are given: a shape derived from one operand is applied
# to another only where the two agree extent for extent, or the other's extent is 1 (then it
# repeats with stride 0, reading nothing past its own view). Anything else raises ValueError
# naming both shapes, before anything is planned or written.


def _broadcast(what: str, a_name: str, a: Sequence[int], b_name: str,
               b: Sequence[int]) -> tuple[int, ...]:
    """The shape a and b broadcast to (equal ranks; each pair of extents equal, or one 1)."""
    a, b = tuple(a), tuple(b)
    if len(a) != len(b):
        raise ValueError(f"{what}: {a_name} {a} and {b_name} {b} need the same rank")
    for d, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{what}: {a_name} {a} and {b_name} {b} do not broadcast: dimension "
                             f"{d} is {x} and {y} (equal extents, or one of them 1)")
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _expand(what: str, name: str, x: TensorLike, shape: Sequence[int]) -> TensorLike:
    """x viewed at shape: each extent-1 dimension that shape widens repeats with stride 0; every
    other extent must already be shape's."""
    shape = tuple(int(e) for e in shape)
    if tuple(x.shape) == shape:
        return x
    if len(x.shape) != len(shape):
        raise ValueError(f"{what}: {name} {tuple(x.shape)} needs rank {len(shape)} to be used "
                         f"at {shape}")
    for d, (extent, want) in enumerate(zip(x.shape, shape)):
        if extent != want and extent != 1:
            raise ValueError(f"{what}: {name} {tuple(x.shape)} does not broadcast to {shape}: "
                             f"dimension {d} is {extent}, not {want} or 1")
    view = x if isinstance(x, Tensor) else Tensor(x)
    strides = [0 if extent == 1 and want != 1 else stride
               for extent, want, stride in zip(view.shape, shape, view.strides)]
    return Tensor(view.buffer, shape, strides, view.offset)


# ---- matmul ----------------------------------------------------------------------------------


def matmul(a: TensorLike, b: TensorLike, *, out: TensorLike | None = None,
           c: TensorLike | None = None, bias: TensorLike | None = None, alpha: float = 1.0,
           beta: float = 0.0, activation: str = "none", transpose_a: bool = False,
           transpose_b: bool = False, aux: TensorLike | None = None, dtype: str | None = None,
           stream: Stream | None = None) -> TensorLike:
    """out = act(alpha * op(a) @ op(b) + beta * c + bias); aux (when given) gets the value act
    was applied to. Batch dimensions broadcast (extent 1 or stride 0). With beta != 0 and no c,
    c is out itself (accumulate into it)."""
    device = _device(a)
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise ValueError(f"matmul: a {a.shape} and b {b.shape} need the same rank >= 2")
    m = a.shape[-1] if transpose_a else a.shape[-2]
    n = b.shape[-2] if transpose_b else b.shape[-1]
    batch = _broadcast("matmul", "a", a.shape[:-2], "b", b.shape[:-2])
    a = _expand("matmul", "a", a, batch + tuple(a.shape[-2:]))
    b = _expand("matmul", "b", b, batch + tuple(b.shape[-2:]))
    out = _out(out, batch + (m, n), dtype or a.dtype, device)
    if beta != 0.0:
        c = out if c is None else _expand("matmul", "c", c, tuple(out.shape))
    fields = dict(a=a, b=b, c=c if beta != 0.0 else None, d=out, bias=bias, aux=aux,
                  alpha=alpha, beta=beta, activation=activation, transpose_a=transpose_a,
                  transpose_b=transpose_b, has_bias=bias is not None, save_aux=aux is not None)
    _run("matmul", device, fields, [a, b, fields["c"], out, bias, aux], stream=stream)
    return out


def grouped_matmul(a: TensorLike, b: TensorLike, offsets: TensorLike, *,
                   out: TensorLike | None = None, transpose_b: bool = False,
                   stream: Stream | None = None) -> TensorLike:
    """For each group g, rows offsets[g]..offsets[g+1]-1 of a times b[g] (MoE experts)."""
    device = _device(a)
    groups = b.shape[0]
    n = b.shape[1] if transpose_b else b.shape[2]
    out = _out(out, (a.shape[0], n), a.dtype, device)
    fields = dict(a=a, b=b, d=out, groups=groups, transpose_b=transpose_b)
    _run("grouped_matmul", device, fields, [a, b, offsets, out], stream=stream)
    return out


def bias_activation_backward(grad_out: TensorLike, aux: TensorLike | None = None, *,
                             activation: str = "none", compute_bias_grad: bool = False,
                             grad_pre: TensorLike | None = None,
                             grad_bias: TensorLike | None = None,
                             stream: Stream | None = None) -> tuple:
    """(grad_pre, grad_bias): grad_out * act'(aux), and its column sums when asked."""
    device = _device(grad_out)
    grad_pre = _out(grad_pre, grad_out.shape, grad_out.dtype, device)
    if compute_bias_grad:
        grad_bias = _out(grad_bias, (grad_out.shape[-1],), "float32", device)
    else:
        grad_bias = None
    aux_used = aux if activation != "none" else None
    fields = dict(activation=activation, compute_bias_grad=compute_bias_grad, grad_out=grad_out,
                  aux=aux_used, grad_pre=grad_pre, grad_bias=grad_bias)
    _run("bias_activation_backward", device, fields, [grad_out, aux_used, grad_pre, grad_bias],
         stream=stream)
    return grad_pre, grad_bias


# ---- softmax and norms -----------------------------------------------------------------------


def softmax(x: TensorLike, *, log: bool = False, out: TensorLike | None = None,
            stream: Stream | None = None) -> TensorLike:
    """softmax (or log_softmax) over the last dimension."""
    device = _device(x)
    out = _out(out, x.shape, x.dtype, device)
    _run("softmax", device, dict(log=log, x=x, y=out), [x, out], stream=stream)
    return out


def softmax_backward(y: TensorLike, grad_y: TensorLike, *, log: bool = False,
                     grad_x: TensorLike | None = None,
                     stream: Stream | None = None) -> TensorLike:
    """grad_x from the forward output y and grad_y."""
    device = _device(y)
    grad_x = _out(grad_x, grad_y.shape, grad_y.dtype, device)
    _run("softmax_backward", device, dict(log=log, x=grad_y, y=y, grad_x=grad_x),
         [y, grad_y, grad_x], stream=stream)
    return grad_x


def _rows(x: TensorLike) -> int:
    rows = 1
    for extent in x.shape[:-1]:
        rows *= extent
    return rows


def _norm(kind: str, x: TensorLike, gamma: TensorLike | None, beta: TensorLike | None,
          eps: float, out: TensorLike | None, save_stats: bool, stream: Stream | None):
    device = _device(x)
    out = _out(out, x.shape, x.dtype, device)
    rows = (_rows(x),)
    mean = _new(rows, "float32", device) if save_stats and kind == "layernorm" else None
    rstd = _new(rows, "float32", device) if save_stats else None
    fields = dict(norm=kind, epsilon=eps, has_gamma=gamma is not None,
                  has_beta=beta is not None, has_mean=mean is not None,
                  has_rstd=rstd is not None, x=x, gamma=gamma, beta=beta, y=out, mean=mean,
                  rstd=rstd)
    _run("norm", device, fields, [x, gamma, beta, out, mean, rstd], stream=stream)
    if not save_stats:
        return out
    return (out, mean, rstd) if kind == "layernorm" else (out, rstd)


def layer_norm(x: TensorLike, gamma: TensorLike | None = None, beta: TensorLike | None = None,
               *, eps: float = 1e-5, out: TensorLike | None = None, save_stats: bool = False,
               stream: Stream | None = None):
    """Layernorm over the last dimension; with save_stats, (y, mean, rstd) for the backward."""
    return _norm("layernorm", x, gamma, beta, eps, out, save_stats, stream)


def rms_norm(x: TensorLike, gamma: TensorLike | None = None, *, eps: float = 1e-6,
             out: TensorLike | None = None, save_stats: bool = False,
             stream: Stream | None = None):
    """RMSNorm over the last dimension; with save_stats, (y, rstd) for the backward."""
    return _norm("rmsnorm", x, gamma, None, eps, out, save_stats, stream)


def norm_backward(x: TensorLike, grad_y: TensorLike, rstd: TensorLike, *,
                  mean: TensorLike | None = None, gamma: TensorLike | None = None,
                  has_beta: bool = False, grad_gamma: bool = False, grad_beta: bool = False,
                  grad_x: TensorLike | None = None, stream: Stream | None = None) -> tuple:
    """(grad_x, grad_gamma, grad_beta) of layernorm (mean given) or RMSNorm (mean None)."""
    device = _device(x)
    kind = "layernorm" if mean is not None else "rmsnorm"
    grad_x = _out(grad_x, x.shape, x.dtype, device)
    n = (x.shape[-1],)
    gg = _new(n, "float32", device) if grad_gamma else None
    gb = _new(n, "float32", device) if grad_beta else None
    fields = dict(norm=kind, has_gamma=gamma is not None, has_beta=has_beta or grad_beta,
                  has_grad_gamma=grad_gamma, has_grad_beta=grad_beta, x=x, gamma=gamma,
                  mean=mean, rstd=rstd, grad_y=grad_y, grad_x=grad_x, grad_gamma=gg,
                  grad_beta=gb)
    _run("norm_backward", device, fields, [x, gamma, mean, rstd, grad_y, grad_x, gg, gb],
         stream=stream)
    return grad_x, gg, gb


# ---- elementwise -----------------------------------------------------------------------------


_BOOL_OUT = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}
_FLOATS = {"float32", "float16", "bfloat16"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) or type(value).__name__ in (
        "float64", "float32", "int64", "int32", "bool_")


def binary(op: str, a: TensorLike | float, b: TensorLike | float, *, alpha: float = 1.0,
           out: TensorLike | None = None, dtype: str | None = None,
           stream: Stream | None = None) -> TensorLike:
    """out = alpha * (a op b) (hal_binary_op_t's short names: add ... min, pow, fmod,
    remainder, floor_divide, trunc_divide, atan2, eq ... ge, logical_*, bitwise_*); a and b
    broadcast (extent 1) to out's shape and have its rank. One of them may be a Python number
    (HAL_OP_BINARY_SCALAR). out's dtype: bool for comparisons and logical ops, else a's (or
    b's when a is a number)."""
    if _is_number(a) or _is_number(b):
        return binary_scalar(op, a, b, alpha=alpha, out=out, dtype=dtype, stream=stream)
    device = _device(a)
    shape = _broadcast(op, "a", a.shape, "b", b.shape)
    out = _out(out, shape, dtype or ("bool" if op in _BOOL_OUT else a.dtype), device)
    _run("binary", device, dict(op=op, alpha=alpha, a=a, b=b, out=out), [a, b, out],
         stream=stream)
    return out


def binary_scalar(op: str, a: TensorLike | float, b: TensorLike | float, *,
                  alpha: float = 1.0, out: TensorLike | None = None, dtype: str | None = None,
                  stream: Stream | None = None) -> TensorLike:
    """alpha * (a op b) with one of a, b a Python number (an int is an integer operand, a
    float a float one: int_tensor * 0.5 computes in floats, into float32 unless dtype says)."""
    scalar_first = _is_number(a)
    x, s = (b, a) if scalar_first else (a, b)
    if _is_number(x):
        raise TypeError(f"{op}: one operand must be a hal.Tensor or hal.Buffer")
    device = _device(x)
    scalar_is_float = isinstance(s, float) or type(s).__name__ in ("float64", "float32")
    if dtype is None:
        if op in _BOOL_OUT:
            dtype = "bool"
        elif scalar_is_float and x.dtype not in _FLOATS:
            dtype = "float32"
        else:
            dtype = x.dtype
    out = _out(out, x.shape, dtype, device)
    fields = dict(op=op, alpha=alpha, scalar_first=scalar_first,
                  scalar_is_float=scalar_is_float, x=x, out=out)
    _run("binary_scalar", device, fields, [x, out], [s], stream=stream)
    return out


def add(a, b, **kw):
    """a + b (see binary)."""
    return binary("add", a, b, **kw)


def sub(a, b, **kw):
    """a - b (see binary)."""
    return binary("sub", a, b, **kw)


def mul(a, b, **kw):
    """a * b (see binary)."""
    return binary("mul", a, b, **kw)


def div(a, b, **kw):
    """a / b (see binary)."""
    return binary("div", a, b, **kw)


def maximum(a, b, **kw):
    """max(a, b), NaN propagating (see binary)."""
    return binary("max", a, b, **kw)


def minimum(a, b, **kw):
    """min(a, b), NaN propagating (see binary)."""
    return binary("min", a, b, **kw)


def _binary_op(name: str):
    def op(a, b, **kw):
        return binary(name, a, b, **kw)
    op.__name__ = name
    op.__doc__ = f"a {name} b (see binary)."
    return op


pow = _binary_op("pow")  # noqa: A001 - PyTorch's name
fmod = _binary_op("fmod")
remainder = _binary_op("remainder")
floor_divide = _binary_op("floor_divide")
trunc_divide = _binary_op("trunc_divide")
atan2 = _binary_op("atan2")
eq = _binary_op("eq")
ne = _binary_op("ne")
lt = _binary_op("lt")
le = _binary_op("le")
gt = _binary_op("gt")
ge = _binary_op("ge")
logical_and = _binary_op("logical_and")
logical_or = _binary_op("logical_or")
logical_xor = _binary_op("logical_xor")
bitwise_and = _binary_op("bitwise_and")
bitwise_or = _binary_op("bitwise_or")
bitwise_xor = _binary_op("bitwise_xor")

_PREDICATES = {"logical_not", "isnan", "isinf", "isfinite"}


def unary_math(op: str, x: TensorLike, *, out: TensorLike | None = None,
               dtype: str | None = None, stream: Stream | None = None) -> TensorLike:
    """out = op(x), op a hal_unary_math_t short name (exp ... erfinv on floats; abs, neg,
    sign, floor, ceil, round, trunc also on integers; logical_not, isnan, isinf, isfinite
    into bool; bitwise_not on integers and bool)."""
    device = _device(x)
    out = _out(out, x.shape, dtype or ("bool" if op in _PREDICATES else x.dtype), device)
    _run("unary_math", device, dict(op=op, x=x, out=out), [x, out], stream=stream)
    return out


def _unary_math_op(name: str):
    def op(x, **kw):
        return unary_math(name, x, **kw)
    op.__name__ = name
    op.__doc__ = f"{name}(x) (see unary_math)."
    return op


exp, exp2, expm1 = _unary_math_op("exp"), _unary_math_op("exp2"), _unary_math_op("expm1")
log, log2, log10 = _unary_math_op("log"), _unary_math_op("log2"), _unary_math_op("log10")
log1p, sqrt, rsqrt = _unary_math_op("log1p"), _unary_math_op("sqrt"), _unary_math_op("rsqrt")
reciprocal, sin, cos = (_unary_math_op("reciprocal"), _unary_math_op("sin"),
                        _unary_math_op("cos"))
tan, tanh, atan = _unary_math_op("tan"), _unary_math_op("tanh"), _unary_math_op("atan")
sigmoid, erf, erfinv = _unary_math_op("sigmoid"), _unary_math_op("erf"), _unary_math_op("erfinv")
abs, neg, sign = _unary_math_op("abs"), _unary_math_op("neg"), _unary_math_op("sign")  # noqa: A001
floor, ceil = _unary_math_op("floor"), _unary_math_op("ceil")
round, trunc = _unary_math_op("round"), _unary_math_op("trunc")  # noqa: A001
logical_not, isnan = _unary_math_op("logical_not"), _unary_math_op("isnan")
isinf, isfinite = _unary_math_op("isinf"), _unary_math_op("isfinite")
bitwise_not = _unary_math_op("bitwise_not")


def unary(x: TensorLike, activation: str = "none", *, alpha: float = 1.0,
          out: TensorLike | None = None, stream: Stream | None = None) -> TensorLike:
    """out = act(alpha * x); activation none, relu, gelu_tanh, gelu_erf or silu."""
    device = _device(x)
    out = _out(out, x.shape, x.dtype, device)
    _run("unary", device, dict(activation=activation, alpha=alpha, x=x, out=out), [x, out],
         stream=stream)
    return out


def unary_backward(x: TensorLike, grad_out: TensorLike, activation: str = "none", *,
                   alpha: float = 1.0, grad_x: TensorLike | None = None,
                   stream: Stream | None = None) -> TensorLike:
    """grad_x = grad_out * alpha * act'(alpha * x)."""
    device = _device(x)
    grad_x = _out(grad_x, x.shape, x.dtype, device)
    fields = dict(activation=activation, alpha=alpha, x=x, out=grad_out, grad_x=grad_x)
    _run("unary_backward", device, fields, [x, grad_out, grad_x], stream=stream)
    return grad_x


def relu(x, **kw):
    """max(x, 0)."""
    return unary(x, "relu", **kw)


def gelu(x, approximate: str = "none", **kw):
    """GELU: erf form, or the tanh form with approximate='tanh' (PyTorch's convention)."""
    return unary(x, "gelu_tanh" if approximate == "tanh" else "gelu_erf", **kw)


def silu(x, **kw):
    """x * sigmoid(x)."""
    return unary(x, "silu", **kw)


def swiglu(x: TensorLike, *, out: TensorLike | None = None,
           stream: Stream | None = None) -> TensorLike:
    """x [..., 2n] = (gate, up): silu(gate) * up, [..., n]."""
    device = _device(x)
    out = _out(out, tuple(x.shape[:-1]) + (x.shape[-1] // 2,), x.dtype, device)
    _run("swiglu", device, dict(x=x, out=out), [x, out], stream=stream)
    return out


def swiglu_backward(x: TensorLike, grad_out: TensorLike, *, grad_x: TensorLike | None = None,
                    stream: Stream | None = None) -> TensorLike:
    """grad_x [..., 2n] of swiglu."""
    device = _device(x)
    grad_x = _out(grad_x, x.shape, x.dtype, device)
    _run("swiglu_backward", device, dict(x=x, out=grad_out, grad_x=grad_x), [x, grad_out, grad_x],
         stream=stream)
    return grad_x


def reduce(x: TensorLike, axes: int | Sequence[int], kind: str = "sum", *,
           out: TensorLike | None = None, dtype: str | None = None,
           stream: Stream | None = None) -> TensorLike:
    """sum, mean, max, min, prod, argmax, argmin or norm2 over axes; out keeps x's rank
    with extent 1 in each reduced axis. out's dtype: int64 for argmax/argmin and for sum/prod
    of integers or bool, else x's."""
    device = _device(x)
    rank = len(x.shape)
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    mask = 0
    for axis in axes:
        if not -rank <= axis < rank:
            raise ValueError(f"reduce: axis {axis} is outside a rank-{rank} tensor")
        mask |= 1 << (axis % rank)
    shape = tuple(1 if mask >> d & 1 else e for d, e in enumerate(x.shape))
    if dtype is None:
        integer_sum = kind in ("sum", "prod") and x.dtype not in _FLOATS
        dtype = "int64" if kind in ("argmax", "argmin") or integer_sum else x.dtype
    out = _out(out, shape, dtype, device)
    _run("reduce", device, dict(reduce=kind, axes_mask=mask, x=x, out=out), [x, out],
         stream=stream)
    return out


def rope(x: TensorLike, *, rotary_dim: int | None = None, base: float = 10000.0,
         interleaved: bool = False, inverse: bool = False,
         positions: TensorLike | None = None, position_offset: int = 0,
         out: TensorLike | None = None, stream: Stream | None = None) -> TensorLike:
    """Rotary embedding of x [batch, seq, heads, dim] (inverse: the backward rotation)."""
    device = _device(x)
    out = _out(out, x.shape, x.dtype, device)
    fields = dict(rotary_dim=rotary_dim if rotary_dim is not None else x.shape[-1],
                  interleaved=interleaved, inverse=inverse, has_positions=positions is not None,
                  base=base, position_offset=position_offset, x=x, positions=positions, out=out)
    _run("rope", device, fields, [x, positions, out], stream=stream)
    return out


def embedding(ids: TensorLike, table: TensorLike, *, out: TensorLike | None = None,
              stream: Stream | None = None) -> TensorLike:
    """out[i, :] = table[ids[i], :] (an id outside the table gives a zero row)."""
    device = _device(table)
    out = _out(out, tuple(ids.shape) + (table.shape[-1],), table.dtype, device)
    _run("embedding", device, dict(ids=ids, table=table, out=out), [ids, table, out],
         stream=stream)
    return out


def embedding_backward(ids: TensorLike, grad_out: TensorLike, grad_table: TensorLike, *,
                       accumulate: bool = False, stream: Stream | None = None) -> TensorLike:
    """grad_table (+)= the sum of grad_out's rows per id, in index order."""
    device = _device(grad_table)
    fields = dict(accumulate=accumulate, ids=ids, out=grad_out, table=grad_table)
    _run("embedding_backward", device, fields, [ids, grad_out, grad_table], stream=stream)
    return grad_table


class CrossEntropy(NamedTuple):
    loss: Buffer  # float32 [1]: the mean over the counted rows
    row_losses: Buffer | None
    grad_logits: TensorLike | None


def cross_entropy(logits: TensorLike, labels: TensorLike, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, grad: bool = False, row_losses: bool = False,
                  grad_scale: float = 1.0, grad_logits: TensorLike | None = None,
                  stream: Stream | None = None) -> CrossEntropy:
    """Mean cross-entropy of logits [rows, classes] against labels [rows]; with grad, also
    d loss / d logits * grad_scale (into grad_logits, which may be logits itself).

    Labels equal to ignore_index are not counted (row loss 0, zero gradient row). A label
    outside [0, classes) that is not ignore_index is counted with a row loss of NaN, so the
    loss is NaN (the bad data shows rather than hides; SPEC.md §17.6.4), and its gradient row
    is zero. Checking labels on the host first would cost a synchronisation per call."""
    device = _device(logits)
    loss = _new((1,), "float32", device)
    rows = _new((logits.shape[0],), "float32", device) if row_losses else None
    if grad:
        grad_logits = _out(grad_logits, logits.shape, logits.dtype, device)
    elif grad_logits is not None:
        raise ValueError("cross_entropy: grad_logits is given but grad is False")
    fields = dict(ignore_index=ignore_index, label_smoothing=label_smoothing,
                  has_row_losses=row_losses, has_grad=grad, logits=logits, labels=labels,
                  loss=loss, row_losses=rows, grad_logits=grad_logits)
    _run("cross_entropy", device, fields, [logits, labels, loss, rows, grad_logits],
         [grad_scale], stream=stream)
    return CrossEntropy(loss, rows, grad_logits)


# ---- optimizer, casts, dropout ---------------------------------------------------------------


def adamw(params: Sequence[TensorLike], grads: Sequence[TensorLike],
          m: Sequence[TensorLike], v: Sequence[TensorLike], *, lr: float, step: int,
          betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 0.0, max_grad_norm: float = 0.0,
          master: Sequence[TensorLike] | None = None, grad_norm: bool = False,
          stream: Stream | None = None) -> Buffer | None:
    """One AdamW step over every tensor in one call, in place; max_grad_norm > 0 clips by the
    global norm. Returns the global gradient norm (float32 [1]) when grad_norm is True."""
    count = len(params)
    if not count or not (len(grads) == len(m) == len(v) == count) or (
            master is not None and len(master) != count):
        raise ValueError("adamw: params, grads, m, v (and master) need the same non-zero length")
    device = _device(params[0])
    numels = []
    for t, p in enumerate(params):
        for name, group in (("grads", grads), ("m", m), ("v", v), ("master", master)):
            if group is not None and tuple(group[t].shape) != tuple(p.shape):
                raise ValueError(f"adamw: {name}[{t}] {tuple(group[t].shape)} must have "
                                 f"params[{t}]'s shape {tuple(p.shape)}")
        size = 1
        for extent in p.shape:
            size *= extent
        numels.append(size)
    norm = _new((1,), "float32", device) if grad_norm else None
    operands: list = [norm]
    for t in range(count):
        operands += [params[t], grads[t], m[t], v[t], master[t] if master is not None else None]
    fields = dict(has_master=master is not None, param_dtype=params[0].dtype,
                  grad_dtype=grads[0].dtype, numels=numels, beta1=betas[0], beta2=betas[1],
                  epsilon=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                  has_grad_norm=grad_norm)
    _run("adamw", device, fields, operands, [lr, step], stream=stream)
    return norm


def cast(x: TensorLike, dtype: str, *, out: TensorLike | None = None,
         stream: Stream | None = None) -> TensorLike:
    """x converted to dtype (round to nearest even; saturating to integers)."""
    device = _device(x)
    out = _out(out, x.shape, dtype, device)
    _run("cast", device, dict(**{"in": x}, out=out), [x, out], stream=stream)
    return out


def permute(x: TensorLike, perm: Sequence[int], *, dtype: str | None = None,
            out: TensorLike | None = None, stream: Stream | None = None) -> TensorLike:
    """out.shape[d] = x.shape[perm[d]] (a transpose written densely), cast to dtype."""
    device = _device(x)
    if sorted(perm) != list(range(len(x.shape))):
        raise ValueError(f"permute: {tuple(perm)} is not a permutation of {len(x.shape)} axes")
    out = _out(out, tuple(x.shape[p] for p in perm), dtype or x.dtype, device)
    _run("permute", device, dict(**{"in": x}, out=out, perm=list(perm)), [x, out],
         stream=stream)
    return out


def dropout(x: TensorLike, p: float, *, seed: int, offset: int = 0, mask: bool = False,
            backward: bool = False, out: TensorLike | None = None,
            stream: Stream | None = None):
    """Philox dropout (SPEC §17): keep ? x / (1 - p) : 0. The same (seed, offset) with
    backward=True applies the same mask to a gradient. With mask, returns (out, mask u8)."""
    device = _device(x)
    out = _out(out, x.shape, x.dtype, device)
    keep = _new(x.shape, "uint8", device) if mask else None
    fields = dict(probability=p, backward=backward, has_mask=mask, x=x, out=out, mask=keep)
    _run("dropout", device, fields, [x, out, keep], [seed, offset], stream=stream)
    return (out, keep) if mask else out


# ---- attention and routing -------------------------------------------------------------------


def _attention_fields(q, k, v, causal, scale, cu_seqlens_q, max_seqlen_q, max_seqlen_k,
                      block_mask, block_indices, block_q, block_k):
    sparsity, sparse = "dense", None
    if block_mask is not None:
        sparsity, sparse = "block_mask", block_mask
    if block_indices is not None:
        if block_mask is not None:
            raise ValueError("attention: give block_mask or block_indices, not both")
        sparsity, sparse = "block_indices", block_indices
    varlen = cu_seqlens_q is not None
    batch = (cu_seqlens_q.shape[0] - 1) if varlen else q.shape[0]
    fields = dict(causal=causal, sparsity=sparsity, scale=scale, has_cu_seqlens=varlen,
                  batch=batch, max_seqlen_q=max_seqlen_q if varlen else 0,
                  max_seqlen_k=max_seqlen_k if varlen else 0,
                  block_q=block_q if sparse is not None else 0,
                  block_k=block_k if sparse is not None else 0,
                  topk=block_indices.shape[-1] if block_indices is not None else 0, q=q, k=k, v=v)
    return fields, sparse, batch


def attention(q: TensorLike, k: TensorLike, v: TensorLike, *, causal: str = "none",
              scale: float = 0.0, out: TensorLike | None = None, lse: TensorLike | None = None,
              cu_seqlens_q: TensorLike | None = None, cu_seqlens_k: TensorLike | None = None,
              max_seqlen_q: int = 0, max_seqlen_k: int = 0,
              block_mask: TensorLike | None = None, block_indices: TensorLike | None = None,
              block_q: int = 64, block_k: int = 64, stream: Stream | None = None) -> tuple:
    """Fused attention on the FlashAttention contract: q [batch, s_q, heads, d], k and v
    [batch, s_k, kv_heads, d]; causal none, top_left or bottom_right; scale 0 = 1/sqrt(d).
    Returns (out, lse), lse f32 [q.shape[0], heads, q.shape[1]] for the backward (varlen:
    [1, heads, total_q])."""
    device = _device(q)
    fields, sparse, batch = _attention_fields(q, k, v, causal, scale, cu_seqlens_q, max_seqlen_q,
                                              max_seqlen_k, block_mask, block_indices, block_q,
                                              block_k)
    out = _out(out, q.shape, q.dtype, device)
    lse = _out(lse, (q.shape[0], q.shape[2], q.shape[1]), "float32", device)
    fields.update(out=out, lse=lse)
    _run("attention", device, fields, [q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sparse],
         stream=stream)
    return out, lse


def attention_backward(q: TensorLike, k: TensorLike, v: TensorLike, out: TensorLike,
                       lse: TensorLike, grad_out: TensorLike, *, causal: str = "none",
                       scale: float = 0.0, cu_seqlens_q: TensorLike | None = None,
                       cu_seqlens_k: TensorLike | None = None, max_seqlen_q: int = 0,
                       max_seqlen_k: int = 0, block_mask: TensorLike | None = None,
                       block_indices: TensorLike | None = None, block_q: int = 64,
                       block_k: int = 64, stream: Stream | None = None) -> tuple:
    """(grad_q, grad_k, grad_v) of attention, from its out and lse."""
    device = _device(q)
    fields, sparse, _ = _attention_fields(q, k, v, causal, scale, cu_seqlens_q, max_seqlen_q,
                                          max_seqlen_k, block_mask, block_indices, block_q,
                                          block_k)
    grad_q = _new(q.shape, q.dtype, device)
    grad_k = _new(k.shape, k.dtype, device)
    grad_v = _new(v.shape, v.dtype, device)
    fields.update(out=out, lse=lse, grad_out=grad_out, grad_q=grad_q, grad_k=grad_k,
                  grad_v=grad_v)
    _run("attention_backward", device, fields,
         [q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sparse, grad_out, grad_q, grad_k,
          grad_v], stream=stream)
    return grad_q, grad_k, grad_v


def topk_gating(logits: TensorLike, k: int, *, renormalize: bool = True,
                stream: Stream | None = None) -> tuple:
    """MoE routing: (weights f32 [tokens, k], indices i32 [tokens, k]) of the k largest
    experts per token, softmax weights (renormalised to sum 1 when asked)."""
    device = _device(logits)
    weights = _new((logits.shape[0], k), "float32", device)
    indices = _new((logits.shape[0], k), "int32", device)
    fields = dict(k=k, renormalize=renormalize, logits=logits, weights=weights, indices=indices)
    _run("topk_gating", device, fields, [logits, weights, indices], stream=stream)
    return weights, indices


# ---- the PyTorch device's ops (issue 33) ----------------------------------------------------


class IndexOutOfRange(IndexError):
    """An index op met an index outside its axis (the device raised the status word)."""


def where(cond: TensorLike, a: TensorLike | float, b: TensorLike | float, *,
          out: TensorLike | None = None, dtype: str | None = None,
          stream: Stream | None = None) -> TensorLike:
    """cond ? a : b; cond bool or uint8; a and b tensors (broadcasting) or Python numbers,
    converted to out's dtype (a's, else b's, else float32)."""
    device = _device(cond)
    tensors = [v for v in (a, b) if not _is_number(v)]
    shape = tuple(cond.shape)
    for t in tensors:
        shape = _broadcast("where", "cond", shape, "a value", t.shape)
    out = _out(out, shape, dtype or (tensors[0].dtype if tensors else "float32"), device)
    fields = dict(a_is_scalar=_is_number(a), b_is_scalar=_is_number(b), cond=cond,
                  a=None if _is_number(a) else a, b=None if _is_number(b) else b, out=out)
    scalars = [v for v in (a, b) if _is_number(v)]
    _run("where", device, fields, [cond, fields["a"], fields["b"], out], scalars, stream=stream)
    return out


def clamp(x: TensorLike, min: TensorLike | float | None = None,  # noqa: A002
          max: TensorLike | float | None = None, *, out: TensorLike | None = None,  # noqa: A002
          dtype: str | None = None, stream: Stream | None = None) -> TensorLike:
    """min(max(x, min), max); each bound None, a tensor (broadcasting) or a number."""
    device = _device(x)
    out = _out(out, x.shape, dtype or x.dtype, device)

    def kind(bound):
        return "none" if bound is None else ("scalar" if _is_number(bound) else "tensor")

    fields = dict(min_kind=kind(min), max_kind=kind(max), x=x,
                  min=min if kind(min) == "tensor" else None,
                  max=max if kind(max) == "tensor" else None, out=out)
    scalars = [v for v in (min, max) if v is not None and _is_number(v)]
    _run("clamp", device, fields, [x, fields["min"], fields["max"], out], scalars,
         stream=stream)
    return out


def _scan(kind: str, x: TensorLike, axis: int, out, dtype, stream) -> TensorLike:
    device = _device(x)
    axis %= len(x.shape)
    if dtype is None:
        dtype = x.dtype if x.dtype in _FLOATS else "int64"
    out = _out(out, x.shape, dtype, device)
    _run("scan", device, dict(scan=kind, axis=axis, x=x, out=out), [x, out], stream=stream)
    return out


def cumsum(x: TensorLike, axis: int, *, out: TensorLike | None = None, dtype: str | None = None,
           stream: Stream | None = None) -> TensorLike:
    """Inclusive prefix sums along axis (integers and bool into int64 unless dtype says)."""
    return _scan("sum", x, axis, out, dtype, stream)


def cumprod(x: TensorLike, axis: int, *, out: TensorLike | None = None,
            dtype: str | None = None, stream: Stream | None = None) -> TensorLike:
    """Inclusive prefix products along axis."""
    return _scan("prod", x, axis, out, dtype, stream)


def _status(device: Device, stream: Stream | None) -> Buffer:
    status = _new((1,), "int32", device)
    fill(status, 0, stream=stream)
    return status


def _checked(status: Buffer, what: str, check: bool) -> None:
    if check and int(status.to_numpy()[0]) != 0:
        raise IndexOutOfRange(f"{what}: an index is outside its axis")


def _spread(index: TensorLike, rank: int, axis: int, shape: Sequence[int]) -> Tensor:
    """A 1-D index viewed at shape with stride 0 in every dimension but axis, where its
    extent must be shape's (a longer shape would read past the index's own view)."""
    view = index if isinstance(index, Tensor) else Tensor(index)
    if len(view.shape) != 1:
        raise ValueError(f"a 1-D index is needed, got shape {tuple(view.shape)}")
    if view.shape[0] != shape[axis]:
        raise ValueError(f"the index has {view.shape[0]} entries; the source has "
                         f"{shape[axis]} along axis {axis} (shape {tuple(shape)})")
    strides = [view.strides[0] if d == axis else 0 for d in range(rank)]
    return Tensor(view.buffer, tuple(shape), strides, view.offset)


def gather(x: TensorLike, axis: int, index: TensorLike, *, out: TensorLike | None = None,
           status: Buffer | None = None, stream: Stream | None = None) -> TensorLike:
    """out[p] = x[p with p[axis] = index[p]] (torch.gather). An out-of-range index gives 0
    and raises IndexOutOfRange (after a synchronisation); given a status buffer (int32 [1],
    zeroed by the caller), the call stays asynchronous and the status collects the error."""
    device = _device(x)
    axis %= len(x.shape)
    out = _out(out, index.shape, x.dtype, device)
    check = status is None
    status = _status(device, stream) if status is None else status
    _run("gather", device, dict(axis=axis, x=x, index=index, out=out),
         [x, index, out, status], stream=stream)
    _checked(status, "gather", check)
    return out


def index_select(x: TensorLike, axis: int, index: TensorLike, **kw) -> TensorLike:
    """x's slices at index (1-D) along axis: gather with the index spread by stride 0."""
    axis %= len(x.shape)
    shape = list(x.shape)
    shape[axis] = index.shape[0]
    return gather(x, axis, _spread(index, len(shape), axis, shape), **kw)


def scatter(out: TensorLike, axis: int, index: TensorLike, src: TensorLike, *,
            reduce: str = "replace", status: Buffer | None = None,
            stream: Stream | None = None) -> TensorLike:
    """In place on out (torch's scatter_ / scatter_add_ with reduce='add'): for every p of
    index's shape in row-major order, out[p with p[axis] = index[p]] = (or +=) src[p]. An
    out-of-range index writes nothing (IndexOutOfRange, or the status as for gather)."""
    device = _device(out)
    axis %= len(out.shape)
    check = status is None
    status = _status(device, stream) if status is None else status
    _run("scatter", device, dict(mode=reduce, axis=axis, index=index, src=src, out=out),
         [index, src, out, status], stream=stream)
    _checked(status, "scatter", check)
    return out


def scatter_add(out: TensorLike, axis: int, index: TensorLike, src: TensorLike, **kw):
    """scatter with reduce='add'."""
    return scatter(out, axis, index, src, reduce="add", **kw)


def index_add(out: TensorLike, axis: int, index: TensorLike, src: TensorLike, **kw):
    """out[..., index[i], ...] += src[..., i, ...] in place, i in order (index 1-D)."""
    axis %= len(out.shape)
    return scatter(out, axis, _spread(index, len(src.shape), axis, src.shape), src,
                   reduce="add", **kw)


def index_copy(out: TensorLike, axis: int, index: TensorLike, src: TensorLike, **kw):
    """out[..., index[i], ...] = src[..., i, ...] in place (the last i wins)."""
    axis %= len(out.shape)
    return scatter(out, axis, _spread(index, len(src.shape), axis, src.shape), src, **kw)


def cat(tensors: Sequence[TensorLike], axis: int = 0, *, out: TensorLike | None = None,
        dtype: str | None = None, stream: Stream | None = None) -> TensorLike:
    """The tensors joined along axis (each converted to out's dtype, the first's by default)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: no tensors")
    device = _device(tensors[0])
    axis %= len(tensors[0].shape)
    shape = list(tensors[0].shape)
    shape[axis] = sum(t.shape[axis] for t in tensors)
    out = _out(out, shape, dtype or tensors[0].dtype, device)
    _run("cat", device, dict(axis=axis, inputs=tensors, out=out), [*tensors, out],
         stream=stream)
    return out


def fill(out: TensorLike, value: float, *, step: float = 0, stream: Stream | None = None):
    """out[i] = value + i * step (i row-major; step 0: a constant), in place; returns out."""
    _run("fill", _device(out), dict(out=out), [out], [value, step], stream=stream)
    return out


def full(shape: Sequence[int], value: float, dtype: str, device: Device, *,
         stream: Stream | None = None) -> Buffer:
    """A new buffer of shape filled with value."""
    return fill(_new(shape, dtype, device), value, stream=stream)


def arange(start: float, end: float | None = None, step: float = 1, *, dtype: str = "int64",
           device: Device, stream: Stream | None = None) -> Buffer:
    """start, start + step, ... below end (above, for a negative step); arange(n) is 0..n-1."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must not be 0")
    if all(isinstance(v, int) for v in (start, end, step)):
        count = -((start - end) // step)  # exact ceil((end - start) / step)
    else:
        count = _math.ceil((end - start) / step)
    return fill(_new((builtins.max(0, count),), dtype, device), start, step=step, stream=stream)


def argmax(x: TensorLike, axis: int | None = None, **kw) -> TensorLike:
    """The index (int64) of the first largest element along axis (every axis: None)."""
    axes = range(len(x.shape)) if axis is None else axis
    return reduce(x, axes, "argmax", **kw)


def argmin(x: TensorLike, axis: int | None = None, **kw) -> TensorLike:
    """The index (int64) of the first smallest element along axis (every axis: None)."""
    axes = range(len(x.shape)) if axis is None else axis
    return reduce(x, axes, "argmin", **kw)


# ---- low precision (SPEC §17.6) --------------------------------------------------------------
# A block is (rows, cols) of the tensor seen as a matrix [rows, cols] (cols its last dimension);
# 0 spans the whole dimension: (0, 0) per tensor, (1, 0) per row (a weight's output channel).


def _scale_shape(what: str, shape: Sequence[int], blocks: Sequence[int]) -> tuple[int, int]:
    if len(shape) < 1:
        raise ValueError(f"{what}: needs a tensor of rank >= 1")
    cols = int(shape[-1])
    rows = _math.prod(int(e) for e in shape[:-1])
    br, bc = (int(b) for b in blocks)
    br, bc = br or rows, bc or cols
    if br <= 0 or bc <= 0 or rows % br or cols % bc:
        raise ValueError(f"{what}: blocks {tuple(blocks)} must divide [rows, cols] = "
                         f"[{rows}, {cols}]")
    return rows // br, cols // bc


def quantize(x: TensorLike, dtype: str = "int8", blocks: Sequence[int] = (0, 0), *,
             scale: TensorLike | None = None, q: TensorLike | None = None,
             stream: Stream | None = None) -> tuple[TensorLike, TensorLike]:
    """(q, scale): x rounded to dtype (int8, float8_e4m3fn, float8_e5m2) per block, saturating.
    Without scale each block's scale is amax / qmax (written); with it, scale is read."""
    device = _device(x)
    scale_shape = _scale_shape("quantize", x.shape, blocks)
    given = scale is not None
    scale = _out(scale, scale_shape, "float32", device)
    q = _out(q, x.shape, dtype, device)
    fields = dict(flags=1 if given else 0, block_rows=int(blocks[0]), block_cols=int(blocks[1]),
                  x=x, q=q, scale=scale)
    _run("quantize", device, fields, [x, q, scale], stream=stream)
    return q, scale


def dequantize(q: TensorLike, scale: TensorLike, blocks: Sequence[int] = (0, 0), *,
               dtype: str = "float32", out: TensorLike | None = None,
               stream: Stream | None = None) -> TensorLike:
    """q * scale per block, rounded once to dtype (float32, float16, bfloat16)."""
    device = _device(q)
    out = _out(out, q.shape, dtype, device)
    fields = dict(flags=0, block_rows=int(blocks[0]), block_cols=int(blocks[1]), x=out, q=q,
                  scale=scale)
    _run("dequantize", device, fields, [q, scale, out], stream=stream)
    return out


def scaled_matmul(a: TensorLike, a_scale: TensorLike, b: TensorLike, b_scale: TensorLike, *,
                  a_blocks: Sequence[int] = (0, 0), b_blocks: Sequence[int] = (0, 0),
                  offsets: TensorLike | None = None, dtype: str = "float32",
                  out: TensorLike | None = None, stream: Stream | None = None) -> TensorLike:
    """d[m, n] = sum over k of (a * a_scale)[m, k] (b * b_scale)[n, k]: a [m, k], b [n, k] (or
    [groups, n, k] with offsets, the MoE form), both int8 or both 8-bit floats."""
    device = _device(a)
    groups = 0 if offsets is None else int(b.shape[0])
    out = _out(out, (a.shape[0], b.shape[-2]), dtype, device)
    fields = dict(groups=groups, a_block_rows=int(a_blocks[0]), a_block_cols=int(a_blocks[1]),
                  b_block_rows=int(b_blocks[0]), b_block_cols=int(b_blocks[1]), a=a,
                  a_scale=a_scale, b=b, b_scale=b_scale, offsets=offsets, d=out)
    _run("scaled_matmul", device, fields, [a, a_scale, b, b_scale, offsets, out], stream=stream)
    return out



def fake_quantize(x: TensorLike, scale: TensorLike, qdtype: str = "int8",
                  blocks: Sequence[int] = (0, 0), *, reciprocal_scale: bool = False,
                  out: TensorLike | None = None, stream: Stream | None = None) -> TensorLike:
    """Q(x / s) * s per block (quantization-aware training's forward); reciprocal_scale: x * (1/s)
    as PyTorch forms it."""
    device = _device(x)
    out = _out(out, x.shape, x.dtype, device)
    fields = dict(qdtype=qdtype, flags=2 if reciprocal_scale else 0, block_rows=int(blocks[0]),
                  block_cols=int(blocks[1]), grad_scale_factor=0.0, x=x, scale=scale, y=out)
    _run("fake_quantize", device, fields, [x, scale, out], stream=stream)
    return out


def fake_quantize_backward(x: TensorLike, scale: TensorLike, grad_y: TensorLike,
                           qdtype: str = "int8", blocks: Sequence[int] = (0, 0), *,
                           grad_scale_factor: float | None = None,
                           reciprocal_scale: bool = False, clip_rounded: bool = False,
                           grad_x: TensorLike | None = None, stream: Stream | None = None):
    """The straight-through gradient grad_x; with grad_scale_factor also LSQ's scale gradient
    (returns (grad_x, grad_scale)). clip_rounded (int8): PyTorch's mask on the rounded value."""
    device = _device(x)
    grad_x = _out(grad_x, x.shape, grad_y.dtype, device)
    learned = grad_scale_factor is not None
    grad_scale = _new(scale.shape, "float32", device) if learned else None
    flags = ((1 if learned else 0) | (2 if reciprocal_scale else 0) |
             (4 if clip_rounded else 0))
    fields = dict(qdtype=qdtype, flags=flags, block_rows=int(blocks[0]),
                  block_cols=int(blocks[1]),
                  grad_scale_factor=float(grad_scale_factor) if learned else 0.0, x=x,
                  scale=scale, grad_y=grad_y, grad_x=grad_x, grad_scale=grad_scale)
    _run("fake_quantize_backward", device, fields, [x, scale, grad_y, grad_x, grad_scale],
         stream=stream)
    return (grad_x, grad_scale) if learned else grad_x
