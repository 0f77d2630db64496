"""Benchmarks of mq (see ../shared/BENCHMARKS.md); run each as ``python -m benchmarks.NAME``."""
