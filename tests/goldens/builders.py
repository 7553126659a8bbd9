"""Named frontend graph builders whose encoded bytes are goldens (tests/goldens/frontend.json).

Each builder makes one graph through a public frontend (``hd.Graph``, or the cuDNN facade
``hipdnn_iree.cudnn``) and returns the graph FlatBuffer bytes that frontend hands the engine
(``hd.Graph.to_hipdnn_graph()``: what ``build_operation_graph`` stores; for the facade, its
``hd_graph`` after ``build_operation_graph``). ``tests/test_goldens.py`` rebuilds every one and
compares the sha256 of its bytes with the stored one, then re-lowers the bytes.

Add a builder by adding a function to :data:`BUILDERS` and re-running ``tests/goldens/record.py``.
"""
from __future__ import annotations

import hipdnn_iree as hd

F, H, BF, D = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16, hd.DataType.DOUBLE
PM, RM = hd.PointwiseMode, hd.ReductionMode


def _g(io=F, **kw):
    return hd.Graph(name="golden", io_data_type=io, **kw)


def _bytes(g) -> bytes:
    return g.to_hipdnn_graph()


# -- hd.Graph builders ----------------------------------------------------------------------------
def mlp_bias_relu():
    g = _g()
    x = g.tensor(name="X", uid=1, dim=[8, 64, 128])
    w = g.tensor(name="W", uid=2, dim=[1, 128, 256], stride=[256 * 128, 1, 128])
    b = g.tensor(name="bias", uid=3, dim=[1, 1, 256])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=PM.ADD), mode=PM.RELU_FWD)
    y.set_output(True).set_uid(4)
    return _bytes(g)


def matmul_broadcast_batch_half():
    g = _g(H, compute_data_type=F)
    a = g.tensor(name="A", uid=1, dim=[2, 1, 4, 3])
    b = g.tensor(name="B", uid=2, dim=[5, 3, 6])
    g.matmul(a, b).set_output(True).set_uid(3)
    return _bytes(g)


def matmul_bf16_compute_f32():
    g = _g(BF)
    a = g.tensor(name="A", uid=1, dim=[16, 32])
    b = g.tensor(name="B", uid=2, dim=[32, 8])
    g.matmul(a, b, compute_data_type=F).set_output(True).set_uid(3)
    return _bytes(g)


def pointwise_unary_chain_double():
    g = _g(D)
    x = g.tensor(name="x", uid=1, dim=[3, 5])
    y = x
    for m in (PM.ABS, PM.EXP, PM.LOG, PM.SQRT, PM.TANH_FWD, PM.SIGMOID_FWD, PM.NEG):
        y = g.pointwise(y, mode=m)
    y.set_output(True).set_uid(2)
    return _bytes(g)


def pointwise_binary_scalars_broadcast():
    g = _g()
    x = g.tensor(name="x", uid=1, dim=[4, 1, 3])
    z = g.tensor(name="z", uid=2, dim=[2, 3])
    y = g.pointwise(x, z, mode=PM.MUL)
    y = g.pointwise(y, 2.5, mode=PM.ADD)
    y = g.pointwise(y, 0.5, mode=PM.MAX_OP)
    y = g.pointwise(y, z, mode=PM.SUB)
    y.set_output(True).set_uid(3)
    return _bytes(g)


def pointwise_params():
    g = _g()
    x = g.tensor(name="x", uid=1, dim=[2, 8])
    y = g.pointwise(x, mode=PM.ELU_FWD, alpha=0.7)
    y = g.pointwise(y, mode=PM.SWISH_FWD, beta=1.5)
    y = g.pointwise(y, mode=PM.SOFTPLUS_FWD, beta=2.0)
    y = g.pointwise(y, mode=PM.RELU_FWD, relu_lower_clip=-0.5, relu_upper_clip=3.0, relu_lower_clip_slope=0.1)
    y.set_output(True).set_uid(2)
    return _bytes(g)


def pointwise_ternary_select():
    g = _g()
    a = g.tensor(name="a", uid=1, dim=[2, 4])
    b = g.tensor(name="b", uid=2, dim=[2, 4])
    m = g.tensor(name="m", uid=3, dim=[2, 4], data_type=hd.DataType.BOOLEAN)
    g.pointwise(a, b, m, mode=PM.BINARY_SELECT).set_output(True).set_uid(4)
    return _bytes(g)


def pointwise_gen_index():
    g = _g()
    x = g.tensor(name="x", uid=1, dim=[3, 4])
    g.pointwise(x, mode=PM.GEN_INDEX, axis=1).set_output(True).set_uid(2)
    return _bytes(g)


