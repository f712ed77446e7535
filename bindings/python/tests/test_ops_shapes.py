"""Every hal.ops wrapper refuses operands whose shapes do not fit each other, and views whose
extent is not what the op reads, before anything runs: the error names the rule and the outputs
the caller gave are untouched. The wrappers never reshape what they are given (a shape derived
from one operand is never applied to another it does not fit), and an operand whose layout the
op implies (offsets, cu_seqlens, block sparsity) must have exactly the implied shape, so a view
of a larger buffer is never read past its own end."""
import numpy as np
import pytest

import hal
from hal import ops

SENTINEL = 7.0


def put(array, dev):
    return hal.to_device(np.ascontiguousarray(array), dev)


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def filled(dev, *shape, dtype=np.float32):
    """An output the caller gives: every element the sentinel."""
    return put(np.full(shape, SENTINEL, dtype), dev)


def view(rng, dev, shape, larger):
    """A dense view of shape at the start of a larger buffer (data past the view is valid
    memory the op must not read)."""
    return hal.Tensor(put(randn(rng, *larger), dev), tuple(shape))


def i32(values, dev):
    return put(np.array(values, np.int32), dev)


def int_view(values, shape, dev):
    return hal.Tensor(i32(values, dev), tuple(shape))


# Each case: (wrapper name, label, build) where build(dev, rng) returns (call, outputs): call()
# must raise, and each buffer of outputs must still hold what it held.


def matmul_batch(dev, rng):
    out = filled(dev, 2, 4, 3)
    return lambda: ops.matmul(put(randn(rng, 2, 4, 5), dev), put(randn(rng, 3, 5, 3), dev),
                              out=out), [out]


def matmul_c_batch(dev, rng):
    out = filled(dev, 3, 4, 3)
    c = put(randn(rng, 2, 4, 3), dev)
    return lambda: ops.matmul(put(randn(rng, 3, 4, 5), dev), put(randn(rng, 3, 5, 3), dev),
                              c=c, beta=1.0, out=out), [out]


def matmul_c_larger_batch(dev, rng):
    # the issue's case: c [3, 4, 3] for d [2, 4, 3] added c[:2]
    out = filled(dev, 2, 4, 3)
    c = put(randn(rng, 3, 4, 3), dev)
    return lambda: ops.matmul(put(randn(rng, 2, 4, 5), dev), put(randn(rng, 2, 5, 3), dev),
                              c=c, beta=1.0, out=out), [out]


def matmul_view_batch(dev, rng):
    out = filled(dev, 3, 4, 3)
    b = view(rng, dev, (2, 5, 3), (3, 5, 3))  # two matrices of a buffer of three
    return lambda: ops.matmul(put(randn(rng, 3, 4, 5), dev), b, out=out), [out]


def matmul_rank(dev, rng):
    out = filled(dev, 2, 4, 3)
    return lambda: ops.matmul(put(randn(rng, 4, 5), dev), put(randn(rng, 2, 5, 3), dev),
                              out=out), [out]


def matmul_c_rank(dev, rng):
    out = filled(dev, 2, 4, 3)
    c = put(randn(rng, 4, 3), dev)
    return lambda: ops.matmul(put(randn(rng, 2, 4, 5), dev), put(randn(rng, 2, 5, 3), dev),
                              c=c, beta=1.0, out=out), [out]


def grouped_matmul_offsets_view(dev, rng):
    out = filled(dev, 6, 3)
    offsets = int_view([0, 3, 6, 6], (2,), dev)  # 2 groups read 3 offsets
    return lambda: ops.grouped_matmul(put(randn(rng, 6, 4), dev), put(randn(rng, 2, 4, 3), dev),
                                      offsets, out=out), [out]


