"""The fault harness: real collector and agent processes on loopback, every sample produced counted against storage.

``harness.py`` starts and counts (tansu, PostgreSQL, ``gpuwatch collector`` and ``gpuwatch
agent`` processes); ``agent_proc.py`` runs ``gpuwatch agent`` with a side export of what it
sampled. The fault cases and the command that writes the fault table are
``benchmarks/faults/``; ``tests/test_faults.py`` runs short versions of the important ones.
"""
