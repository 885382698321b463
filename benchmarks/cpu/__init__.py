"""What is timed on a CPU and how it is scored: the workload tables, the benchmark run, the speed matrix."""
