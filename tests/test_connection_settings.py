"""ConnectionSettings: the library reads no environment; a command line builds the settings from its flags and the
environment (``from_env``), and build_agent takes them whole or as keywords."""

from __future__ import annotations

from pathlib import Path

import pytest

from mycelian_agent import ConfigError, ConnectionSettings, build_agent
from mycelian_agent.paths import default_db_path


def test_from_env_takes_flags_first_then_the_environment() -> None:
    env = {"MYCELIAN_SERVER": "http://127.0.0.1:1/mcp", "MYCELIAN_TOKEN": "secret", "MYCELIAN_DB": "/x/env.db"}
    assert ConnectionSettings.from_env(env) == ConnectionSettings(
        server="http://127.0.0.1:1/mcp", db="/x/env.db", token="secret"
    )
    flags = ConnectionSettings.from_env(env, server="embedded", db="/x/flag.db", token=None, timeout=5.0)
    assert (flags.server, flags.db, flags.token, flags.timeout) == ("embedded", "/x/flag.db", "secret", 5.0)


def test_the_default_database_follows_xdg_data_home_only_through_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/somewhere/else")  # the library must not see it
    assert ConnectionSettings().database() == str(default_db_path())
    assert ConnectionSettings.from_env({"XDG_DATA_HOME": "/data"}).database() == "/data/mycelian/memory.db"
    assert ConnectionSettings.from_env({}, server="http://h/mcp").db is None  # a remote server has no database
    assert ConnectionSettings(db="~/m.db").database() == str(Path("~/m.db").expanduser())
    assert ConnectionSettings(db="postgresql://u@h/db").database() == "postgresql://u@h/db"


def test_bad_settings_are_refused_when_built() -> None:
    with pytest.raises(ConfigError, match="unknown server 'ftp://x'"):
        ConnectionSettings(server="ftp://x")
    with pytest.raises(ConfigError, match="embeddings must be"):
        ConnectionSettings(embeddings="sometimes")
    with pytest.raises(ConfigError, match="unknown connection setting"):
        ConnectionSettings.from_env({}, dbb="x.db")


def test_build_agent_takes_the_connection_whole_or_as_keywords(tmp_path: Path) -> None:
    settings = ConnectionSettings(server="in-process", db=tmp_path / "m.db", timeout=5.0)
    assert build_agent(connection=settings).connection is settings
    assert build_agent(server="in-process", db=tmp_path / "m.db", timeout=5.0).connection == settings
    with pytest.raises(ConfigError, match="not both .*db"):
        build_agent(connection=settings, db="other.db")


def test_a_program_reaches_memory_through_settings_it_built(tmp_path: Path) -> None:
    settings = ConnectionSettings.from_env({"MYCELIAN_DB": str(tmp_path / "env.db")}, server="in-process")
    with build_agent(connection=settings) as invoker:
        invoker.process_conversation_message("user", "I moved to Denver in March.", "t1")
    assert (tmp_path / "env.db").is_file()
