"""all-MiniLM-L6-v2's architecture as a plain PyTorch module (BERT encoder: embeddings and
LayerNorm, 6 layers of 12-head self-attention and a GELU feed-forward, each with a residual and
LayerNorm; mean pooling over the attention mask; L2 normalisation), for machines that have
torch but not transformers and the packaged weights (the GPU machine of
benchmarks/gpu_device_check.sh).

`MiniLMPlain.from_state_dict(model_state)` takes the real model's weights (HF key names) where
the package is installed; `MiniLMPlain.random(seed)` draws weights of the same shapes (normal,
std 0.02, LayerNorm 1 and 0, as BERT initialises), so its speed is the model's. The module
equals the packaged model on its weights (tests/frontends/test_minilm.py checks it within 1e-6).
"""

from __future__ import annotations

import math

CONFIG = {
    "vocab": 30522,
    "hidden": 384,
    "layers": 6,
    "heads": 12,
    "intermediate": 1536,
    "positions": 512,
    "types": 2,
    "eps": 1e-12,
}


def _module_class():
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, c: dict) -> None:
            super().__init__()
            h, i = c["hidden"], c["intermediate"]
            self.heads = c["heads"]
            self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
            self.ln1 = nn.LayerNorm(h, eps=c["eps"])
            self.up, self.down = nn.Linear(h, i), nn.Linear(i, h)
            self.ln2 = nn.LayerNorm(h, eps=c["eps"])

        def forward(self, x, bias):
            b, s, h = x.shape
            dh = h // self.heads

            def split(t):
                return t.view(b, s, self.heads, dh).transpose(1, 2)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh) + bias
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            ctx = ctx.transpose(1, 2).reshape(b, s, h)
            x = self.ln1(self.o(ctx) + x)
            return self.ln2(self.down(nn.functional.gelu(self.up(x))) + x)

    class MiniLMPlain(nn.Module):
        def __init__(self, c: dict | None = None) -> None:
            super().__init__()
            c = dict(CONFIG if c is None else c)
            self.words = nn.Embedding(c["vocab"], c["hidden"])
            self.positions = nn.Embedding(c["positions"], c["hidden"])
            self.types = nn.Embedding(c["types"], c["hidden"])
            self.ln = nn.LayerNorm(c["hidden"], eps=c["eps"])
            self.layers = nn.ModuleList(Layer(c) for _ in range(c["layers"]))

        def forward(self, input_ids, token_type_ids, attention_mask):
            s = input_ids.shape[1]
            pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
            x = self.words(input_ids) + self.types(token_type_ids) + self.positions(pos)
            x = self.ln(x)
            mask = attention_mask.to(x.dtype)
            bias = ((1.0 - mask) * torch.finfo(x.dtype).min)[:, None, None, :]
            for layer in self.layers:
                x = layer(x, bias)
            m = mask.unsqueeze(-1)
            pooled = (x * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
            return nn.functional.normalize(pooled, p=2, dim=1)

        @classmethod
        def random(cls, seed: int = 0, config: dict | None = None) -> MiniLMPlain:
            torch.manual_seed(seed)
            model = cls(config)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith(".weight") and p.dim() == 2:
                        p.normal_(0.0, 0.02)
                    elif name.endswith(".bias"):
                        p.normal_(0.0, 0.02)
            return model.eval()

        @classmethod
        def from_state_dict(cls, hf: dict) -> MiniLMPlain:
            """From a BertModel's state dict (keys as transformers names them)."""
            model = cls()
            ours = {
                "words.weight": "embeddings.word_embeddings.weight",
                "positions.weight": "embeddings.position_embeddings.weight",
                "types.weight": "embeddings.token_type_embeddings.weight",
                "ln.weight": "embeddings.LayerNorm.weight",
                "ln.bias": "embeddings.LayerNorm.bias",
            }
            parts = {
                "q": "attention.self.query",
                "k": "attention.self.key",
                "v": "attention.self.value",
                "o": "attention.output.dense",
                "ln1": "attention.output.LayerNorm",
                "up": "intermediate.dense",
                "down": "output.dense",
                "ln2": "output.LayerNorm",
            }
            for n in range(len(model.layers)):
                for ours_part, theirs in parts.items():
                    for w in ("weight", "bias"):
                        ours[f"layers.{n}.{ours_part}.{w}"] = f"encoder.layer.{n}.{theirs}.{w}"
            model.load_state_dict({k: hf[v] for k, v in ours.items()})
            return model.eval()

    return MiniLMPlain


def __getattr__(name: str):
    if name == "MiniLMPlain":
        return _module_class()
    raise AttributeError(name)
