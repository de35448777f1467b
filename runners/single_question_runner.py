"""LongMemEval runner: ``python runners/single_question_runner.py DATA.json [...] --out OUT [--qa-model M]``.

The same command as ``mycelian-agent bench longmemeval`` (``--help`` lists the options); re-run to resume.
"""

from mycelian_bench.cli import longmemeval_command

if __name__ == "__main__":
    longmemeval_command()
