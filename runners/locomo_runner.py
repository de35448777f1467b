"""LoCoMo runner: ``python runners/locomo_runner.py DATA.json --out OUT [--limit N] [--limit-questions N]``.

The same command as ``mycelian-agent bench locomo`` (``--help`` lists the options); re-run to resume.
"""

from mycelian_bench.cli import locomo_command

if __name__ == "__main__":
    locomo_command()
