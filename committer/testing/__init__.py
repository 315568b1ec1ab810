"""Helpers for tests and benchmarks that need real (emulated) cloud stores."""
