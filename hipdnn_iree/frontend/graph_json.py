"""Graphs as JSON: ``Graph.to_json()`` / ``Graph.from_json()`` (and ``hipdnn-iree compile``).

The JSON holds a *validated* graph: every tensor has its uid, dims, strides and data
type, so loading it gives back the same canonical graph FlatBuffer bytes. Format
(version 1)::

    {
      "format": "hipdnn-iree.graph", "format_version": 2,
      "name": "mlp", "io_data_type": "FLOAT", "intermediate_data_type": "NOT_SET",
      "compute_data_type": "NOT_SET",
      "tensors": [
        {"uid": 1, "name": "X", "data_type": "FLOAT", "dims": [8, 64], "strides": [64, 1],
         "virtual": false},
        {"uid": 5, "name": "alpha", "data_type": "FLOAT", "scalar": 0.5}
      ],
      "nodes": [
        {"op": "MATMUL", "name": "mm", "compute_data_type": "NOT_SET",
         "inputs": {"a": 1, "b": 2}, "outputs": {"c": 3}, "attrs": {}},
        {"op": "POINTWISE", "name": "act", "compute_data_type": "NOT_SET",
         "inputs": {"in_0": 3}, "outputs": {"out_0": 4},
         "attrs": {"operation": "RELU_FWD", "relu_lower_clip": null, ...}}
      ]
    }

- ``op`` is an :class:`graph_ir.desc.OpKind` name (one per hipDNN node type); ``inputs``/``outputs`` map the op's
  tensor fields (the attributes' ``*_uid`` fields without ``_uid``) to tensor uids; an
  unconnected optional input is left out.
- ``attrs`` holds the op's other fields under their schema names: enums by name
  (pointwise ``operation``, reduction ``mode``, layernorm/rmsnorm ``phase``), integer lists as
  lists, an unset float (NaN) or optional integer/bool as ``null``, infinities as
  ``"inf"``/``"-inf"``, bytes as a hex string.
- Data types are :class:`hd.DataType` names (integers are accepted on input).
- A scalar tensor has ``"scalar": value`` instead of dims/strides/virtual.
- Nodes are in execution order (each input is a graph input or an earlier node's output).
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk import types as _types
from hipdnn_iree.plugin_sdk.types import DataType
from graph_ir.desc import ABSENT, ATTRS_BY_KIND, GraphDesc, NodeDesc, OpKind, TensorDesc

FORMAT = "hipdnn-iree.graph"
# History: 1 (2026-11-29) first layout (module docstring).
#          2 (2026-12-13) hipDNN's graph schema: hipDNN's attribute names (elu_alpha, swish_beta,
#            relu clips ...), every hipDNN node type; version 1 documents are refused.
FORMAT_VERSION = 2


def _json_enum(kind: OpKind, name: str):
    """The enum an op's attribute is written by name with (its attributes class's JSON_ENUMS), or None."""
    enum = ATTRS_BY_KIND[kind].JSON_ENUMS.get(name)
    return None if enum is None else getattr(_types, enum)

_GRAPH_KEYS = {"format", "format_version", "name", "io_data_type", "intermediate_data_type", "compute_data_type",
               "tensors", "nodes"}


def _bad(message: str) -> HipdnnError:
    return HipdnnError(Status.BAD_PARAM, f"graph JSON: {message}")


# -- encode ------------------------------------------------------------------------------
def _float_out(v: float):
    v = float(v)
    if math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _dtype_name(v: int) -> str | int:
    try:
        return DataType(v).name
    except ValueError:
        return int(v)


def desc_to_dict(desc: GraphDesc) -> dict:
    """A :class:`GraphDesc` as the JSON-ready dict of the format above."""
    tensors = []
    for t in desc.tensors:
        d = {"uid": t.uid, "name": t.name, "data_type": _dtype_name(t.data_type)}
        if t.is_scalar:
            v = float(t.scalar_value)
            d["scalar"] = v if math.isfinite(v) else ("nan" if math.isnan(v) else _float_out(v))
        else:
            d.update(dims=list(t.dims), strides=list(t.strides), virtual=bool(t.is_virtual))
        tensors.append(d)
    nodes = []
    for n in desc.nodes:
        cls = type(n.attrs)
        ins, outs, attrs = {}, {}, {}
        for f in dataclasses.fields(cls):
            v = getattr(n.attrs, f.name)
            if f.name in cls._IN or f.name in cls._OUT:
                if v != ABSENT:
                    (ins if f.name in cls._IN else outs)[f.name.removesuffix("_uid")] = int(v)
            elif _json_enum(n.kind, f.name) is not None:
                enum = _json_enum(n.kind, f.name)
                attrs[f.name] = enum(v).name if v in enum._value2member_map_ else int(v)
            elif v is None or isinstance(v, (bool, str)):
                attrs[f.name] = v
            elif isinstance(v, bytes):
                attrs[f.name] = v.hex()
            elif isinstance(v, float):
                attrs[f.name] = _float_out(v)
            elif isinstance(v, tuple):
                attrs[f.name] = [int(x) for x in v]
            else:
                attrs[f.name] = int(v)
        nodes.append({"op": n.kind.name, "name": n.name, "compute_data_type": _dtype_name(n.compute_data_type),
                      "inputs": ins, "outputs": outs, "attrs": attrs})
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "name": desc.name,
            "io_data_type": _dtype_name(desc.io_data_type),
            "intermediate_data_type": _dtype_name(desc.intermediate_data_type),
            "compute_data_type": _dtype_name(desc.compute_data_type), "tensors": tensors, "nodes": nodes}


def graph_to_json(graph, indent: int | None = 2) -> str:
    """``graph`` (validated first when needed) as JSON text.

    ``indent=None`` gives one line; otherwise one line per top-level key, tensor and node.
    """
    graph._check_not_restored("to_json")
    if not graph._validated:
        graph.validate()
    d = desc_to_dict(graph._desc)
    if indent is None:
        return json.dumps(d, allow_nan=False)
    pad = " " * int(indent)
    lines = []
    for k, v in d.items():
        if isinstance(v, list):
            items = [f"{pad}{pad}{json.dumps(x, allow_nan=False)}" for x in v]
            lines.append(f"{pad}{json.dumps(k)}: [\n" + ",\n".join(items) + f"\n{pad}]" if items
                         else f"{pad}{json.dumps(k)}: []")
        else:
            lines.append(f"{pad}{json.dumps(k)}: {json.dumps(v, allow_nan=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


# -- decode ------------------------------------------------------------------------------
def _int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise _bad(f"{what} must be an integer, got {v!r}")
    return int(v)


def _float_in(v, what: str) -> float:
    if v is None:
        return math.nan
    if isinstance(v, str) and v.lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
        return float(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise _bad(f"{what} must be a number, null or \"inf\"/\"-inf\", got {v!r}")
    return float(v)


def _int_list(v, what: str) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise _bad(f"{what} must be a list of integers, got {v!r}")
    return tuple(_int(x, what) for x in v)


def _enum(enum, v, what: str) -> int:
    if isinstance(v, str):
        try:
            return int(enum[v])
        except KeyError:
            raise _bad(f"{what}: unknown {enum.__name__} {v!r}") from None
    v = _int(v, what)
    if v not in enum._value2member_map_:
        raise _bad(f"{what}: {v} is not a {enum.__name__} value")
    return v


def _check_keys(d, allowed: set, what: str, required=()) -> None:
    if not isinstance(d, dict):
        raise _bad(f"{what} must be an object, got {type(d).__name__}")
    extra = sorted(set(d) - allowed)
    if extra:
        raise _bad(f"{what} has unknown key(s) {extra}; allowed: {sorted(allowed)}")
    missing = [k for k in required if k not in d]
    if missing:
        raise _bad(f"{what} lacks key(s) {missing}")


def _tensor_desc(d, i: int) -> TensorDesc:
    what = f"tensors[{i}]"
    _check_keys(d, {"uid", "name", "data_type", "dims", "strides", "virtual", "scalar"}, what, ("uid", "data_type"))
    uid, name = _int(d["uid"], f"{what}.uid"), d.get("name", f"tensor_{i}")
    if not isinstance(name, str):
        raise _bad(f"{what}.name must be a string, got {name!r}")
    dtype = _enum(DataType, d["data_type"], f"{what}.data_type")
    if "scalar" in d:
        if any(k in d for k in ("dims", "strides")) or d.get("virtual"):
            raise _bad(f"{what} ('{name}'): a scalar tensor has no dims, strides or virtual flag")
        return TensorDesc(uid, name, dtype, (), (), False, True, _float_in(d["scalar"], f"{what}.scalar"))
    if "dims" not in d or "strides" not in d:
        raise _bad(f"{what} ('{name}') needs dims and strides (the JSON holds a validated graph)")
    virtual = d.get("virtual", False)
    if not isinstance(virtual, bool):
        raise _bad(f"{what}.virtual must be true or false, got {virtual!r}")
    return TensorDesc(uid, name, dtype, _int_list(d["dims"], f"{what}.dims"),
                      _int_list(d["strides"], f"{what}.strides"), virtual)


def _node_desc(d, i: int, uids: set) -> NodeDesc:
    what = f"nodes[{i}]"
    _check_keys(d, {"op", "name", "compute_data_type", "inputs", "outputs", "attrs"}, what, ("op",))
    try:
        kind = OpKind[d["op"]]
    except (KeyError, TypeError):
        raise _bad(f"{what}.op {d['op']!r} is not an op kind; known: {[k.name for k in OpKind]}") from None
    name = d.get("name", f"{kind.name.lower()}_{i}")
    what = f"{what} ({kind.name} '{name}')"
    cls = ATTRS_BY_KIND[kind]
    kwargs = {}
    for key, fields in (("inputs", cls._IN), ("outputs", cls._OUT)):
        ports = d.get(key, {})
        _check_keys(ports, {f.removesuffix("_uid") for f in fields}, f"{what}.{key}")
        for port, uid in ports.items():
            uid = _int(uid, f"{what}.{key}.{port}")
            if uid not in uids:
                raise _bad(f"{what}.{key}.{port} refers to uid {uid}, which no tensor has")
            kwargs[port + "_uid"] = uid
    attrs = d.get("attrs", {})
    params = [f for f in dataclasses.fields(cls) if f.name not in cls._IN and f.name not in cls._OUT]
    _check_keys(attrs, {f.name for f in params}, f"{what}.attrs")
    for f in params:
        if f.name not in attrs:
            continue
        v, fw = attrs[f.name], f"{what}.attrs.{f.name}"
        if _json_enum(kind, f.name) is not None:
            kwargs[f.name] = _enum(_json_enum(kind, f.name), v, fw)
        elif f.type in ("int | None", "bool | None") and v is None:
            kwargs[f.name] = None
        elif f.type in ("bool", bool, "bool | None"):
            if not isinstance(v, bool):
                raise _bad(f"{fw} must be true or false, got {v!r}")
            kwargs[f.name] = v
        elif f.type in ("float", float):
            kwargs[f.name] = _float_in(v, fw)
        elif str(f.type).startswith("tuple"):
            kwargs[f.name] = _int_list(v, fw)
        elif f.type in ("str", str):
            if not isinstance(v, str):
                raise _bad(f"{fw} must be a string, got {v!r}")
            kwargs[f.name] = v
        elif f.type in ("bytes", bytes):
            try:
                kwargs[f.name] = bytes.fromhex(v)
            except (TypeError, ValueError):
                raise _bad(f"{fw} must be a hex string, got {v!r}") from None
        else:
            kwargs[f.name] = _int(v, fw)
    try:
        attrs_obj = cls(**kwargs)
    except TypeError as e:
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in kwargs and f.default is dataclasses.MISSING]
        raise _bad(f"{what} lacks {missing or e}") from None
    return NodeDesc(name, _enum(DataType, d.get("compute_data_type", "NOT_SET"), f"{what}.compute_data_type"),
                    attrs_obj)


def dict_to_desc(d) -> GraphDesc:
    """The format's dict -> :class:`GraphDesc`; every problem is ``HipdnnError(BAD_PARAM)``."""
    _check_keys(d, _GRAPH_KEYS, "the document", ("format", "format_version", "tensors", "nodes"))
    if d["format"] != FORMAT:
        raise _bad(f"format is {d['format']!r}, expected {FORMAT!r}")
    if d["format_version"] != FORMAT_VERSION:
        raise HipdnnError(Status.NOT_SUPPORTED, f"graph JSON: format_version {d['format_version']!r} is not "
                                                f"supported; this reader knows {FORMAT_VERSION}")
    if not isinstance(d["tensors"], list) or not isinstance(d["nodes"], list):
        raise _bad("tensors and nodes must be lists")
    tensors = tuple(_tensor_desc(t, i) for i, t in enumerate(d["tensors"]))
    uids = set()
    for t in tensors:
        if t.uid in uids:
            raise _bad(f"uid {t.uid} is used by two tensors (the second is '{t.name}')")
        uids.add(t.uid)
    nodes = tuple(_node_desc(n, i, uids) for i, n in enumerate(d["nodes"]))
    name = d.get("name", "graph")
    if not isinstance(name, str):
        raise _bad(f"name must be a string, got {name!r}")
    return GraphDesc(name, _enum(DataType, d.get("io_data_type", "NOT_SET"), "io_data_type"),
                     _enum(DataType, d.get("intermediate_data_type", "NOT_SET"), "intermediate_data_type"),
                     _enum(DataType, d.get("compute_data_type", "NOT_SET"), "compute_data_type"), tensors, nodes)


