"""hd.Graph.get_mlir: the public way to see the MLIR a graph lowers to (the text a build compiles)."""
import hipdnn_iree as hd
from harness import lowered_mlir, raises


def _graph():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 2])
    y = g.pointwise(g.matmul(a, b), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(3)
    return g


def test_get_mlir_is_the_module_a_cpu_build_lowers_and_names_gpu_targets():
    text = _graph().get_mlir()
    assert "func.func @main" in text and "linalg" in text
    assert text == lowered_mlir(_graph(), hd.create_handle())
    assert "rocm:gfx942" in _graph().get_mlir("rocm:gfx942")
    raises(hd.Status.BAD_PARAM, _graph().get_mlir, 42)