def grouped_matmul_offsets_shape(dev, rng):
    out = filled(dev, 6, 3)
    offsets = i32([[0, 3, 6]], dev)  # [1, 3]: the right count in another shape
    return lambda: ops.grouped_matmul(put(randn(rng, 6, 4), dev), put(randn(rng, 2, 4, 3), dev),
                                      offsets, out=out), [out]


def bias_activation_backward_aux(dev, rng):
    grad_pre = filled(dev, 4, 5)
    aux = view(rng, dev, (3, 5), (4, 5))
    return lambda: ops.bias_activation_backward(put(randn(rng, 4, 5), dev), aux,
                                                activation="gelu_tanh",
                                                grad_pre=grad_pre), [grad_pre]


def softmax_out(dev, rng):
    out = filled(dev, 3, 6)
    return lambda: ops.softmax(put(randn(rng, 3, 5), dev), out=out), [out]


def softmax_view(dev, rng):
    out = filled(dev, 3, 5)
    return lambda: ops.softmax(view(rng, dev, (2, 5), (3, 5)), out=out), [out]


def softmax_backward_shapes(dev, rng):
    grad_x = filled(dev, 2, 5)
    return lambda: ops.softmax_backward(put(randn(rng, 3, 5), dev), put(randn(rng, 2, 5), dev),
                                        grad_x=grad_x), [grad_x]


def layer_norm_gamma(dev, rng):
    out = filled(dev, 3, 8)
    return lambda: ops.layer_norm(put(randn(rng, 3, 8), dev), put(randn(rng, 7), dev),
                                  out=out), [out]


def rms_norm_gamma_view(dev, rng):
    out = filled(dev, 3, 8)
    return lambda: ops.rms_norm(put(randn(rng, 3, 8), dev), view(rng, dev, (7,), (8,)),
                                out=out), [out]


def norm_backward_grad_y(dev, rng):
    grad_x = filled(dev, 3, 8)
    return lambda: ops.norm_backward(put(randn(rng, 3, 8), dev), put(randn(rng, 3, 7), dev),
                                     put(np.ones(3, np.float32), dev),
                                     grad_x=grad_x), [grad_x]


def norm_backward_rstd_view(dev, rng):
    grad_x = filled(dev, 3, 8)
    return lambda: ops.norm_backward(put(randn(rng, 3, 8), dev), put(randn(rng, 3, 8), dev),
                                     view(rng, dev, (2,), (3,)), grad_x=grad_x), [grad_x]


def binary_case(name):
    def build(dev, rng):
        out = filled(dev, 2, 3)
        wrapper = getattr(ops, name)
        a, b = put(randn(rng, 2, 3), dev), put(randn(rng, 3, 3), dev)
        if name == "binary":
            return lambda: ops.binary("add", a, b, out=out), [out]
        return lambda: wrapper(a, b, out=out), [out]
    return build


def binary_view(dev, rng):
    out = filled(dev, 2, 3)
    return lambda: ops.add(put(randn(rng, 2, 3), dev), view(rng, dev, (2, 2), (2, 3)),
                           out=out), [out]


def binary_rank(dev, rng):
    out = filled(dev, 2, 3)
    return lambda: ops.mul(put(randn(rng, 2, 3), dev), put(randn(rng, 3), dev), out=out), [out]


def unary_case(name):
    def build(dev, rng):
        out = filled(dev, 3, 5)
        x = put(randn(rng, 3, 4), dev)
        if name == "unary":
            return lambda: ops.unary(x, "silu", out=out), [out]
        return lambda: getattr(ops, name)(x, out=out), [out]
    return build


def unary_backward_grad_out(dev, rng):
    grad_x = filled(dev, 3, 4)
    return lambda: ops.unary_backward(put(randn(rng, 3, 4), dev), put(randn(rng, 3, 5), dev),
                                      "gelu_tanh", grad_x=grad_x), [grad_x]


def unary_backward_view(dev, rng):
    grad_x = filled(dev, 3, 4)
    return lambda: ops.unary_backward(put(randn(rng, 3, 4), dev), view(rng, dev, (2, 4), (3, 4)),
                                      "relu", grad_x=grad_x), [grad_x]