def graph_from_desc(desc: GraphDesc, cls=None):
    """A buildable :class:`hd.Graph` holding ``desc``'s tensors and nodes."""
    from hipdnn_iree.frontend.node import _Node
    from hipdnn_iree.frontend.tensor import TensorAttributes
    g = cls(name=desc.name, io_data_type=desc.io_data_type,
                       intermediate_data_type=desc.intermediate_data_type, compute_data_type=desc.compute_data_type)
    by_uid = {}
    for t in desc.tensors:
        if t.uid in by_uid:
            raise _bad(f"uid {t.uid} is used by tensors '{by_uid[t.uid].get_name()}' and '{t.name}'")
        if t.is_scalar:
            ta = TensorAttributes(g, name=t.name, uid=t.uid, dim=[], stride=[], data_type=t.data_type,
                                  value=float(t.scalar_value))
        else:
            ta = TensorAttributes(g, name=t.name, uid=t.uid, dim=list(t.dims), stride=list(t.strides),
                                  data_type=t.data_type, is_virtual=t.is_virtual)
        g._tensors.append(ta)
        by_uid[t.uid] = ta
    for n in desc.nodes:
        cls_ = type(n.attrs)
        ports = set(cls_._IN) | set(cls_._OUT) | set(cls_._IN_LISTS) | set(cls_._OUT_LISTS)
        tensors = {}
        # NOTE: a tensor-list field's entries are the frontend node's "field[i]" keys (graph.py's _ports)
        entries = [(f, getattr(n.attrs, f)) for f in (*cls_._IN, *cls_._OUT)]
        entries += [(f"{f}[{i}]", u) for f in (*cls_._IN_LISTS, *cls_._OUT_LISTS)
                    for i, u in enumerate(getattr(n.attrs, f))]
        for f, uid in entries:
            if (uid != ABSENT or "[" in f) and uid not in by_uid:
                raise _bad(f"node '{n.name}' ({n.kind.name}): field {f.removesuffix('_uid')} refers to uid {uid}, "
                           "which no tensor has")
            tensors[f] = None if uid == ABSENT else by_uid[uid]
        params = {f.name: getattr(n.attrs, f.name) for f in dataclasses.fields(cls_) if f.name not in ports}
        g._nodes.append(_Node(n.kind, n.name, n.compute_data_type, tensors, params))
    return g


def graph_from_json(text, cls=None):
    """JSON text (str/bytes) or an already-parsed dict -> a buildable :class:`hd.Graph`."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad(f"not UTF-8 text ({e})") from None
    if isinstance(text, str):
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise _bad(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    elif isinstance(text, dict):
        d = text
    else:
        raise _bad(f"expected JSON text or a dict, got {type(text).__name__}")
    return graph_from_desc(dict_to_desc(d), cls)
