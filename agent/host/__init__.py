"""Host-side evidence for each GPU: the CPU of its processes and containers, and the node's.

Why in the agent: a GPU that waits for work looks the same from NVML whether its feeding
process sleeps on input, is starved of CPU by its neighbours, is throttled by its
container's limit, or is one busy Python thread. The host's own counters tell them apart
(catalog rows of cost ``host``). :class:`HostReader` (``reader.py``) turns readings into
per-GPU rates; ``proc.py`` reads a process and a thread, ``threads.py`` chooses
which threads a tick reads (all every 5 s, the busiest in between), ``cgroup.py`` reads its container,
``node.py`` /proc/stat and PSI, ``files.py`` the one cheap way they open files.
"""

from agent.host.reader import HostReader

__all__ = ["HostReader"]
