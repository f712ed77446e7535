#!/usr/bin/env python3
"""Kernels written in Python with @hal.kernel: a tiled matmul and a flash-attention forward,
run on every device that compiles dialect source and checked against numpy.

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu,opencl python3 samples/python/kernels_in_python.py

HAND_WRITTEN holds the same two kernels written in the dialect by hand, which
bench/python/kernel_vs_dialect.py times beside these.
"""
import numpy as np

import hal

TILE = 16  # matmul: the block is TILE x TILE work-items, one output element each
D = 64  # attention: the head dimension
BLOCK = 64  # attention: query rows per block, and keys per shared tile


@hal.kernel(max_block=TILE * TILE)
def matmul(a: hal.f32[:], b: hal.f32[:], c: hal.f32[:], m: hal.i32, n: hal.i32, k: hal.i32):
    """c (m x n) = a (m x k) @ b (k x n), row-major, any sizes."""
    a_tile = hal.shared(hal.f32, (TILE, TILE))
    b_tile = hal.shared(hal.f32, (TILE, TILE))
    tx = hal.local_id(0)
    ty = hal.local_id(1)
    col = hal.group_id(0) * TILE + tx
    row = hal.group_id(1) * TILE + ty
    acc = 0.0
    for k0 in range(0, k, TILE):
        a_tile[ty, tx] = a[row * k + k0 + tx] if row < m and k0 + tx < k else 0.0
        b_tile[ty, tx] = b[(k0 + ty) * n + col] if col < n and k0 + ty < k else 0.0
        hal.barrier()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        hal.barrier()
    if row < m and col < n:
        c[row * n + col] = acc


@hal.kernel(max_block=BLOCK)
def attention(q: hal.f32[:], k: hal.f32[:], v: hal.f32[:], out: hal.f32[:], s: hal.i32,
              scale: hal.f32):
    """out = softmax(scale q k^T) v for one head, [s, D] row-major; one work-item per query
    row, keys and values staged through shared memory BLOCK rows at a time, online softmax."""
    k_tile = hal.shared(hal.f32, (BLOCK, D))
    v_tile = hal.shared(hal.f32, (BLOCK, D))
    q_row = hal.private(hal.f32, D)
    acc = hal.private(hal.f32, D)
    t = hal.local_id(0)
    row = hal.group_id(0) * BLOCK + t
    for d in range(D):
        q_row[d] = q[row * D + d] * scale if row < s else 0.0
        acc[d] = 0.0
    running_max = -hal.inf
    running_sum = 0.0
    for k0 in range(0, s, BLOCK):
        for d in range(D):  # each work-item stages one key row and one value row
            k_tile[t, d] = k[(k0 + t) * D + d] if k0 + t < s else 0.0
            v_tile[t, d] = v[(k0 + t) * D + d] if k0 + t < s else 0.0
        hal.barrier()
        for j in range(min(BLOCK, s - k0)):
            score = 0.0
            for d in range(D):
                score += q_row[d] * k_tile[j, d]
            new_max = max(running_max, score)
            correction = hal.exp(running_max - new_max)
            p = hal.exp(score - new_max)
            running_sum = running_sum * correction + p
            for d in range(D):
                acc[d] = acc[d] * correction + p * v_tile[j, d]
            running_max = new_max
        hal.barrier()
    if row < s:
        for d in range(D):
            out[row * D + d] = acc[d] / running_sum


HAND_WRITTEN = f"""
#define TILE {TILE}
#define D {D}
#define BLOCK {BLOCK}
kernel max_block(256) void matmul_hand(global const float* a, global const float* b,
                                       global float* c, int m, int n, int k) {{
  shared float a_tile[TILE][TILE];
  shared float b_tile[TILE][TILE];
  int tx = local_id(0), ty = local_id(1);
  int col = group_id(0) * TILE + tx;
  int row = group_id(1) * TILE + ty;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += TILE) {{
    a_tile[ty][tx] = (row < m && k0 + tx < k) ? a[row * k + k0 + tx] : 0.0f;
    b_tile[ty][tx] = (col < n && k0 + ty < k) ? b[(k0 + ty) * n + col] : 0.0f;
    barrier();
    for (int kk = 0; kk < TILE; ++kk) acc += a_tile[ty][kk] * b_tile[kk][tx];
    barrier();
  }}
  if (row < m && col < n) c[row * n + col] = acc;
}}

kernel max_block(64) void attention_hand(global const float* q, global const float* k,
                                         global const float* v, global float* out, int s,
                                         float scale) {{
  shared float k_tile[BLOCK][D];
  shared float v_tile[BLOCK][D];
  float q_row[D], acc[D];
  int t = local_id(0);
  int row = group_id(0) * BLOCK + t;
  for (int d = 0; d < D; ++d) {{
    q_row[d] = row < s ? q[row * D + d] * scale : 0.0f;
    acc[d] = 0.0f;
  }}
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int k0 = 0; k0 < s; k0 += BLOCK) {{
    for (int d = 0; d < D; ++d) {{
      k_tile[t][d] = k0 + t < s ? k[(k0 + t) * D + d] : 0.0f;
      v_tile[t][d] = k0 + t < s ? v[(k0 + t) * D + d] : 0.0f;
    }}
    barrier();
    int keys = min(BLOCK, s - k0);
    for (int j = 0; j < keys; ++j) {{
      float score = 0.0f;
      for (int d = 0; d < D; ++d) score += q_row[d] * k_tile[j][d];
      float new_max = fmax(running_max, score);
      float correction = exp(running_max - new_max);
      float p = exp(score - new_max);
      running_sum = running_sum * correction + p;
      for (int d = 0; d < D; ++d) acc[d] = acc[d] * correction + p * v_tile[j][d];
      running_max = new_max;
    }}
    barrier();
  }}
  if (row < s)
    for (int d = 0; d < D; ++d) out[row * D + d] = acc[d] / running_sum;
}}
"""


def reference_attention(q, k, v, scale):
    scores = (q.astype(np.float64) @ k.T.astype(np.float64)) * scale
    scores -= scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def main():
    rng = np.random.default_rng(7)
    failed = 0
    for device in hal.devices():
        m, n, k = 100, 70, 45
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = hal.empty((m, n), np.float32, device)
        matmul.launch(((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), (TILE, TILE),
                      hal.to_device(a, device), hal.to_device(b, device), c, m, n, k)
        matmul_error = np.abs(c.to_numpy() - a @ b).max()
        s = 150
        q, kk, v = (rng.standard_normal((s, D), dtype=np.float32) for _ in range(3))
        out = hal.empty((s, D), np.float32, device)
        scale = float(1 / np.sqrt(D))
        attention.launch((s + BLOCK - 1) // BLOCK, BLOCK, hal.to_device(q, device),
                         hal.to_device(kk, device), hal.to_device(v, device), out, s, scale)
        attention_error = np.abs(out.to_numpy() - reference_attention(q, kk, v, scale)).max()
        ok = matmul_error < 1e-3 and attention_error < 1e-4
        failed += not ok
        print(f"device {device.index} ({device.properties.name}): matmul max error "
              f"{matmul_error:.2e}, attention max error {attention_error:.2e}: "
              f"{'ok' if ok else 'FAILED'}")
    print(f"kernels_in_python: {len(hal.devices())} device(s) ran, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