def pointwise_strided_output():
    g = _g()
    x = g.tensor(name="x", uid=1, dim=[4, 6], stride=[1, 4])
    g.pointwise(x, mode=PM.RELU_FWD).set_output(True).set_uid(2).set_stride([1, 4])
    return _bytes(g)


def conv2d_nhwc_bias_relu():
    g = _g()
    x = g.tensor(name="X", uid=1, dim=[2, 8, 16, 16], stride=[8 * 256, 1, 16 * 8, 8])
    w = g.tensor(name="W", uid=2, dim=[16, 8, 3, 3], stride=[72, 1, 24, 8])
    b = g.tensor(name="B", uid=3, dim=[1, 16, 1, 1])
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[2, 2], dilation=[1, 1])
    y = g.pointwise(g.pointwise(y, b, mode=PM.ADD), mode=PM.RELU_FWD)
    y.set_output(True).set_uid(4)
    return _bytes(g)


def conv2d_grouped_asym_pad():
    g = _g()
    x = g.tensor(name="X", uid=1, dim=[1, 8, 9, 7])
    w = g.tensor(name="W", uid=2, dim=[4, 2, 3, 2])
    g.conv_fprop(x, w, pre_padding=[1, 0], post_padding=[2, 1], stride=[1, 2], dilation=[2, 1]).set_output(True).set_uid(3)
    return _bytes(g)


def conv2d_depthwise_half():
    g = _g(H, compute_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[1, 4, 8, 8])
    w = g.tensor(name="W", uid=2, dim=[4, 1, 3, 3])
    g.conv_fprop(x, w, padding=1).set_output(True).set_uid(3)
    return _bytes(g)


def conv1d_and_conv3d():
    g = _g()
    x = g.tensor(name="X", uid=1, dim=[2, 3, 10])
    w = g.tensor(name="W", uid=2, dim=[4, 3, 3])
    g.conv_fprop(x, w, padding=[1]).set_output(True).set_uid(3)
    x3 = g.tensor(name="X3", uid=4, dim=[1, 2, 4, 5, 6])
    w3 = g.tensor(name="W3", uid=5, dim=[3, 2, 2, 2, 2])
    g.conv_fprop(x3, w3, stride=[1, 2, 1]).set_output(True).set_uid(6)
    return _bytes(g)


def conv_dgrad_strided():
    g = _g()
    dy = g.tensor(name="dy", uid=1, dim=[2, 4, 4, 4])
    w = g.tensor(name="W", uid=2, dim=[4, 3, 3, 3])
    g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2]).set_dim([2, 3, 8, 8]).set_output(True).set_uid(3)
    return _bytes(g)


def conv_wgrad():
    g = _g()
    dy = g.tensor(name="dy", uid=1, dim=[2, 4, 8, 8])
    x = g.tensor(name="X", uid=2, dim=[2, 3, 8, 8])
    g.conv_wgrad(dy, x, padding=[1, 1]).set_dim([4, 3, 3, 3]).set_output(True).set_uid(3)
    return _bytes(g)


def reductions():
    g = _g()
    x = g.tensor(name="x", uid=1, dim=[2, 3, 4])
    for uid, mode, dims in ((2, RM.ADD, [2, 1, 4]), (3, RM.MAX, [1, 3, 1]), (4, RM.AVG, [2, 3, 1])):
        g.reduction(x, mode=mode).set_dim(dims).set_output(True).set_uid(uid)
    return _bytes(g)


def batchnorm_inference():
    g = _g()
    x = g.tensor(name="x", uid=1, dim=[2, 4, 5, 5])
    stats = [g.tensor(name=n, uid=2 + i, dim=[1, 4, 1, 1]) for i, n in enumerate(("mean", "iv", "scale", "bias"))]
    g.batchnorm_inference(x, *stats).set_output(True).set_uid(6)
    return _bytes(g)


def layernorm_training():
    g = _g()
    x = g.tensor(name="X", uid=1, dim=[2, 3, 8])
    s, b = g.tensor(name="scale", uid=2, dim=[1, 1, 8]), g.tensor(name="bias", uid=3, dim=[1, 1, 8])
    y, mean, iv = g.layernorm(x, s, b, epsilon=1e-5, forward_phase=hd.NormFwdPhase.TRAINING)
    y.set_output(True).set_uid(4)
    mean.set_output(True).set_uid(5)
    iv.set_output(True).set_uid(6)
    return _bytes(g)