def swiglu_out(dev, rng):
    out = filled(dev, 3, 5)
    return lambda: ops.swiglu(put(randn(rng, 3, 8), dev), out=out), [out]


def swiglu_backward_grad_out(dev, rng):
    grad_x = filled(dev, 3, 8)
    return lambda: ops.swiglu_backward(put(randn(rng, 3, 8), dev), put(randn(rng, 3, 3), dev),
                                       grad_x=grad_x), [grad_x]


def reduce_out(dev, rng):
    out = filled(dev, 3, 2)
    return lambda: ops.reduce(put(randn(rng, 3, 4), dev), 1, out=out), [out]


def rope_positions(dev, rng):
    out = filled(dev, 1, 4, 2, 8)
    positions = i32([[0, 1, 2]], dev)
    return lambda: ops.rope(put(randn(rng, 1, 4, 2, 8), dev), positions=positions,
                            out=out), [out]


def embedding_out(dev, rng):
    out = filled(dev, 5, 3)
    return lambda: ops.embedding(i32([0, 1, 2, 3, 4], dev), put(randn(rng, 10, 4), dev),
                                 out=out), [out]


def embedding_ids_view(dev, rng):
    out = filled(dev, 5, 4)
    ids = int_view([0, 1, 2, 3, 4, 5], (4,), dev)
    return lambda: ops.embedding(ids, put(randn(rng, 10, 4), dev), out=out), [out]


def embedding_backward_grad_out(dev, rng):
    grad_table = filled(dev, 10, 4)
    return lambda: ops.embedding_backward(i32([0, 1, 2, 3, 4], dev), put(randn(rng, 4, 4), dev),
                                          grad_table), [grad_table]


def cross_entropy_labels(dev, rng):
    grad = filled(dev, 4, 5)
    return lambda: ops.cross_entropy(put(randn(rng, 4, 5), dev), i32([0, 1, 2], dev), grad=True,
                                     grad_logits=grad), [grad]


def cross_entropy_labels_view(dev, rng):
    grad = filled(dev, 4, 5)
    labels = int_view([0, 1, 2, 3, 4], (3,), dev)
    return lambda: ops.cross_entropy(put(randn(rng, 4, 5), dev), labels, grad=True,
                                     grad_logits=grad), [grad]


def adamw_grad_shape(dev, rng):
    # the same element count in another shape: AdamW would pair transposed elements
    p, m, v = filled(dev, 5, 3), filled(dev, 5, 3), filled(dev, 5, 3)
    return lambda: ops.adamw([p], [put(randn(rng, 3, 5), dev)], [m], [v], lr=1e-3,
                             step=1), [p, m, v]


def adamw_state_view(dev, rng):
    p, v = filled(dev, 6), filled(dev, 6)
    m = hal.Tensor(filled(dev, 8), (4,))
    return lambda: ops.adamw([p], [put(randn(rng, 6), dev)], [m], [v], lr=1e-3,
                             step=1), [p, v, m.buffer]


def cast_out(dev, rng):
    out = filled(dev, 4, 3)
    return lambda: ops.cast(put(randn(rng, 3, 4), dev), "bfloat16", out=out), [out]


def quantize_q(dev, rng):
    q = put(np.zeros((3, 5), np.int8), dev)
    return lambda: ops.quantize(put(randn(rng, 3, 4), dev), "int8", (1, 0), q=q), [q]


def dequantize_out(dev, rng):
    out = filled(dev, 3, 5)
    scale = put(np.ones((3, 1), np.float32), dev)
    return (lambda: ops.dequantize(put(np.ones((3, 4), np.int8), dev), scale, (1, 0), out=out),
            [out])


