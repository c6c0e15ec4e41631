"""Simulated fleet helpers: identities for simulated processes, and trace generation."""
