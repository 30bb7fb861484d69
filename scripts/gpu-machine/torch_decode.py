"""PyTorch + CUDA graphs decoding the shape `crossgpu decode --preset 27b` decodes, the competitor
of docs/BENCHMARKS.md "27B-class decode" (issue 33): a llama layer stack in f16 (hidden 5120,
FFN 17408, 40 query / 8 KV heads of 128, vocabulary 32000; LAYERS, default 64), laid out as
gpt-fast lays it out (q/k/v fused into one matrix, gate/up into one, a static KV cache of
MAX_SEQ = 256 positions), random weights, greedy tokens; one CUDA graph per token (captured
once, replayed for every token, the position in a device tensor as crossgpu keeps it). Prints
tokens/s over TOKENS (default 64) after a warm-up, and the weights streamed per second.

    python3 scripts/gpu-machine/torch_decode.py [TOKENS] [LAYERS]
"""
import sys
import time

import torch

HIDDEN, FFN, QH, KVH, DIM, VOCAB, MAX_SEQ, EPS = 5120, 17408, 40, 8, 128, 32000, 256, 1e-5


def rmsnorm(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rope(x, pos):
    # x: [heads, DIM]; rotates the pairs (i, i + DIM/2) by pos * base^(-2i/DIM).
    half = DIM // 2
    inv = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) * 2 / DIM)
    ang = pos.float() * inv
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[:, :half], x[:, half:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


class Model:
    def __init__(self, layers):
        dev, dt = "cuda", torch.float16
        g = torch.Generator(device=dev).manual_seed(7)

        def w(*shape):
            return (torch.rand(*shape, generator=g, device=dev, dtype=dt) - 0.5) * (2.0 / shape[-1] ** 0.5)

        self.embed = w(VOCAB, HIDDEN)
        self.layers = []
        for _ in range(layers):
            self.layers.append(
                dict(
                    attn_norm=torch.ones(HIDDEN, device=dev, dtype=dt),
                    wqkv=w((QH + 2 * KVH) * DIM, HIDDEN),
                    wo=w(HIDDEN, QH * DIM),
                    mlp_norm=torch.ones(HIDDEN, device=dev, dtype=dt),
                    w13=w(2 * FFN, HIDDEN),
                    w2=w(HIDDEN, FFN),
                    k=torch.zeros(KVH, MAX_SEQ, DIM, device=dev, dtype=dt),
                    v=torch.zeros(KVH, MAX_SEQ, DIM, device=dev, dtype=dt),
                )
            )
        self.norm = torch.ones(HIDDEN, device=dev, dtype=dt)
        self.head = w(VOCAB, HIDDEN)
        self.token = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.weight_bytes = sum(
            t.numel() * t.element_size()
            for l in self.layers
            for k, t in l.items()
            if k in ("wqkv", "wo", "w13", "w2")
        ) + self.head.numel() * 2

    def step(self):
        """One token from self.token at self.pos; writes the next token and advances pos."""
        x = self.embed.index_select(0, self.token).view(-1)  # no host sync: graph-safe
        positions = torch.arange(MAX_SEQ, device=x.device)
        mask = positions <= self.pos[0]
        for l in self.layers:
            h = rmsnorm(x, l["attn_norm"])
            qkv = l["wqkv"] @ h
            q = qkv[: QH * DIM].view(QH, DIM)
            k = qkv[QH * DIM : (QH + KVH) * DIM].view(KVH, DIM)
            v = qkv[(QH + KVH) * DIM :].view(KVH, DIM)
            q, k = rope(q, self.pos), rope(k, self.pos)
            l["k"].index_copy_(1, self.pos, k.unsqueeze(1))
            l["v"].index_copy_(1, self.pos, v.unsqueeze(1))
            o = torch.nn.functional.scaled_dot_product_attention(
                q.view(1, QH, 1, DIM),
                l["k"].view(1, KVH, MAX_SEQ, DIM),
                l["v"].view(1, KVH, MAX_SEQ, DIM),
                attn_mask=mask.view(1, 1, 1, MAX_SEQ),
                enable_gqa=True,
            ).reshape(-1)
            x = x + l["wo"] @ o
            h = rmsnorm(x, l["mlp_norm"])
            gu = l["w13"] @ h
            a = torch.nn.functional.silu(gu[:FFN]) * gu[FFN:]
            x = x + l["w2"] @ a
        logits = self.head @ rmsnorm(x, self.norm)
        self.token.copy_(torch.argmax(logits).view(1))
        self.pos.add_(1)


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    m = Model(layers)
    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):  # warm-up (cuBLAS picks its kernels) before the capture
                m.step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            m.step()
        m.pos.zero_()
        m.token.fill_(1)
        for _ in range(8):
            graph.replay()
        m.pos.zero_()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(tokens):
            graph.replay()
        torch.cuda.synchronize()
        s = time.perf_counter() - t
    print(
        f"pytorch {torch.__version__} + CUDA graphs, {layers} layers: {tokens / s:.2f} tokens/s, "
        f"{m.weight_bytes / 1e9:.1f} GB of weights per token at {m.weight_bytes * tokens / s / 1e12:.2f} TB/s; "
        f"last token {int(m.token.item())}"
    )


if __name__ == "__main__":
    main()