def layernorm_inference_scalar_eps_bf16():
    g = _g(BF)
    x = g.tensor(name="X", uid=1, dim=[2, 3, 8])
    s, b = g.tensor(name="scale", uid=2, dim=[1, 3, 8]), g.tensor(name="bias", uid=3, dim=[1, 3, 8])
    eps = g.tensor(name="eps", uid=7, value=1e-3, data_type=F)
    g.layernorm(x, s, b, epsilon=eps)[0].set_output(True).set_uid(4)
    return _bytes(g)


def rmsnorm():
    g = _g(H)
    x = g.tensor(name="X", uid=1, dim=[2, 4, 16])
    s = g.tensor(name="scale", uid=2, dim=[16])
    g.rmsnorm(x, s, epsilon=1e-6).set_output(True).set_uid(3)
    return _bytes(g)


def sdpa_causal_gqa_half():
    g = _g(H, compute_data_type=F)
    q = g.tensor(name="Q", uid=1, dim=[1, 8, 16, 32])
    k = g.tensor(name="K", uid=2, dim=[1, 2, 16, 32])
    v = g.tensor(name="V", uid=3, dim=[1, 2, 16, 32])
    g.sdpa(q, k, v, is_causal=True).set_output(True).set_uid(4)
    return _bytes(g)


def sdpa_bool_mask_bshd():
    g = _g()
    b, h, s, d = 2, 2, 8, 16
    st = [s * h * d, d, h * d, 1]   # BSHD memory, BHSD logical
    q = g.tensor(name="Q", uid=1, dim=[b, h, s, d], stride=st)
    k = g.tensor(name="K", uid=2, dim=[b, h, s, d], stride=st)
    v = g.tensor(name="V", uid=3, dim=[b, h, s, d], stride=st)
    m = g.tensor(name="M", uid=5, dim=[s, s], data_type=hd.DataType.BOOLEAN)
    g.sdpa(q, k, v, attn_scale=0.125, mask=m).set_output(True).set_uid(4)
    return _bytes(g)


def sdpa_float_mask():
    g = _g()
    q = g.tensor(name="Q", uid=1, dim=[1, 2, 4, 8])
    k = g.tensor(name="K", uid=2, dim=[1, 2, 6, 8])
    v = g.tensor(name="V", uid=3, dim=[1, 2, 6, 4])
    m = g.tensor(name="M", uid=5, dim=[1, 1, 1, 6])
    g.sdpa(q, k, v, mask=m, is_causal=True).set_output(True).set_uid(4)
    return _bytes(g)


def dynamic_matmul():
    g = _g()
    g.set_dynamic_shape_enabled(True)
    a = g.tensor(name="A", uid=1, dim=[4, 16, 32])
    b = g.tensor(name="B", uid=2, dim=[1, 32, 8])
    g.matmul(a, b).set_output(True).set_uid(3)
    return _bytes(g)


def virtual_names_and_engine():
    g = _g()
    g.set_preferred_engine_id_ext("IREE_LINALG")
    x = g.tensor(name="x", uid=10, dim=[2, 2])
    t = g.pointwise(x, x, mode=PM.ADD, name="twice")
    t.set_name("tmp")
    g.pointwise(t, mode=PM.SQRT, name="root").set_output(True).set_uid(11).set_name("out")
    return _bytes(g)


# -- cuDNN facade builders --------------------------------------------------------------------------
def _cudnn():
    import hipdnn_iree.cudnn as cudnn
    return cudnn


def _cg(**kw):
    cudnn = _cudnn()
    return cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT, **kw)


def _cbytes(graph) -> bytes:
    graph.validate()
    graph.build_operation_graph(_cudnn().create_handle())
    return graph.hd_graph.get_op_graph_bytes()


def cudnn_conv_bias_relu():
    g = _cg()
    x = g.tensor(name="X", dim=[2, 8, 16, 16], stride=[2048, 1, 128, 8])
    w = g.tensor(name="W", dim=[16, 8, 3, 3], stride=[72, 1, 24, 8])
    b = g.tensor(name="B", dim=[1, 16, 1, 1], stride=[16, 1, 16, 16])
    y = g.relu(name="relu", input=g.bias(name="bias", input=g.conv_fprop(image=x, weight=w, padding=[1, 1],
                                                                          stride=[2, 2], dilation=[1, 1]), bias=b))
    y.set_output(True)
    return _cbytes(g)


def cudnn_matmul_scale_leaky():
    g = _cg()
    a = g.tensor(name="A", dim=[2, 8, 16], stride=[128, 16, 1])
    b = g.tensor(name="B", dim=[2, 16, 4], stride=[64, 4, 1])
    s = g.tensor(name="S", dim=[1, 1, 1], stride=[1, 1, 1])
    y = g.leaky_relu(input=g.scale(input=g.matmul(A=a, B=b), scale=s), negative_slope=0.2)
    y.set_output(True)
    return _cbytes(g)


