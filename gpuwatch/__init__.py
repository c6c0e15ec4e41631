"""The gpuwatch command: the only place that wires agent and collector together."""
