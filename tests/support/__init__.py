"""What tests share that is not a pytest fixture: polling, stand-in traces, fault and incident harnesses.

Benchmarks may import from here (the same harness measures what the tests check); nothing
here imports from ``benchmarks/``.
"""
