"""Central side: consumer, store, detectors, alerting, API."""
