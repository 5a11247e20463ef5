#!/usr/bin/env python3
"""The practical bf16 matmul ceiling of this GPU: an 8192^3 product, TFLOP/s."""
import time

import torch

n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    a @ b
torch.cuda.synchronize()
start = time.perf_counter()
iterations = 50
for _ in range(iterations):
    a @ b
torch.cuda.synchronize()
print(f"{2 * n**3 * iterations / (time.perf_counter() - start) / 1e12:.0f}")
