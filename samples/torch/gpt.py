"""A GPT in the style of GPT-2 (Radford et al., 2019) and nanoGPT, written for HAL's samples,
tests and benchmarks from the published architecture.

Pre-norm transformer blocks (LayerNorm, causal multi-head self-attention through
``F.scaled_dot_product_attention``, residual; LayerNorm, a 4x MLP with tanh-approximated GELU,
residual), learned token and position embeddings, a final LayerNorm and an output projection
tied to the token embedding. Weights start normal(0, 0.02), the two residual projections of
each block scaled by 1/sqrt(2 * layers) as GPT-2 does. Plain PyTorch: the same code runs on
any device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 256
    context: int = 128
    layers: int = 4
    heads: int = 4
    width: int = 128
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.width % config.heads == 0
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=config.bias)
        self.proj = nn.Linear(config.width, config.width, bias=config.bias)
        self.proj.residual = True
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # [batch, time, heads, head dim] seen as [batch, heads, time, head dim]: no copy.
        q, k, v = (t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(batch, time, width)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.width, 4 * config.width, bias=config.bias)
        self.proj = nn.Linear(4 * config.width, config.width, bias=config.bias)
        self.proj.residual = True
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.width, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.width, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.width)
        self.wpe = nn.Embedding(config.context, config.width)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.width, bias=config.bias)
        self.head = nn.Linear(config.width, config.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            std = 0.02 / math.sqrt(2 * self.config.layers) if getattr(module, "residual", False) \
                else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        batch, time = idx.shape
        assert time <= self.config.context, f"sequence of {time} > context {self.config.context}"
        pos = torch.arange(0, time, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def optimizer(self, lr: float, weight_decay: float, fused: bool) -> torch.optim.AdamW:
        """AdamW with decay on matrices and embeddings, none on biases and norms (GPT-2)."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def batches(data: torch.Tensor, context: int, batch: int, generator: torch.Generator):
    """Endless (inputs, targets) of random windows of a 1-D token tensor."""
    while True:
        starts = torch.randint(len(data) - context - 1, (batch,), generator=generator)
        x = torch.stack([data[s:s + context] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + 1 + context] for s in starts.tolist()])
        yield x, y


def corpus(path: str = "/usr/share/common-licenses") -> torch.Tensor:
    """Bytes of the text files under |path| as a uint8 token tensor (vocabulary 256)."""
    import os
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
        text = b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    else:
        text = open(path, "rb").read()
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
