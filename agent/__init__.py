"""Node side: driver seam, samplers, scheduler, attribution, exporter."""
