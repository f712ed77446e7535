"""A mypy plugin for @hal.kernel code: ``plugins = hal.mypy_plugin`` in the mypy configuration.

Kernel parameters are annotated ``hal.f32[:]`` (an array) and ``hal.i32`` (a scalar). A slice is
not a type expression to mypy, so without this plugin every array parameter is an error. With
it, ``hal.T[:]`` is an array of Python numbers (``hal._kernel.Array[float]`` for the float
types, ``Array[int]`` for the integer ones), and ``hal.T`` alone is ``float`` or ``int``, which
is what the kernel's arithmetic, comparisons and indices check against.
"""
from __future__ import annotations

from typing import Callable

from mypy.plugin import AnalyzeTypeContext, Plugin
from mypy.types import Type

_FLOATS = {"f32", "f64", "f16", "bf16"}
_INTS = {"i32", "u32", "i64", "u64"}
_MODULES = ("hal._kernel", "hal")


def _kernel_type(ctx: AnalyzeTypeContext) -> Type:
    short = ctx.type.name.rsplit(".", 1)[-1]
    number = ctx.api.named_type("builtins.float" if short in _FLOATS else "builtins.int", [])
    if not ctx.type.args:
        return number
    # hal.T[:] (the only subscript the kernel language has; the translator refuses others).
    return ctx.api.named_type("hal._kernel.Array", [number])


class _KernelPlugin(Plugin):
    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        module, _, name = fullname.rpartition(".")
        if module in _MODULES and name in _FLOATS | _INTS:
            return _kernel_type
        return None


def plugin(version: str) -> type[Plugin]:
    return _KernelPlugin
