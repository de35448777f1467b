"""The benchmark suite: ``python runners/bench.py [NAME...] --out OUT [--quick] [--data DIR]``.

The same command as ``mycelian-agent bench suite`` (``--help`` lists the options; BENCHMARKS.md the results).
"""

from mycelian_bench.cli import suite_command

if __name__ == "__main__":
    suite_command()
