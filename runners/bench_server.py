"""Memory-server latency: ``python runners/bench_server.py [--entries N] [--adds N] [--searches N] --out OUT``.

The same command as ``mycelian-agent bench server``: writes OUT/server.json with the suite's other results.
"""

from mycelian_bench.cli import BENCHMARK_COMMANDS

if __name__ == "__main__":
    BENCHMARK_COMMANDS["server"]()
