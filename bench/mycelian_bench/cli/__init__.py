"""``mycelian-agent bench``: every benchmark and runner, as click commands.

    mycelian-agent bench recall --quick --data DIR --out OUT     one benchmark of the suite (see BENCHMARKS.md)
    mycelian-agent bench suite [NAME...] --data DIR --out OUT    several in order (all of them by default)
    mycelian-agent bench longmemeval FILE... --out OUT           LongMemEval runner (resumable)
    mycelian-agent bench locomo FILE... --out OUT                LoCoMo runner (resumable)
    mycelian-agent bench qa --data DIR --reader openai:M --out OUT   reader F1 from recall / BM25 / full / none
    mycelian-agent bench scale --out OUT                         search as one database grows to 1M entries
    mycelian-agent bench scaleout --out OUT                      SQLite vs PostgreSQL; replay with 1/2/4 workers
    mycelian-agent bench dense-pg --out OUT                      PostgreSQL dense search: exact scan vs HNSW
    mycelian-agent bench embeddings ingest|replay|oneshot|parity ...
                                                                 ingestion with vectors, its cost; recall per backend
    mycelian-agent bench scores --locomo FILE --out OUT          the 0-1 search scores of evidence vs other hits

The commands live in :mod:`.suite`, :mod:`.runners` (``qa``, and what the runners share), :mod:`.stores`, and in
the repository's ``runners/`` scripts (``longmemeval``, ``locomo``: loaded from there by :mod:`.scripts` when asked
for). Only click is imported here: each command imports its benchmark when it runs, so ``--help`` and option errors
come back at once.
"""

from __future__ import annotations

import click

from mycelian_bench.bench_suite import BENCHMARK_NAMES
from mycelian_bench.cli.options import CONTEXT
from mycelian_bench.cli.runners import qa_command
from mycelian_bench.cli.scores import scores_command
from mycelian_bench.cli.scripts import RUNNER_SCRIPTS, runner_command
from mycelian_bench.cli.stores import dense_pg_command, embeddings_group, scale_command, scaleout_command
from mycelian_bench.cli.suite import BENCHMARK_COMMANDS, suite_command

__all__ = [
    "BENCHMARK_COMMANDS",
    "bench",
    "dense_pg_command",
    "embeddings_group",
    "qa_command",
    "scale_command",
    "scaleout_command",
    "scores_command",
    "suite_command",
]


class _BenchGroup(click.Group):
    """Commands in the order added (the suite's benchmarks, then the runners), the runners' commands loaded from
    their scripts when asked for, and ``bench NAME NAME ...`` as a shorthand for ``bench suite NAME NAME ...``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = list(self.commands)
        place = names.index("suite") + 1
        return names[:place] + list(RUNNER_SCRIPTS) + names[place:]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in RUNNER_SCRIPTS:
            return runner_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if len(args) > 1 and args[0] in BENCHMARK_NAMES and args[1] in BENCHMARK_NAMES:
            return "suite", self.commands["suite"], args
        return super().resolve_command(ctx, args)


@click.group("bench", cls=_BenchGroup, context_settings=CONTEXT)
def bench() -> None:
    """Benchmarks: the suite (overhead, prompts, recall, throughput, server, ablation), the LongMemEval / LoCoMo
    runners and the stores at size.

    \b
      mycelian-agent bench recall --quick --data DIR --out OUT        one benchmark of the suite
      mycelian-agent bench prompts recall --data DIR --out OUT        several, in order (= bench suite NAME...)
      mycelian-agent bench suite --quick --data DIR --out OUT         all of them
      mycelian-agent bench longmemeval FILE... --out OUT              a runner (resumable: run it again)
      mycelian-agent bench qa --data DIR --reader openai:M --out OUT  what a reader answers from memory
      mycelian-agent bench scale --memories 20 --out OUT              search as one database grows (SQLite, PostgreSQL)
      mycelian-agent bench embeddings parity --locomo FILE            LoCoMo recall on SQLite vs PostgreSQL

    DIR is the folder holding locomo/ and longmemeval/ (or set MYCELIAN_DATA). Results and how to read them:
    BENCHMARKS.md.
    """


for _command in (
    *BENCHMARK_COMMANDS.values(),
    suite_command,
    qa_command,
    scale_command,
    scaleout_command,
    dense_pg_command,
    embeddings_group,
    scores_command,
):
    bench.add_command(_command)
