"""A damaged memory file, a file that is no database, a full disk: one line naming the file, the problem and what
to do, from every command and from the Python API; ``mycelian-agent check`` tells what can still be read and saves
it (issue 40 item 4: a file with garbage from its 40th page printed a 49-102 line traceback from search, recall,
export, show and delete, and the server's vector writer logged one)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from test_cli import cli  # noqa: F401  (cli: the fixture)

from mycelian_agent import MemoryServerError, build_agent
from mycelian_agent.memory_server.storage import open_store

ENTRIES = 300


@pytest.fixture(scope="module")
def sound_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sound") / "memory.db"
    store = open_store(str(path))
    try:
        vault = store.create_vault("mycelian")["vaultId"]
        memory = store.create_memory(vault, "m", "NOTES")["memoryId"]
        for start in range(0, ENTRIES, 100):
            store.add_entries(
                vault,
                memory,
                [
                    {
                        "raw_entry": f"hello message number {i} about project falcon and a budget of {i * 7} dollars",
                        "summary": f"Message {i}.",
                    }
                    for i in range(start, start + 100)
                ],
            )
        store.put_context(vault, memory, "# Context\nproject falcon")
    finally:
        store.close()
    return path


def _garbage_from(sound: Path, path: Path, offset: int) -> Path:
    shutil.copy(sound, path)
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(random.Random(1).randbytes(sound.stat().st_size - offset))
    return path


@pytest.fixture()
def damaged(sound_file: Path, tmp_path: Path) -> Path:
    """Garbage from page 40: the schema reads, the entries do not (a query fails deep inside)."""
    return _garbage_from(sound_file, tmp_path / "damaged.db", 4096 * 40)


READS = [
    ("search", "hello", "--memory", "m"),
    ("recall", "hello", "--memory", "m"),
    ("export", "--memory", "m"),
    ("show", "--memory", "m"),
    ("delete", "--memory", "m", "--yes"),
]


def _one_line(run, path: Path, *words: str) -> None:
    assert run.returncode == 1, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert str(path) in lines[0] and all(word in lines[0] for word in words), lines[0]


@pytest.mark.parametrize("args", READS, ids=[args[0] for args in READS])
def test_a_damaged_file_is_named_in_one_line(cli, damaged: Path, args: tuple[str, ...]) -> None:
    _one_line(
        cli(*args, "--db", str(damaged)),
        damaged,
        "is damaged",
        "database disk image is malformed",
        f"mycelian-agent check {damaged}",
    )


def test_garbage_from_the_second_page_and_a_file_that_is_no_database(
    cli,
    sound_file: Path,
    tmp_path: Path,
) -> None:
    early = _garbage_from(sound_file, tmp_path / "early.db", 4096)
    text = tmp_path / "notes.db"
    text.write_text("this is not a database, just some text\n" * 200, encoding="utf-8")
    for args in (*READS, ("list",)):
        _one_line(cli(*args, "--db", str(early)), early, "is damaged", "mycelian-agent check")
        _one_line(cli(*args, "--db", str(text)), text, "is not a memory database", "the right file")
    _one_line(cli("embeddings", "status", str(early)), early, "is damaged")


async def test_the_python_api_and_a_write_through_the_server(damaged: Path) -> None:
    async with build_agent(server="in-process", db=damaged, memory="m", embeddings=False) as invoker:
        with pytest.raises(
            MemoryServerError,
            match=rf"the memory database {damaged} is damaged \(database disk "
            r"image is malformed\): `mycelian-agent check",
        ):
            await invoker.asearch("hello")
        with pytest.raises(MemoryServerError, match=rf"the memory database {damaged} is damaged"):
            await invoker.aprocess_conversation_message("user", "a new message", "t")


def test_check_tells_a_sound_file_from_a_damaged_one_and_saves_what_can_be_read(
    cli,
    sound_file: Path,
    damaged: Path,
    tmp_path: Path,
) -> None:
    sound = cli("check", str(sound_file))
    assert sound.returncode == 0 and f"{ENTRIES} entries readable" in sound.stdout and "sound" in sound.stdout
    broken = cli("check", str(damaged))
    assert broken.returncode == 1 and "cannot be read in full" in broken.stdout
    assert f"{damaged}: damaged: " in broken.stderr and f"mycelian-agent check {damaged} --save" in broken.stderr
    saved = cli("check", str(damaged), "--save", str(tmp_path / "saved.json"))
    assert saved.returncode == 1
    kept = json.loads((tmp_path / "saved.json").read_text())["memories"]
    texts = [entry["raw_entry"] for memory in kept for entry in memory["entries"]]
    assert 0 < len(texts) < ENTRIES and len(set(texts)) == len(texts)
    assert f"saved {len(texts)} entries to " in saved.stdout
    assert f"{ENTRIES - len(texts)} could not be read" in saved.stdout
    assert all(text.startswith("hello message number") for text in texts)
    empty = tmp_path / "empty.db"
    empty.touch()
    for path, problem in (
        (empty, "the file is empty"),
        (_garbage_from(sound_file, tmp_path / "e.db", 4096), "cannot be read at all"),
    ):
        run = cli("check", str(path))
        assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1 and problem in run.stderr, run.stderr


@pytest.fixture()
def small_disk(tmp_path: Path):
    """A 384 KiB file system (tmpfs), where this process may mount one; else the test is skipped."""
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        shutil.which("mount") is None
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small file system here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_is_named_as_such(small_disk: Path) -> None:
    db = small_disk / "memory.db"
    stored = 0
    async with build_agent(server="in-process", db=db, memory="m", embeddings=False) as invoker:
        with pytest.raises(
            MemoryServerError,
            match=rf"the disk holding the memory database {db} is full \(.*\): "
            "nothing of this call was written; free some space",
        ):
            for stored in range(10_000):
                await invoker.aprocess_conversation_message("user", f"message {stored} " + "word " * 200, "t")
    assert stored > 0
