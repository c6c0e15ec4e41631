"""The fault table of issue 10: real processes on loopback, every sample produced counted against every row stored.

``run.py`` is the command line and ``cases.py`` holds the faults (a case is a function); the
harness that starts and counts is ``tests/support/faults/`` (the tests use it too).
"""
