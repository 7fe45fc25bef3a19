"""Infrastructure the benchmarks stand on: NVML sampling, CPU pinning, and a simulated network link."""
