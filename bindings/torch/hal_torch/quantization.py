"""int8 deployment on HAL's low-precision ops (SPEC.md §17.6: HAL_OP_QUANTIZE, HAL_OP_SCALED_MATMUL).

Fake quantization for training needs nothing from here: ``torch.fake_quantize_per_tensor_affine``,
``torch.fake_quantize_per_channel_affine``, their learnable (LSQ) forms and
``torch.ao.quantization``'s fake-quantize modules run on HAL's fake-quantize op for ``hal``
tensors (bindings/torch/README.md says which cases). This module is the deployment side: weights
and activations quantized to int8 and linear layers run as HAL's int8 scaled matmul.
"""
from __future__ import annotations

import torch

from . import _C  # noqa: F401  (registers the hal_torch operators)

__all__ = ["quantize_int8", "scaled_matmul", "Int8Linear"]


def quantize_int8(x: torch.Tensor, blocks: tuple[int, int] = (0, 0),
                  scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` (a hal tensor viewed as [rows, cols], cols its last dimension) as
    int8 codes with one f32 scale per block of ``blocks`` = (rows, cols) elements (0: the whole
    dimension; (1, 0) is per row, i.e. per output channel of a weight [n, k]). Without ``scale``
    each block's scale is amax / 127; with it, those scales are used (static scaling)."""
    return torch.ops.hal_torch.quantize_int8(x, int(blocks[0]), int(blocks[1]), scale)


def scaled_matmul(a: torch.Tensor, a_scale: torch.Tensor, a_blocks: tuple[int, int],
                  b: torch.Tensor, b_scale: torch.Tensor, b_blocks: tuple[int, int],
                  out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(a * a_scale) @ (b * b_scale).T`` for int8 ``a`` [m, k] and ``b`` [n, k] and their block
    scales; int8 products summed exactly in i32, then scaled in f32."""
    return torch.ops.hal_torch.scaled_matmul(a, a_scale, int(a_blocks[0]), int(a_blocks[1]), b,
                                             b_scale, int(b_blocks[0]), int(b_blocks[1]),
                                             out_dtype)


class Int8Linear(torch.nn.Module):
    """A linear layer deployed in int8: weights quantized once per output channel (amax / 127),
    the input quantized per tensor with a fixed scale (learned in quantization-aware training),
    and the product run as HAL's int8 scaled matmul; the bias added in f32."""

    def __init__(self, linear: torch.nn.Linear, input_scale: torch.Tensor | float) -> None:
        super().__init__()
        weight = linear.weight.detach()
        q, s = quantize_int8(weight, (1, 0))
        self.register_buffer("weight_q", q)
        self.register_buffer("weight_scale", s)
        self.register_buffer(
            "input_scale",
            torch.as_tensor(input_scale, dtype=torch.float32).detach().reshape(1, 1)
            .to(weight.device).clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach())
        self.out_features = weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        xq, _ = quantize_int8(rows, (0, 0), self.input_scale)
        y = scaled_matmul(xq, self.input_scale, (0, 0), self.weight_q, self.weight_scale, (1, 0))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