def scaled_matmul_scale(dev, rng):
    out = filled(dev, 2, 3)
    a = put(np.ones((2, 8), np.int8), dev)
    b = put(np.ones((3, 8), np.int8), dev)
    # b_scale per row of b needs [3, 1]; [2, 1] is a's.
    return (lambda: ops.scaled_matmul(a, put(np.ones((2, 1), np.float32), dev), b,
                                      put(np.ones((2, 1), np.float32), dev), a_blocks=(1, 0),
                                      b_blocks=(1, 0), out=out), [out])


def fake_quantize_out(dev, rng):
    out = filled(dev, 4, 3)
    scale = put(np.ones((1, 1), np.float32), dev)
    return lambda: ops.fake_quantize(put(randn(rng, 3, 4), dev), scale, out=out), [out]


def fake_quantize_backward_grad_x(dev, rng):
    grad_x = filled(dev, 4, 3)
    scale = put(np.ones((1, 1), np.float32), dev)
    return (lambda: ops.fake_quantize_backward(put(randn(rng, 3, 4), dev), scale,
                                               put(randn(rng, 3, 4), dev), grad_x=grad_x),
            [grad_x])


def permute_out(dev, rng):
    out = filled(dev, 3, 4)
    return lambda: ops.permute(put(randn(rng, 3, 4), dev), (1, 0), out=out), [out]


def dropout_out(dev, rng):
    out = filled(dev, 15)
    return lambda: ops.dropout(put(randn(rng, 16), dev), 0.5, seed=1, out=out), [out]


def attention_kv(dev, rng):
    out = filled(dev, 1, 4, 2, 8)
    return lambda: ops.attention(put(randn(rng, 1, 4, 2, 8), dev), put(randn(rng, 1, 5, 2, 8), dev),
                                 put(randn(rng, 1, 6, 2, 8), dev), out=out), [out]


def attention_cu_seqlens(dev, rng):
    # cu_seqlens_q says 3 sequences; cu_seqlens_k is a view of 3 entries of a buffer of 5
    out = filled(dev, 1, 9, 2, 8)
    cu_q = i32([0, 3, 6, 9], dev)
    cu_k = int_view([0, 3, 6, 9, 9], (3,), dev)
    return lambda: ops.attention(put(randn(rng, 1, 9, 2, 8), dev), put(randn(rng, 1, 9, 2, 8), dev),
                                 put(randn(rng, 1, 9, 2, 8), dev), cu_seqlens_q=cu_q,
                                 cu_seqlens_k=cu_k, max_seqlen_q=3, max_seqlen_k=3,
                                 out=out), [out]


def attention_block_mask(dev, rng):
    # [batch, heads, q blocks, k blocks] = [1, 2, 1, 1]; given [1, 1, 1, 2] (the same count)
    out = filled(dev, 1, 4, 2, 8)
    mask = put(np.ones((1, 1, 1, 2), np.uint8), dev)
    return lambda: ops.attention(put(randn(rng, 1, 4, 2, 8), dev), put(randn(rng, 1, 4, 2, 8), dev),
                                 put(randn(rng, 1, 4, 2, 8), dev), block_mask=mask, block_q=64,
                                 block_k=64, out=out), [out]


def attention_backward_grad_out(dev, rng):
    shape = (1, 4, 2, 8)
    q, k, v = (put(randn(rng, *shape), dev) for _ in range(3))
    out, lse = filled(dev, *shape), filled(dev, 1, 2, 4)
    return lambda: ops.attention_backward(q, k, v, out, lse, put(randn(rng, 1, 3, 2, 8), dev)), \
        [out, lse]


def topk_gating_k(dev, rng):
    logits = put(randn(rng, 4, 8), dev)
    return lambda: ops.topk_gating(logits, 9), []


# ---- the PyTorch device's ops -------------------------------------------------

UNARY_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
              "reciprocal", "sin", "cos", "tan", "tanh", "atan", "sigmoid", "erf", "erfinv",
              "abs", "neg", "sign", "floor", "ceil", "round", "trunc", "logical_not", "isnan",
              "isinf", "isfinite", "bitwise_not")
