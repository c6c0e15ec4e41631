"""The PyTorch load the GPU checks run beside the agent: bf16 matrix products at a duty cycle.

``run(seconds, duty)`` keeps the GPU busy for ``duty`` of each second and idle for the rest: at
0.95-0.97 a steady job, at 0.25-0.3 the same job starved of input (the fall ``throughput_drop``
exists for). A script appends its own phases to ``PRELUDE`` and runs it with ``python -c``.
"""

PRELUDE = """
import time, torch
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
def run(seconds, duty):
    end = time.time() + seconds
    while time.time() < end:
        t = time.time()
        while time.time() - t < duty:
            y = x @ x
        torch.cuda.synchronize()
        time.sleep(1.0 - duty)
"""
