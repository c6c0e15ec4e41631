"""Memory bandwidths of the GPUs gpuwatch watches: what turns an activity ratio into bytes.

Why a single figure: DRAM activity is the fraction of cycles the memory interface is busy, so
activity times the peak is the bytes it moved. The collector asks one question of it, whether
PCIe traffic landed in device memory (a copy) or did not (a kernel's doorbells and semaphore reads);
the highest peak among the GPUs below reads the most bytes into an activity, so it calls a copy
a copy on every one of them.
"""

from __future__ import annotations

#: Peak DRAM bandwidth, bytes/s, by product (vendor datasheets): A100 SXM 80 GB 2.04e12, H100 SXM
#: 3.35e12, H200 4.8e12 (141 GB HBM3e), B200 8.0e12.
DRAM_PEAK_BYTES_S = {"A100": 2.04e12, "H100": 3.35e12, "H200": 4.8e12, "B200": 8.0e12}

#: The highest of them: an activity times this is at least the bytes any of these GPUs moved.
DRAM_PEAK_MAX_BYTES_S = max(DRAM_PEAK_BYTES_S.values())