BINARY_OPS = ("pow", "fmod", "remainder", "floor_divide", "trunc_divide", "atan2", "eq", "ne",
              "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and",
              "bitwise_or", "bitwise_xor")


def unary_math_case(name):
    def build(dev, rng):
        integer = name == "bitwise_not"
        dtype = np.int32 if integer else np.float32
        out_dtype = np.bool_ if name in ("logical_not", "isnan", "isinf", "isfinite") else dtype
        x = put(np.ones((3, 4), dtype), dev)
        out = filled(dev, 3, 5, dtype=out_dtype)
        if name == "unary_math":
            return lambda: ops.unary_math("exp", put(randn(rng, 3, 4), dev), out=out), [out]
        return lambda: getattr(ops, name)(x, out=out), [out]
    return build


def binary_op_case(name):
    def build(dev, rng):
        out = filled(dev, 2, 3, dtype=np.int32)
        a, b = put(np.ones((2, 3), np.int32), dev), put(np.ones((3, 3), np.int32), dev)
        return lambda: getattr(ops, name)(a, b, out=out), [out]
    return build


def binary_scalar_out(dev, rng):
    out = filled(dev, 3, 5)
    return lambda: ops.binary_scalar("mul", put(randn(rng, 3, 4), dev), 2.0, out=out), [out]


def binary_scalar_overflow(dev, rng):
    # 1e300 is finite as a Python float and inf as the f32 operand it becomes
    out = filled(dev, 3, 4)
    return lambda: ops.mul(put(randn(rng, 3, 4), dev), 1e300, out=out), [out]


def where_shapes(dev, rng):
    out = filled(dev, 2, 3)
    cond = put(np.ones((2, 3), np.bool_), dev)
    return lambda: ops.where(cond, put(randn(rng, 3, 3), dev), 0.0, out=out), [out]


def where_scalar_overflow(dev, rng):
    out = filled(dev, 2, 3, dtype=np.float16)
    cond = put(np.ones((2, 3), np.bool_), dev)
    x = put(np.ones((2, 3), np.float16), dev)
    return lambda: ops.where(cond, x, 1e5, out=out), [out]  # f16's largest is 65504


def clamp_bound_shape(dev, rng):
    out = filled(dev, 3, 4)
    return lambda: ops.clamp(put(randn(rng, 3, 4), dev), min=put(randn(rng, 3, 5), dev),
                             out=out), [out]


def clamp_bound_overflow(dev, rng):
    out = filled(dev, 3, 4)
    return lambda: ops.clamp(put(randn(rng, 3, 4), dev), max=1e39, out=out), [out]


def scan_case(name):
    def build(dev, rng):
        out = filled(dev, 3, 5)
        return lambda: getattr(ops, name)(put(randn(rng, 3, 4), dev), 1, out=out), [out]
    return build


def gather_index(dev, rng):
    out = filled(dev, 3, 5)
    index = put(np.zeros((3, 5), np.int64), dev)
    return lambda: ops.gather(put(randn(rng, 3, 4), dev), 0, index, out=out), [out]


def index_select_out(dev, rng):
    out = filled(dev, 2, 5)
    index = int_view([0, 1, 2, 2, 2], (2,), dev)
    return lambda: ops.index_select(put(randn(rng, 3, 4), dev), 0, index, out=out), [out]


def scatter_case(name):
    def build(dev, rng):
        out = filled(dev, 3, 4)
        index = put(np.zeros((3, 5), np.int64), dev)
        return lambda: getattr(ops, name)(out, 0, index, put(randn(rng, 3, 5), dev)), [out]
    return build


