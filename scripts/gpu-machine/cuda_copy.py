"""The CUDA device-to-device copy on one GPU, the bound crossgpu's Vulkan copy is compared with
(docs/BENCHMARKS.md "The device-local copy bound"): `dst.copy_(src)` of BYTES (default 256 MiB,
as `crossgpu bench limits` on a GPU), 20 copies per timed batch (CUDA events), after a warm-up;
prints the median, p10 and p90 over the batches in GB/s of bytes read + written, the way
crossgpu counts its copy.

    python3 scripts/gpu-machine/cuda_copy.py [BYTES] [BATCHES]
"""
import statistics
import sys

import torch


def main():
    nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    per = 20
    for _ in range(per):
        dst.copy_(src)
    torch.cuda.synchronize()
    rates = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(per):
            dst.copy_(src)
        b.record()
        b.synchronize()
        s = a.elapsed_time(b) / 1e3
        rates.append(per * 2 * nbytes / s / 1e9)
    assert torch.equal(src, dst)
    q = statistics.quantiles(rates, n=10)
    print(f"cuda copy_ {nbytes} bytes (read + written): median {statistics.median(rates):.1f} GB/s "
          f"(p10 {q[0]:.1f}, p90 {q[-1]:.1f}) over {batches} batches of {per}, {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
