"""Real-protocol stand-ins for external systems that cannot run in tests."""