def index_update_case(name):
    # a 1-D index of 2 (a view of a buffer of 5) for a source of 3 along the axis: spread to
    # the source's shape, its third entry would be read past the view
    def build(dev, rng):
        out = filled(dev, 3, 4)
        index = int_view([0, 1, 2, 2, 2], (2,), dev)
        return lambda: getattr(ops, name)(out, 0, index, put(randn(rng, 3, 4), dev)), [out]
    return build


def cat_inputs(dev, rng):
    out = filled(dev, 4, 3)
    return lambda: ops.cat([put(randn(rng, 2, 3), dev), put(randn(rng, 2, 4), dev)], 0,
                           out=out), [out]


def fill_overflow(dev, rng):
    out = filled(dev, 4)
    return lambda: ops.fill(out, 1e300), [out]


def full_overflow(dev, rng):
    return lambda: ops.full((4,), 70000.0, "float16", dev), []


def arange_last_overflow(dev, rng):
    # 0, 1e38, ... 4e38: the last two are past f32's range (they would be inf)
    return lambda: ops.arange(0.0, 5e38, 1e38, dtype="float32", device=dev), []


def arg_case(name):
    def build(dev, rng):
        out = filled(dev, 3, 2, dtype=np.int64)
        return lambda: getattr(ops, name)(put(randn(rng, 3, 4), dev), 1, out=out), [out]
    return build


