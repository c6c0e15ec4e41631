"""The GPU incident generator (the tuning set), and how detections are scored against it and against real traces."""
