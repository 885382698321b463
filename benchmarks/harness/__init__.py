"""How every figure of the benchmarks is taken: the one timing module, a workload and its contenders."""
