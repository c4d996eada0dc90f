"""KernelBench evaluation with the paper's metrics: problem selection (suite), solution
discovery (solutions), resumable checking (run), metrics and the report; ``cuda-agent eval``."""
