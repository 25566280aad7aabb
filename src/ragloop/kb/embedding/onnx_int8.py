"""An ONNX model whose int8 weights are turned back into float32 in every run, rewritten so that
ONNX Runtime keeps them int8.

The packaged all-MiniLM-L6-v2 stores each weight as int8 with float scales and dequantizes it in
the graph (``Cast`` then ``Mul``). Run as shipped, every run builds float32 copies of all the
weights (about 90 MB, two thirds of a question's time); ONNX Runtime's own rewrites fold them
once instead, which costs 180 MB for good and 0.2 s to load. Rewritten here:

- a weight multiplied from the right by ``MatMul`` (one scale per output column) becomes
  ``MatMulNBits`` (ONNX Runtime's contrib operator) with 8-bit blocks of that scale, computing
  in int8 (``accuracy_level`` 4): the weights stay int8, and a question embeds faster than
  with either (BENCHMARKS.md, "MiniLM: int8 compute");
- an embedding table read by ``Gather`` (one scale per row) has its rows gathered first and
  only they dequantized.

The rewrite takes about 0.1 s; :func:`cached_int8_model` keeps its result in a file, so a
process pays it once per machine rather than once per start.

The vectors are not bit-for-bit the same (the activations are quantised per block of 32):
cosine against the graph as shipped is at least 0.9993 on the Python docs' chunks and
questions. The model is read and written with ``protobuf`` (already installed with
onnxruntime) through the few ONNX messages and fields used here; every other field travels
unread. The ``onnx`` package would do the same but takes 0.65 s to import.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

# ONNX's TensorProto.DataType and AttributeProto.AttributeType values used here
FLOAT, UINT8, INT8 = 1, 2, 3
ATTRIBUTE_INT = 2
BLOCK = 32  # MatMulNBits block along the input dimension: smaller is closer to float
INT8_COMPUTE = 4  # MatMulNBits accuracy_level: int8 activations, integer products
REWRITE = 1  # raised when the rewrite changes: files cached by an older one are never read


@cache
def _messages() -> dict[str, Any]:
    """Classes of the ONNX messages and fields read here, in a private descriptor pool (so a
    real ``onnx`` package in the same process never clashes)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    scalar, repeated = field.LABEL_OPTIONAL, field.LABEL_REPEATED
    layout = {
        "ModelProto": [
            ("graph", 7, "GraphProto", scalar),
            ("opset_import", 8, "OperatorSetIdProto", repeated),
        ],
        "OperatorSetIdProto": [
            ("domain", 1, field.TYPE_STRING, scalar),
            ("version", 2, field.TYPE_INT64, scalar),
        ],
        "GraphProto": [
            ("node", 1, "NodeProto", repeated),
            ("initializer", 5, "TensorProto", repeated),
        ],
        "NodeProto": [
            ("input", 1, field.TYPE_STRING, repeated),
            ("output", 2, field.TYPE_STRING, repeated),
            ("op_type", 4, field.TYPE_STRING, scalar),
            ("attribute", 5, "AttributeProto", repeated),
            ("domain", 7, field.TYPE_STRING, scalar),
        ],
        "AttributeProto": [
            ("name", 1, field.TYPE_STRING, scalar),
            ("i", 3, field.TYPE_INT64, scalar),
            ("type", 20, field.TYPE_INT32, scalar),
        ],
        "TensorProto": [
            ("dims", 1, field.TYPE_INT64, repeated),
            ("data_type", 2, field.TYPE_INT32, scalar),
            ("name", 8, field.TYPE_STRING, scalar),
            ("raw_data", 9, field.TYPE_BYTES, scalar),
        ],
    }
    schema = descriptor_pb2.FileDescriptorProto(
        name="ragloop_onnx_subset.proto", package="ragloop_onnx", syntax="proto2"
    )
    for message, fields in layout.items():
        declared = schema.message_type.add(name=message)
        for name, number, kind, label in fields:
            if isinstance(kind, str):
                declared.field.add(
                    name=name,
                    number=number,
                    label=label,
                    type=field.TYPE_MESSAGE,
                    type_name=f".ragloop_onnx.{kind}",
                )
            else:
                declared.field.add(name=name, number=number, label=label, type=kind)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ragloop_onnx.{name}"))
        for name in layout
    }


def cached_int8_model(path: Path, folder: Path) -> Path | bytes | None:
    """:func:`int8_compute_model` of ``path``, kept in ``folder``: the file written there the
    first time (named after this rewrite and the model file's path, size and time, so a new
    model or a new rewrite gets a file of its own), or the bytes when it cannot be written;
    None when there is nothing to rewrite."""
    stat = path.stat()
    source = f"{REWRITE}\0{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    cached = folder / f"{path.stem}-int8-{hashlib.sha256(source.encode()).hexdigest()[:16]}.onnx"
    if cached.is_file():
        return cached
    model = int8_compute_model(path)
    if model is None:
        return None
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(model)
        os.replace(partial, cached)  # whole or absent, whichever process writes it
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()
        return model
    return cached


