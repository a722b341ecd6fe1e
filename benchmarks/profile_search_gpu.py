"""Where a 10k x 100k x 384-d exact top-100 search's time goes on a GPU (CUDA only; no output file):

    python -m benchmarks.profile_search_gpu > profile.txt

``exact_topk`` with other chunk sizes, group widths and candidate counts; the parts of one
10,000-query chunk timed alone (bf16 product, top-k variants, the rescore's gather and product); the
result's copy to the host, as it was, as it is, and through pinned memory; a torch.profiler table of
the default call. Best of 7, the GPU synchronised around each.
Recorded: ``benchmarks/results/search-gpu-h100-profile-before.txt`` (1 GB chunks),
``search-gpu-h100-profile.txt`` (chunks by free memory, two-stage candidates) and
``search-gpu-h200-profile-strided.txt`` (strided groups).
"""

import sys

import numpy as np
import torch

from benchmarks.runner import _cuda_seconds
from xmcbench.search import exact_topk
from xmcbench.search.exact import _candidate_topk

n, L, d = 10000, 100000, 384
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(n, d, device="cuda", generator=g)
keys = torch.randn(L, d, device="cuda", generator=g)


def t(fn):
    return round(_cuda_seconds(fn, 7) * 1e3, 3)  # ms


def fp32mm():
    chunk = (1 << 28) // L  # the float32 search's 1 GB blocks, as the runner's floor
    buf = torch.empty(chunk * L, device="cuda")
    for s in range(0, n, chunk):
        e = min(s + chunk, n)
        torch.mm(q[s:e], keys.T, out=buf[: (e - s) * L].view(e - s, L))


print("ms fp32 matmul (floor)", t(fp32mm), flush=True)
for kw in (
    {},
    {"group": 0},
    {"group": 16},
    {"group": 64},
    {"group": 256, "group_layout": "contiguous"},
    {"chunk_size": 5000},
    {"candidates": 160},
    {"candidates": 200},
):
    st = {}
    ms = t(lambda: exact_topk(q, keys, 100, device="cuda", stats=st, **kw))
    print("ms exact_topk", kw, ms, st, flush=True)

B, m = n, 232  # the default chunk on an H200: every query at once
qh, kh = q[:B].bfloat16(), keys.bfloat16()
S = torch.mm(qh, kh.T)
print("chunk", B, flush=True)
print("  bf16 mm", t(lambda: torch.mm(qh, kh.T, out=S)))
print("  topk plain", t(lambda: torch.topk(S, m, dim=1, sorted=False)))
for layout in ("strided", "contiguous"):
    for grp in (16, 32, 64, 128):
        print("  topk group", layout, grp, t(lambda: _candidate_topk(S, m, grp, layout)))
print("  amax strided g32", t(lambda: S[:, : L // 32 * 32].unflatten(1, (32, L // 32)).amax(dim=1)))
print("  amax contiguous g32", t(lambda: S[:, : L // 32 * 32].view(B, -1, 32).amax(dim=2)))
G = S[:, : L // 32 * 32].unflatten(1, (32, L // 32)).amax(dim=1)
print("  topk over groups", G.shape, t(lambda: torch.topk(G, m, dim=1, sorted=False)))
P = torch.randn(B, m * 32, device="cuda").bfloat16()
print("  topk over pool", P.shape, t(lambda: torch.topk(P, m, dim=1, sorted=False)))
for kk in (100, 232, 400):
    print("  topk plain m", kk, t(lambda: torch.topk(S, kk, dim=1, sorted=False)))
v, c = torch.topk(S, m, dim=1, sorted=False)
print("  gather keys", t(lambda: keys[c]))
K = keys[c]
print("  bmm rescore", t(lambda: torch.bmm(K, q[:B].unsqueeze(2))))
print("  einsum-free rescore (bf16 keys gathered)", t(lambda: torch.bmm(kh[c].float(), q[:B].unsqueeze(2))))
print("  argsort+sort", t(lambda: torch.sort(torch.argsort(c, dim=1).float(), dim=1, descending=True, stable=True)))
# The result's trip to the host, 10k x top-100: int64 labels through a fresh host tensor then numpy
# (before 2026-11-26), int32 labels copied straight into the numpy arrays (now), and through a pinned
# staging buffer (fresh, or kept across calls), the variant to adopt if it wins here.
vals = torch.randn(n, 100, device="cuda")
labs = torch.randint(0, L, (n, 100), device="cuda")


def to_host_before():
    out_v, out_l = np.empty((n, 100), np.float32), np.empty((n, 100), np.int64)
    out_v[:] = vals.cpu().numpy()
    out_l[:] = labs.cpu().numpy()


def to_host_now():
    out_v, out_l = np.empty((n, 100), np.float32), np.empty((n, 100), np.int32)
    torch.from_numpy(out_v).copy_(vals)
    torch.from_numpy(out_l).copy_(labs.to(torch.int32))


kept = torch.empty((2, n, 100), dtype=torch.int32, pin_memory=True)


def to_host_pinned(staging=None):
    staging = torch.empty((2, n, 100), dtype=torch.int32, pin_memory=True) if staging is None else staging
    staging[0].copy_(vals.view(torch.int32))
    staging[1].copy_(labs.to(torch.int32))
    out = staging.numpy().copy()
    return out[0].view(np.float32), out[1]


print("result to host (10k x 100)", flush=True)
print("  before: int64, via .cpu()", t(to_host_before))
print("  now: int32, into numpy", t(to_host_now))
print("  pinned, fresh each call", t(to_host_pinned))
print("  pinned, kept", t(lambda: to_host_pinned(kept)))
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
) as prof:
    exact_topk(q, keys, 100, device="cuda")
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))
sys.stdout.flush()
