"""The fault table of issue 10: real processes on loopback, every sample produced counted against every row stored.

``run.py`` is the command line, ``harness.py`` starts and counts (tansu, PostgreSQL, ``gpuwatch
collector`` and ``gpuwatch agent`` processes), ``cases.py`` holds the faults (a case is a
function), ``agent_proc.py`` runs ``gpuwatch agent`` with a side export of what it sampled.
"""