def cudnn_layernorm_inference():
    cudnn = _cudnn()
    g = _cg()
    x = g.tensor(name="X", dim=[4, 32, 1, 1], stride=[32, 1, 32, 32])
    s = g.tensor(name="scale", dim=[1, 32, 1, 1], stride=[32, 1, 32, 32])
    b = g.tensor(name="bias", dim=[1, 32, 1, 1], stride=[32, 1, 32, 32])
    eps = g.tensor(name="eps", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True)
    y, _, _ = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=x, scale=s, bias=b, epsilon=eps)
    y.set_output(True)
    return _cbytes(g)


def cudnn_rmsnorm_training():
    cudnn = _cudnn()
    g = _cg()
    x = g.tensor(name="X", dim=[4, 32, 1, 1], stride=[32, 1, 32, 32])
    s = g.tensor(name="scale", dim=[1, 32, 1, 1], stride=[32, 1, 32, 32])
    eps = g.tensor(name="eps", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True)
    y, iv = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=x, scale=s, epsilon=eps)
    y.set_output(True)
    iv.set_output(True)
    return _cbytes(g)


def cudnn_batchnorm_inference():
    g = _cg()
    x = g.tensor(name="X", dim=[2, 4, 5, 5], stride=[100, 1, 20, 4])
    st = [g.tensor(name=n, dim=[1, 4, 1, 1], stride=[4, 1, 4, 4]) for n in ("mean", "iv", "scale", "bias")]
    g.batchnorm_inference(input=x, mean=st[0], inv_variance=st[1], scale=st[2], bias=st[3]).set_output(True)
    return _cbytes(g)


def cudnn_reduction():
    cudnn = _cudnn()
    g = _cg()
    x = g.tensor(name="X", dim=[2, 4, 6, 6], stride=[144, 36, 6, 1])
    y = g.reduction(input=x, mode=cudnn.reduction_mode.ADD)
    y.set_dim([2, 4, 1, 1]).set_output(True)
    return _cbytes(g)


def cudnn_sdpa_causal():
    cudnn = _cudnn()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    b, h, s, d = 1, 4, 16, 32
    st = [h * s * d, s * d, d, 1]
    q = g.tensor(name="Q", dim=[b, h, s, d], stride=st)
    k = g.tensor(name="K", dim=[b, h, s, d], stride=st)
    v = g.tensor(name="V", dim=[b, h, s, d], stride=st)
    o, _ = g.sdpa(q=q, k=k, v=v, is_inference=True, attn_scale=0.125, use_causal_mask=True, name="sdpa")
    o.set_output(True).set_dim([b, h, s, d]).set_stride(st)
    return _cbytes(g)


def cudnn_conv_dgrad_wgrad():
    g = _cg()
    dy = g.tensor(name="dy", dim=[2, 4, 8, 8], stride=[256, 1, 32, 4])
    w = g.tensor(name="W", dim=[4, 3, 3, 3], stride=[27, 1, 9, 3])
    dx = g.conv_dgrad(loss=dy, filter=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dx.set_dim([2, 3, 8, 8]).set_output(True)
    x = g.tensor(name="X", dim=[2, 3, 8, 8], stride=[192, 1, 24, 3])
    dw = g.conv_wgrad(image=x, loss=dy, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dw.set_dim([4, 3, 3, 3]).set_output(True)
    return _cbytes(g)


BUILDERS = {f.__name__: f for f in (
    mlp_bias_relu, matmul_broadcast_batch_half, matmul_bf16_compute_f32, pointwise_unary_chain_double,
    pointwise_binary_scalars_broadcast, pointwise_params, pointwise_ternary_select, pointwise_gen_index,
    pointwise_strided_output, conv2d_nhwc_bias_relu, conv2d_grouped_asym_pad, conv2d_depthwise_half,
    conv1d_and_conv3d, conv_dgrad_strided, conv_wgrad, reductions, batchnorm_inference, layernorm_training,
    layernorm_inference_scalar_eps_bf16, rmsnorm, sdpa_causal_gqa_half, sdpa_bool_mask_bshd, sdpa_float_mask,
    dynamic_matmul, virtual_names_and_engine,
    cudnn_conv_bias_relu, cudnn_matmul_scale_leaky, cudnn_layernorm_inference, cudnn_rmsnorm_training,
    cudnn_batchnorm_inference, cudnn_reduction, cudnn_sdpa_causal, cudnn_conv_dgrad_wgrad,
)}