def int8_compute_model(path: Path) -> bytes | None:
    """The model at ``path`` rewritten as the module says, or None if it has no int8 weight
    dequantized in the graph that could be."""
    model = _messages()["ModelProto"].FromString(path.read_bytes())
    graph = model.graph
    tensors = {tensor.name: tensor for tensor in graph.initializer}
    made_by = {name: node for node in graph.node for name in node.output}
    used_by: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            used_by[name].append(node)
    in_place: dict[int, list[Any]] = {}  # id of a node -> the nodes that take its place
    added: list[Any] = []
    dropped: set[str] = set()
    for mul in graph.node:
        found = _dequantized_weight(mul, made_by, used_by, tensors)
        if found is None:
            continue
        cast, weight, scale = found
        users = used_by[mul.output[0]]
        if all(_multiplies(user, mul.output[0]) for user in users) and _per_column(weight, scale):
            added += _nbits_weight(weight, scale)
            for user in users:
                in_place[id(user)] = [_nbits_matmul(user, weight, scale)]
            dropped.update((weight.name, scale.name))
        elif all(_looks_up(user, mul.output[0]) for user in users) and _per_row(weight, scale):
            for user in users:
                in_place[id(user)] = _gather_then_dequantize(user, weight, scale)
        else:
            continue
        in_place[id(cast)] = in_place[id(mul)] = []
    if not in_place:
        return None
    nodes = [new for node in graph.node for new in in_place.get(id(node), [node])]
    kept = [tensor for tensor in graph.initializer if tensor.name not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    if all(opset.domain != "com.microsoft" for opset in model.opset_import):
        model.opset_import.add(domain="com.microsoft", version=1)
    data: bytes = model.SerializeToString()
    return data


def _dequantized_weight(
    mul: Any, made_by: dict[str, Any], used_by: dict[str, list[Any]], tensors: dict[str, Any]
) -> tuple[Any, Any, Any] | None:
    """(Cast, int8 weight, float scale) when ``mul`` is ``Cast(weight) * scale`` of two
    initializers and nothing else reads the Cast."""
    if mul.op_type != "Mul" or mul.domain or len(mul.input) != 2:
        return None
    cast = made_by.get(mul.input[0])
    if cast is None or cast.op_type != "Cast" or used_by[cast.output[0]] != [mul]:
        return None
    if next((a.i for a in cast.attribute if a.name == "to"), None) != FLOAT:
        return None
    weight, scale = tensors.get(cast.input[0]), tensors.get(mul.input[1])
    if weight is None or scale is None or weight.data_type != INT8 or scale.data_type != FLOAT:
        return None
    raw = len(weight.raw_data) == np.prod(weight.dims) and len(scale.raw_data) == 4 * np.prod(
        scale.dims
    )
    return (cast, weight, scale) if raw else None  # values kept another way: left as they are


def _multiplies(node: Any, weight: str) -> bool:
    return bool(node.op_type == "MatMul" and not node.domain and node.input[1] == weight)


def _looks_up(node: Any, table: str) -> bool:
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return bool(
        node.op_type == "Gather" and not node.domain and node.input[0] == table and axis == 0
    )


def _per_column(weight: Any, scale: Any) -> bool:
    if len(weight.dims) != 2:
        return False
    rows, columns = weight.dims
    return rows % BLOCK == 0 and list(scale.dims) in ([1, columns], [columns])


def _per_row(weight: Any, scale: Any) -> bool:
    return len(weight.dims) == 2 and list(scale.dims) == [weight.dims[0], 1]


def _nbits_weight(weight: Any, scale: Any) -> list[Any]:
    """MatMulNBits' weight (column by column, in blocks, shifted to uint8 around its default
    zero point of 128) and one scale per block: the same values as ``Cast(weight) * scale``."""
    rows, columns = weight.dims
    values = np.frombuffer(weight.raw_data, dtype=np.int8).reshape(rows, columns)
    blocks = rows // BLOCK
    shifted = (values.T.astype(np.int16) + 128).astype(np.uint8).reshape(columns, blocks, BLOCK)
    scales = np.repeat(np.frombuffer(scale.raw_data, dtype=np.float32), blocks)
    tensor = _messages()["TensorProto"]
    return [
        tensor(
            name=_nbits_name(weight),
            data_type=UINT8,
            dims=shifted.shape,
            raw_data=shifted.tobytes(),
        ),
        tensor(
            name=_nbits_name(scale), data_type=FLOAT, dims=scales.shape, raw_data=scales.tobytes()
        ),
    ]


def _nbits_name(tensor: Any) -> str:
    return f"ragloop.nbits/{tensor.name}"


def _nbits_matmul(matmul: Any, weight: Any, scale: Any) -> Any:
    messages = _messages()
    rows, columns = weight.dims
    settings = {
        "K": rows,
        "N": columns,
        "bits": 8,
        "block_size": BLOCK,
        "accuracy_level": INT8_COMPUTE,
    }
    return messages["NodeProto"](
        op_type="MatMulNBits",
        domain="com.microsoft",
        input=[matmul.input[0], _nbits_name(weight), _nbits_name(scale)],
        output=list(matmul.output),
        attribute=[
            messages["AttributeProto"](name=name, i=value, type=ATTRIBUTE_INT)
            for name, value in settings.items()
        ],
    )


def _gather_then_dequantize(gather: Any, table: Any, scale: Any) -> list[Any]:
    messages = _messages()
    node = messages["NodeProto"]
    rows, row_scales, values = (
        f"ragloop.{part}/{gather.output[0]}" for part in ("int8", "scale", "float")
    )
    index = gather.input[1]
    return [
        node(op_type="Gather", input=[table.name, index], output=[rows]),
        node(op_type="Gather", input=[scale.name, index], output=[row_scales]),
        node(
            op_type="Cast",
            input=[rows],
            output=[values],
            attribute=[messages["AttributeProto"](name="to", i=FLOAT, type=ATTRIBUTE_INT)],
        ),
        node(op_type="Mul", input=[values, row_scales], output=list(gather.output)),
    ]