CASES = [
    ("matmul", "a and b batch 2 vs 3", matmul_batch),
    ("matmul", "c batch 2 for d batch 3", matmul_c_batch),
    ("matmul", "c batch 3 for d batch 2", matmul_c_larger_batch),
    ("matmul", "b a view of 2 of 3 matrices", matmul_view_batch),
    ("matmul", "a rank 2, b rank 3", matmul_rank),
    ("matmul", "c rank 2, d rank 3", matmul_c_rank),
    ("grouped_matmul", "offsets a view of 2 of 4", grouped_matmul_offsets_view),
    ("grouped_matmul", "offsets [1, 3] for [3]", grouped_matmul_offsets_shape),
    ("bias_activation_backward", "aux a view of 3 of 4 rows", bias_activation_backward_aux),
    ("softmax", "out of another shape", softmax_out),
    ("softmax", "x a view of 2 of 3 rows", softmax_view),
    ("softmax_backward", "y and grad_y", softmax_backward_shapes),
    ("layer_norm", "gamma [7] for n = 8", layer_norm_gamma),
    ("rms_norm", "gamma a view of 7 of 8", rms_norm_gamma_view),
    ("norm_backward", "grad_y [3, 7] for x [3, 8]", norm_backward_grad_y),
    ("norm_backward", "rstd a view of 2 of 3", norm_backward_rstd_view),
    *[(name, "a [2, 3] and b [3, 3]", binary_case(name))
      for name in ("binary", "add", "sub", "mul", "div", "maximum", "minimum")],
    ("add", "b a view [2, 2] of [2, 3]", binary_view),
    ("mul", "b of another rank", binary_rank),
    *[(name, "out of another shape", unary_case(name))
      for name in ("unary", "relu", "gelu", "silu")],
    ("unary_backward", "grad_out of another shape", unary_backward_grad_out),
    ("unary_backward", "grad_out a view of 2 of 3 rows", unary_backward_view),
    ("swiglu", "out [3, 5] for x [3, 8]", swiglu_out),
    ("swiglu_backward", "grad_out [3, 3] for x [3, 8]", swiglu_backward_grad_out),
    ("reduce", "out [3, 2] for a sum over axis 1", reduce_out),
    ("rope", "positions [1, 3] for seq 4", rope_positions),
    ("embedding", "out dim 3 for a table of dim 4", embedding_out),
    ("embedding", "ids a view of 4 of 6 for out of 5 rows", embedding_ids_view),
    ("embedding_backward", "grad_out of 4 rows for 5 ids", embedding_backward_grad_out),
    ("cross_entropy", "3 labels for 4 rows", cross_entropy_labels),
    ("cross_entropy", "labels a view of 3 of 5", cross_entropy_labels_view),
    ("adamw", "grad [3, 5] for param [5, 3]", adamw_grad_shape),
    ("adamw", "m a view of 4 of 8 for 6 elements", adamw_state_view),
    ("cast", "out [4, 3] for x [3, 4]", cast_out),
    ("permute", "out [3, 4] for the transpose of [3, 4]", permute_out),
    ("quantize", "q [3, 5] for x [3, 4]", quantize_q),
    ("dequantize", "out [3, 5] for q [3, 4]", dequantize_out),
    ("scaled_matmul", "b_scale [2, 1] for b [3, 8] per row", scaled_matmul_scale),
    ("fake_quantize", "out [4, 3] for x [3, 4]", fake_quantize_out),
    ("fake_quantize_backward", "grad_x [4, 3] for x [3, 4]", fake_quantize_backward_grad_x),
    ("dropout", "out of 15 for x of 16", dropout_out),
    ("attention", "k and v of other lengths", attention_kv),
    ("attention", "cu_seqlens_k a view of 3 for 4", attention_cu_seqlens),
    ("attention", "block mask of another shape", attention_block_mask),
    ("attention_backward", "grad_out of another length", attention_backward_grad_out),
    ("topk_gating", "k above the experts", topk_gating_k),
    *[(name, "out of another shape", unary_math_case(name)) for name in UNARY_MATH],
    ("unary_math", "out of another shape", unary_math_case("unary_math")),
    *[(name, "a [2, 3] and b [3, 3]", binary_op_case(name)) for name in BINARY_OPS],
    ("binary_scalar", "out of another shape", binary_scalar_out),
    ("binary_scalar", "s = 1e300 for an f32 operand", binary_scalar_overflow),
    ("where", "a [3, 3] for cond [2, 3]", where_shapes),
    ("where", "1e5 into f16", where_scalar_overflow),
    ("clamp", "a min tensor of another shape", clamp_bound_shape),
    ("clamp", "max = 1e39 in f32", clamp_bound_overflow),
    ("cumsum", "out of another shape", scan_case("cumsum")),
    ("cumprod", "out of another shape", scan_case("cumprod")),
    ("gather", "index wider than x", gather_index),
    ("index_select", "out of another shape (index a view)", index_select_out),
    ("scatter", "index wider than out", scatter_case("scatter")),
    ("scatter_add", "index wider than out", scatter_case("scatter_add")),
    ("index_add", "an index view of 2 for a source of 3", index_update_case("index_add")),
    ("index_copy", "an index view of 2 for a source of 3", index_update_case("index_copy")),
    ("cat", "an input of another extent off the axis", cat_inputs),
    ("fill", "1e300 into f32", fill_overflow),
    ("full", "70000 into f16", full_overflow),
    ("arange", "0..4e38 by 1e38 into float32", arange_last_overflow),
    ("argmax", "out of another shape", arg_case("argmax")),
    ("argmin", "out of another shape", arg_case("argmin")),
]

# What hal.ops exports besides the op wrappers.
NOT_WRAPPERS = {"OPS", "plan", "clear_cache", "CrossEntropy", "IndexOutOfRange"}


def test_every_wrapper_has_a_case():
    wrappers = set(ops.__all__) - NOT_WRAPPERS
    covered = {name for name, _, _ in CASES}
    assert wrappers - covered == set(), "add a mismatched-shape case for each new hal.ops wrapper"


@pytest.mark.parametrize("name,label,build", CASES, ids=[f"{n}: {lb}" for n, lb, _ in CASES])
def test_mismatched_shapes_and_views_raise_and_write_nothing(dev, rng, name, label, build):
    call, outputs = build(dev, rng)
    before = [o.to_numpy().copy() for o in outputs]
    with pytest.raises((ValueError, hal.Error)) as raised:
        call()
    dev.synchronize()
    assert str(raised.value), "the error says why"
    for buffer, held in zip(outputs, before):
        np.testing.assert_array_equal(buffer.to_numpy(), held, err_msg=f"{name}: {label}")


