"""Monitoring (loaders/monitor/): stats against ground truth, exporters, autotune, the verdict."""
