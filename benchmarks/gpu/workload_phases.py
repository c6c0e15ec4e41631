"""A PyTorch workload that changes phase: idle, bf16 training, inference, idle, and two incidents.

``stall`` keeps the same process training at about a quarter of its duty cycle (an
input-bound job: SM activity collapses while the process is still there); ``leak``
trains while holding on to 1 GiB more every 2 s (memory creeping toward OOM). Used to
record the real-GPU incident trace that ``tests/detect`` replays.

Run on the H200 while the agent samples, to validate the agent against nvidia-smi and
to record the real-GPU trace the codec benchmark uses. Writes "<phase> <epoch>" lines to
the marker file as each phase starts, after CUDA has initialised (a fresh CUDA process
took seconds to show load on the H200).

    python workload_phases.py MARKER idle:15 train:90 infer:60 idle:15
"""

from __future__ import annotations

import sys
import time

import torch


def mark(path: str, phase: str) -> None:
    with open(path, "a") as fh:
        fh.write(f"{phase} {time.time():.3f}\n")


def main() -> None:
    marker, *plan = sys.argv[1:]
    dev = torch.device("cuda")
    torch.ones(1, device=dev).sum().item()  # CUDA initialised before the first phase
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(16384, 4096, device=dev, dtype=torch.bfloat16)
    ballast = None
    for step in plan:
        phase, seconds = step.split(":")
        end = time.time() + float(seconds)
        # the last phase's memory goes back to the driver first: PyTorch's caching allocator
        # would otherwise serve the next phase from blocks it holds, invisible to NVML
        ballast = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        mark(marker, phase)
        if phase == "idle":
            ballast = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            time.sleep(max(0.0, end - time.time()))
        elif phase == "train":
            ballast = torch.empty(40 * 1024**3, dtype=torch.uint8, device=dev)  # activations, optimizer state
            while time.time() < end:
                for _ in range(20):
                    c = a @ b
                    loss = (x @ w).float().square().mean()
                    loss.backward()
                torch.cuda.synchronize()
                del c
        elif phase == "infer":
            ballast = torch.empty(20 * 1024**3, dtype=torch.uint8, device=dev)  # KV cache
            q = torch.randn(512, 4096, device=dev, dtype=torch.bfloat16)
            with torch.no_grad():
                while time.time() < end:
                    for _ in range(50):
                        q = torch.tanh(q @ w)
                    torch.cuda.synchronize()
                    time.sleep(0.01)  # bursts with gaps, like request batches
        elif phase == "stall":  # waiting on input: short bursts of the same training step
            ballast = torch.empty(40 * 1024**3, dtype=torch.uint8, device=dev)
            while time.time() < end:
                burst = time.time() + 0.1
                while time.time() < burst:
                    loss = (x @ w).float().square().mean()
                    loss.backward()
                    torch.cuda.synchronize()
                time.sleep(0.3)
        elif phase == "leak":  # training that keeps every step's buffer alive
            ballast = torch.empty(40 * 1024**3, dtype=torch.uint8, device=dev)
            kept: list[torch.Tensor] = []
            grow_at = time.time()
            while time.time() < end:
                if time.time() >= grow_at:
                    kept.append(torch.ones(1024**3, dtype=torch.uint8, device=dev))
                    grow_at += 2.0
                for _ in range(5):
                    c = a @ b
                    loss = (x @ w).float().square().mean()
                    loss.backward()
                torch.cuda.synchronize()
                del c
            del kept
            torch.cuda.empty_cache()
        else:
            raise SystemExit(f"unknown phase {phase!r}")
    del ballast
    mark(marker, "done")


if __name__ == "__main__":
    main()