def test_the_issues_cases_raise_instead_of_using_part_of_an_operand(dev, rng):
    # a [2,4,5] with b [3,5,3] was a @ b[:2]; c [3,4,3] with d [2,4,3] added c[:2]
    with pytest.raises(ValueError, match=r"do not broadcast: dimension 0 is 2 and 3"):
        ops.matmul(put(randn(rng, 2, 4, 5), dev), put(randn(rng, 3, 5, 3), dev))
    with pytest.raises(ValueError, match=r"c \(3, 4, 3\) does not broadcast to \(2, 4, 3\)"):
        ops.matmul(put(randn(rng, 2, 4, 5), dev), put(randn(rng, 2, 5, 3), dev),
                   c=put(randn(rng, 3, 4, 3), dev), beta=1.0)
    with pytest.raises(hal.InvalidArgumentError, match=r"has shape \(2,\); the plan reads \(3,\)"):
        ops.grouped_matmul(put(randn(rng, 6, 4), dev), put(randn(rng, 2, 4, 3), dev),
                           int_view([0, 3, 6, 6], (2,), dev))


def test_broadcasting_that_fits_still_works(dev, rng):
    # extent 1 repeats with stride 0 (a view of one matrix of a larger buffer included)
    a, b = randn(rng, 3, 4, 5), randn(rng, 1, 5, 2)
    np.testing.assert_allclose(ops.matmul(put(a, dev), put(b, dev)).to_numpy(), a @ b,
                               rtol=2e-5, atol=2e-5)
    base = randn(rng, 3, 5, 2)
    one = hal.Tensor(put(base, dev), (1, 5, 2))
    np.testing.assert_allclose(ops.matmul(put(a, dev), one).to_numpy(), a @ base[:1],
                               rtol=2e-5, atol=2e-5)
    c = randn(rng, 1, 4, 2)
    got = ops.matmul(put(a, dev), put(b, dev), c=put(c, dev), beta=1.0).to_numpy()
    np.testing.assert_allclose(got, a @ b + c, rtol=2e-5, atol=2e-5)
    x, y = randn(rng, 2, 1), randn(rng, 1, 3)
    np.testing.assert_allclose(ops.add(put(x, dev), put(y, dev)).to_numpy(), x + y, rtol=1e-6)
    offsets = int_view([0, 3, 6, 99], (3,), dev)  # exactly groups + 1 of a larger buffer
    got = ops.grouped_matmul(put(a[0, :4, :4].copy(), dev), put(randn(rng, 2, 4, 3), dev),
                             offsets)
    assert got.shape == (4, 3)


def test_f32_fields_that_f32_cannot_hold_are_refused(dev, rng):
    # 1e300 is finite as a Python float and inf as the descriptor's f32
    x = put(randn(rng, 4), dev)
    with pytest.raises(hal.InvalidArgumentError, match="'alpha' is 1e\\+300, which overflows f32"):
        ops.unary(x, "relu", alpha=1e300)
    with pytest.raises(hal.InvalidArgumentError, match="'epsilon' is 1e-50, which f32 cannot"):
        ops.layer_norm(put(randn(rng, 2, 4), dev), eps=1e-50)
    with pytest.raises(hal.InvalidArgumentError, match="desc->alpha is inf"):
        ops.unary(x, "relu", alpha=float("inf"))
    with pytest.raises(hal.InvalidArgumentError, match="scalar 0 \\(lr\\) is 1e\\+300"):
        p, g, m, v = (put(np.ones(4, np.float32), dev) for _ in range(4))
        ops.adamw([p], [g], [m], [v], lr=1e300, step=1)
    np.testing.assert_array_equal(p.to_numpy(), np.ones(4, np.float32))
