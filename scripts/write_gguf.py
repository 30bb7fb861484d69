#!/usr/bin/env python3
"""Writes a synthetic llama-architecture GGUF checkpoint of crossgpu's decoder presets (random
values), in F16 or a quantized type, with llama.cpp's own writer and quantizers (the `gguf`
package: `pip install gguf`, which needs numpy). For decode benchmarks of checkpoints read from
disk (`crossgpu decode --model FILE`) and for llama.cpp's `llama-bench` on the same file.

    python3 scripts/write_gguf.py --shape 27b --layers 16 --type q4_1 --out /tmp/27b-16-q4_1.gguf

Every layer holds the same random matrices (one layer is drawn and quantized, then written
`--layers` times): a decode streams each layer's bytes from their own addresses either way, and
the file is written in seconds. The output projection is its own tensor (untied embeddings);
the vocabulary is `<t0>`, `<t1>`, ... (no tokenizer merges: not for `crossgpu generate`).

`--type q4_k_m` lays the file out as llama.cpp's Q4_K_M: Q4_K matrices, Q6_K for `attn_v` and
`ffn_down` in the layers llama.cpp gives more bits (the first and last eighth, every third
between) and for the output. The `gguf` package cannot quantize k-quants, so these blocks are
drawn at random (uniform quants and 6-bit scales, d and dmin sized for values near
sqrt(3 / cols)): valid blocks of the same bytes, for timing, not a quantized matrix.
"""
import argparse

import numpy as np
import gguf

SHAPES = {
    # hidden, ffn, layers, q heads, kv heads, head dim, vocab: DecoderConfig's presets.
    "27b": (5120, 17408, 64, 40, 8, 128, 32000),
    "small": (256, 512, 2, 4, 2, 64, 512),
}
TYPES = {
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
    "q4_k_m": gguf.GGMLQuantizationType.Q4_K,
}
QK_K = 256


def random_k_blocks(rng, rows, cols, qtype):
    """Random valid Q4_K or Q6_K blocks of a rows x cols matrix (bytes, one row per row)."""
    n = rows * cols // QK_K
    amp = np.sqrt(3.0 / cols)
    if qtype == gguf.GGMLQuantizationType.Q4_K:
        # d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles: d·sc·q - dmin·m.
        d = np.full((n, 1), 2.0 * amp / (63 * 15), dtype=np.float16).view(np.uint8)
        dmin = np.full((n, 1), amp / 63, dtype=np.float16).view(np.uint8)
        rest = rng.integers(0, 256, size=(n, 12 + 128), dtype=np.uint8)
        blocks = np.concatenate([d, dmin, rest], axis=1)
    else:
        # 128 bytes of low nibbles, 64 of high bits, 16 int8 scales, d (f16): d·sc·(q - 32).
        q = rng.integers(0, 256, size=(n, 128 + 64), dtype=np.uint8)
        sc = rng.integers(-63, 64, size=(n, 16), dtype=np.int8).view(np.uint8)
        d = np.full((n, 1), amp / (63 * 32), dtype=np.float16).view(np.uint8)
        blocks = np.concatenate([q, sc, d], axis=1)
    return blocks.reshape(rows, -1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=SHAPES, default="small")
    p.add_argument("--layers", type=int, help="layers (default: the shape's)")
    p.add_argument("--type", choices=TYPES, default="f16", help="type of the weight matrices")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--values", choices=["normal", "integers"], default="normal",
                   help="normal: N(0, 1/cols); integers: k * 2^-s, k in [-1024, 1023], as the seeded "
                   "preset draws them (f16 with its low mantissa bits zero)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    hidden, ffn, layers, q_heads, kv_heads, head_dim, vocab = SHAPES[a.shape]
    layers = a.layers or layers
    qtype = TYPES[a.type]
    rng = np.random.default_rng(a.seed)

    def matrix(rows, cols):
        # Unit-variance outputs for unit-variance inputs: N(0, 1/cols).
        if a.values == "integers":
            # crossgpu's init_weights: k * 2^-shift, the shift for an amplitude near sqrt(3 / cols).
            shift = int(np.clip(np.round(np.log2(1024.0 / np.sqrt(3.0 / cols))), 0, 24))
            w = rng.integers(-1024, 1024, size=(rows, cols)).astype(np.float32) * np.float32(2.0 ** -shift)
        else:
            w = rng.standard_normal((rows, cols), dtype=np.float32) / np.float32(np.sqrt(cols))
        return w.astype(np.float16) if qtype == gguf.GGMLQuantizationType.F16 else gguf.quants.quantize(w, qtype)

    k_quants = a.type == "q4_k_m"
    q4k, q6k = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K

    def weight(rows, cols, k_type=q4k):
        """A matrix and its GGUF type."""
        if k_quants:
            return random_k_blocks(rng, rows, cols, k_type), k_type
        return matrix(rows, cols), qtype

    q, kv = q_heads * head_dim, kv_heads * head_dim
    layer = {
        "attn_q": weight(q, hidden),
        "attn_k": weight(kv, hidden),
        "attn_v": weight(kv, hidden),
        "attn_output": weight(hidden, q),
        "ffn_gate": weight(ffn, hidden),
        "ffn_up": weight(ffn, hidden),
        "ffn_down": weight(hidden, ffn),
    }
    # Q4_K_M's layers with more bits (llama.cpp's use_more_bits): Q6_K for attn_v and ffn_down.
    more = {"attn_v": weight(kv, hidden, q6k), "ffn_down": weight(hidden, ffn, q6k)} if k_quants else {}

    def more_bits(l):
        return l < layers // 8 or l >= 7 * layers // 8 or (l - layers // 8) % 3 == 2
    ones = np.ones(hidden, dtype=np.float32)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"crossgpu synthetic {a.shape} ({layers} layers, {a.type})")
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(q_heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16 if a.type == "f16" else getattr(gguf.LlamaFileType, "MOSTLY_" + a.type.upper())))
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", rng.standard_normal((vocab, hidden), dtype=np.float32).astype(np.float16))
    for l in range(layers):
        w.add_tensor(f"blk.{l}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{l}.ffn_norm.weight", ones)
        for name, (t, ty) in layer.items():
            if name in more and more_bits(l):
                t, ty = more[name]
            w.add_tensor(f"blk.{l}.{name}.weight", t, raw_dtype=ty)
    w.add_tensor("output_norm.weight", ones)
    out, ty = weight(vocab, hidden, q6k)
    w.add_tensor("output.weight", out, raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


if __name__ == "__main__":
    main()
