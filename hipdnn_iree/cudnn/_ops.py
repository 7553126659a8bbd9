"""cuDNN FE's op methods of ``cudnn.pygraph`` (conv, matmul, pointwise, norms, SDPA), each building
``hd.Graph`` nodes at once; mixed into ``pygraph``."""
from __future__ import annotations

import math
import numbers


from hipdnn_iree.cudnn import _composite
from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, PointwiseMode
from hipdnn_iree.cudnn._common import _translate, _unsupported
from hipdnn_iree.cudnn._tensor import tensor

_UNARY = {"abs": "ABS", "ceil": "CEIL", "floor": "FLOOR", "exp": "EXP", "log": "LOG", "neg": "NEG",
          "rsqrt": "RSQRT", "reciprocal": "RECIPROCAL", "sqrt": "SQRT", "sin": "SIN", "cos": "COS", "tan": "TAN",
          "erf": "ERF", "identity": "IDENTITY", "sigmoid": "SIGMOID_FWD", "tanh": "TANH_FWD", "gelu": "GELU_FWD",
          "gelu_approx_tanh": "GELU_APPROX_TANH_FWD", "logical_not": "LOGICAL_NOT"}
_BINARY_AB = {"add": "ADD", "sub": "SUB", "mul": "MUL", "div": "DIV", "add_square": "ADD_SQUARE",
              "logical_and": "LOGICAL_AND", "logical_or": "LOGICAL_OR"}
_BINARY_01 = {"max": "MAX_OP", "min": "MIN_OP", "pow": "POW", "mod": "MOD"}
_CMP = {"cmp_eq": "CMP_EQ", "cmp_neq": "CMP_NEQ", "cmp_gt": "CMP_GT", "cmp_ge": "CMP_GE", "cmp_lt": "CMP_LT",
        "cmp_le": "CMP_LE"}
# cuDNN FE's activation backward methods taking (loss, input) only (relu/leaky_relu_backward take clips)
_BACKWARD = {"tanh_backward": "TANH_BWD", "sigmoid_backward": "SIGMOID_BWD", "elu_backward": "ELU_BWD",
             "gelu_backward": "GELU_BWD", "gelu_approx_tanh_backward": "GELU_APPROX_TANH_BWD",
             "softplus_backward": "SOFTPLUS_BWD", "swish_backward": "SWISH_BWD"}


class OpMethods:
    """The op methods of ``pygraph`` (its state lives in pygraph.__init__)."""

    def _channels_last(self, hdt):
        """cuDNN's default for conv and reduction outputs left unset: packed channels-last (hd.Graph
        infers them in graph order at validate, virtual tensors included)."""
        return self._wrap(hdt._prefer_channels_last())

    def _wrap(self, hdt):
        if hdt is None:
            return None
        t = self._by_hd.get(id(hdt))
        if t is None:
            t = self._by_hd[id(hdt)] = tensor(self, hdt)
        return t

    def _in(self, x, what="input"):
        if x is None or (isinstance(x, numbers.Real) and not isinstance(x, bool)):
            return x
        if isinstance(x, tensor):
            if x._g is not self:
                raise HipdnnError(Status.BAD_PARAM, f"{what} '{x.get_name()}' belongs to another graph")
            return x._hd()
        raise HipdnnError(Status.BAD_PARAM, f"{what} must be a tensor of this graph (or a number), got "
                                            f"{type(x).__name__}")

    def _scalar(self, x, what: str):
        """A scalar whose value the plan bakes in (epsilon): a number, or a pass-by-value tensor whose
        value is read at every execute (the plan is rebuilt, through the compile cache, when it changes)."""
        if isinstance(x, tensor) and x._pbv:
            c = self._hd.tensor(name=f"{x.get_name()}_value", value=1e-5)
            self._eps.append((x, c))
            return c
        if isinstance(x, tensor):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: pass a number or a pass-by-value tensor "
                                                f"(is_pass_by_value=True), got tensor '{x.get_name()}'")
        if isinstance(x, numbers.Real) and not isinstance(x, bool):
            return float(x)
        raise HipdnnError(Status.BAD_PARAM, f"{what}: expected a number or a pass-by-value tensor, got {x!r}")

    @staticmethod
    def _cdt(compute_data_type):
        if compute_data_type is None:
            return None
        d = E.to_hd_type(compute_data_type, "compute_data_type")
        return None if d == DataType.NOT_SET else d

    # -- ops: convolution ------------------------------------------------------------------
    def _conv_kw(self, padding, pre_padding, post_padding, stride, dilation):
        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise HipdnnError(Status.BAD_PARAM, "conv: give padding or pre_padding/post_padding, not both")
        return dict(padding=padding, pre_padding=pre_padding, post_padding=post_padding, stride=stride,
                    dilation=dilation)

    @staticmethod
    def _conv_mode(kwargs):
        mode = kwargs.pop("convolution_mode", None)
        if mode is not None and str(mode).rsplit(".", 1)[-1].upper() not in ("CROSS_CORRELATION",):
            _unsupported(f"conv: convolution_mode {mode} is not supported (cross-correlation only)")
        if kwargs:
            raise TypeError(f"unexpected keyword argument(s): {sorted(kwargs)}")

    @_translate
    def conv_fprop(self, image, weight, padding=None, stride=None, dilation=None, compute_data_type=None, name="",
                   pre_padding=None, post_padding=None, **kwargs):
        self._conv_mode(kwargs)
        y = self._hd.conv_fprop(self._in(image, "image"), self._in(weight, "weight"),
                                compute_data_type=self._cdt(compute_data_type), name=name or None,
                                **self._conv_kw(padding, pre_padding, post_padding, stride, dilation))
        return self._channels_last(y)

    @_translate
    def conv_dgrad(self, loss, filter, padding=None, stride=None, dilation=None, compute_data_type=None, name="",
                   pre_padding=None, post_padding=None, **kwargs):
        self._conv_mode(kwargs)
        dx = self._hd.conv_dgrad(self._in(loss, "loss"), self._in(filter, "filter"),
                                 compute_data_type=self._cdt(compute_data_type), name=name or None,
                                 **self._conv_kw(padding, pre_padding, post_padding, stride, dilation))
        return self._channels_last(dx)

    @_translate
    def conv_wgrad(self, image, loss, padding=None, stride=None, dilation=None, compute_data_type=None, name="",
                   pre_padding=None, post_padding=None, **kwargs):
        self._conv_mode(kwargs)
        dw = self._hd.conv_wgrad(self._in(loss, "loss"), self._in(image, "image"),
                                 compute_data_type=self._cdt(compute_data_type), name=name or None,
                                 **self._conv_kw(padding, pre_padding, post_padding, stride, dilation))
        return self._channels_last(dw)

    # -- ops: matmul -------------------------------------------------------------------------
    @_translate
    def matmul(self, A, B, compute_data_type=None, padding=0.0, name="", **kwargs):
        if kwargs:
            raise TypeError(f"matmul: unexpected keyword argument(s): {sorted(kwargs)}")
        if padding not in (0, 0.0, None):
            self._defer(f"matmul: padding={padding!r} (the value ragged rows are padded with) is not supported")
        return self._wrap(self._hd.matmul(self._in(A, "A"), self._in(B, "B"),
                                          compute_data_type=self._cdt(compute_data_type), name=name or None))

    # -- ops: pointwise ----------------------------------------------------------------------
    def _pw(self, mode, a, b=None, c=None, compute_data_type=None, name="", **params):
        y = self._hd.pointwise(self._in(a), self._in(b), self._in(c), mode=PointwiseMode[mode],
                               compute_data_type=self._cdt(compute_data_type), name=name or None, **params)
        return self._wrap(y)

    @_translate
    def pointwise(self, mode, input0, input1=None, input2=None, compute_data_type=None, name=""):
        return self._pw(E.to_hd(PointwiseMode, mode, "pointwise mode").name if not isinstance(mode, E.pointwise_mode)
                        else PointwiseMode(int(mode)).name, input0, input1, input2, compute_data_type, name)

    @_translate
    def bias(self, input, bias, compute_data_type=None, name=""):
        return self._pw("ADD", input, bias, None, compute_data_type, name)

    @_translate
    def scale(self, input, scale, compute_data_type=None, name=""):
        return self._pw("MUL", input, scale, None, compute_data_type, name)

    @_translate
    def relu(self, input, negative_slope=None, lower_clip=None, upper_clip=None, lower_clip_slope=None,
             compute_data_type=None, name=""):
        slope = negative_slope if negative_slope is not None else lower_clip_slope
        return self._pw("RELU_FWD", input, None, None, compute_data_type, name, relu_lower_clip=lower_clip,
                        relu_upper_clip=upper_clip, relu_lower_clip_slope=slope)

    @_translate
    def leaky_relu(self, input, negative_slope=0.01, compute_data_type=None, name=""):
        return self._pw("RELU_FWD", input, None, None, compute_data_type, name, relu_lower_clip_slope=negative_slope)

    @_translate
    def elu(self, input, alpha=1.0, compute_data_type=None, name=""):
        return self._pw("ELU_FWD", input, None, None, compute_data_type, name, alpha=alpha)

    @_translate
    def swish(self, input, swish_beta=1.0, compute_data_type=None, name=""):
        return self._pw("SWISH_FWD", input, None, None, compute_data_type, name, beta=swish_beta)

    @_translate
    def softplus(self, input, softplus_beta=1.0, compute_data_type=None, name=""):
        return self._pw("SOFTPLUS_FWD", input, None, None, compute_data_type, name, beta=softplus_beta)

    @_translate
    def gen_index(self, input, axis, compute_data_type=None, name=""):
        return self._pw("GEN_INDEX", input, None, None, compute_data_type, name, axis=axis)

    @_translate
    def binary_select(self, input0, input1, mask, compute_data_type=None, name=""):
        return self._pw("BINARY_SELECT", input0, input1, mask, compute_data_type, name)

    # -- ops: activation backward (cuDNN FE's *_backward pointwise: loss = dy, input = x) -----------
    @_translate
    def relu_backward(self, loss, input, negative_slope=None, lower_clip=None, upper_clip=None,
                      compute_data_type=None, name=""):
        return self._pw("RELU_BWD", loss, input, None, compute_data_type, name, relu_lower_clip=lower_clip,
                        relu_upper_clip=upper_clip, relu_lower_clip_slope=negative_slope)

    @_translate
    def leaky_relu_backward(self, loss, input, negative_slope, compute_data_type=None, name=""):
        return self._pw("RELU_BWD", loss, input, None, compute_data_type, name, relu_lower_clip_slope=negative_slope)

    # -- ops: reductions and normalizations -----------------------------------------------------
    @_translate
    def reduction(self, input, mode, compute_data_type=None, name=""):
        y = self._hd.reduction(self._in(input), mode=E.to_hd(E.HD_REDUCTION, mode, "reduction mode"),
                               compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._channels_last(y)

    @_translate
    def batchnorm_inference(self, input, mean, inv_variance, scale, bias, compute_data_type=None, name=""):
        y = self._hd.batchnorm_inference(self._in(input), self._in(mean, "mean"), self._in(inv_variance, "inv_variance"),
                                         self._in(scale, "scale"), self._in(bias, "bias"),
                                         compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._wrap(y)

    @_translate
    def layernorm(self, norm_forward_phase, input, scale, bias, epsilon, compute_data_type=None, name="",
                  zero_centered_gamma=False):
        if zero_centered_gamma:
            self._defer("layernorm: zero_centered_gamma is not supported")
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "layernorm norm_forward_phase")
        if phase == E.HD_PHASE.NOT_SET:
            phase = E.HD_PHASE.INFERENCE
        y, mean, inv = self._hd.layernorm(self._in(input), self._in(scale, "scale"), self._in(bias, "bias"),
                                          epsilon=self._scalar(epsilon, "layernorm epsilon"), forward_phase=phase,
                                          compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._wrap(y), self._wrap(mean), self._wrap(inv)

    @_translate
    def rmsnorm(self, norm_forward_phase, input, scale, bias=None, epsilon=None, compute_data_type=None, name=""):
        """``(Y, inv_variance)``: ``inv_variance`` is None in INFERENCE; in TRAINING it has dims
        ``[N, 1, ...]`` (the statistic over every axis but the batch axis, as cuDNN's) and the
        graph computes it with pointwise and reduction nodes (this engine's RMSNorm node has no
        statistics output)."""
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "rmsnorm norm_forward_phase")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "rmsnorm: epsilon is required")
        eps = self._scalar(epsilon, "rmsnorm epsilon")
        cdt = self._cdt(compute_data_type)
        x = self._in(input)
        inv = None
        if phase == E.HD_PHASE.TRAINING:
            dims = input.get_dim()
            if not dims or len(dims) < 2:
                raise HipdnnError(Status.BAD_PARAM, f"rmsnorm: input dims {dims}: TRAINING needs a batch axis and "
                                                    "at least one normalized axis")
            hd = self._hd
            sq = hd.pointwise(x, x, mode=PointwiseMode.MUL, compute_data_type=cdt)
            ms = hd.reduction(sq, mode=E.HD_REDUCTION.AVG, compute_data_type=cdt).set_dim([dims[0]] + [1] * (len(dims) - 1))
            inv = hd.pointwise(hd.pointwise(ms, eps, mode=PointwiseMode.ADD, compute_data_type=cdt),
                               mode=PointwiseMode.RSQRT, compute_data_type=cdt, name=name or None)
            y = hd.pointwise(hd.pointwise(x, inv, mode=PointwiseMode.MUL, compute_data_type=cdt), self._in(scale, "scale"),
                             mode=PointwiseMode.MUL, compute_data_type=cdt)
        else:
            y = self._hd.rmsnorm(x, self._in(scale, "scale"), epsilon=eps, compute_data_type=cdt, name=name or None)
        if bias is not None:   # cuDNN's rmsnorm adds its bias after the scale: an ADD node here
            y = self._hd.pointwise(y, self._in(bias, "bias"), mode=PointwiseMode.ADD, compute_data_type=cdt)
        return self._wrap(y), self._wrap(inv)

    # -- ops: training norms and genstats (hipdnn_iree/cudnn/_composite.py composes them) -----------------
    def _composer(self, compute_data_type):
        return _composite.Composer(self._hd, self._cdt(compute_data_type))

    def _dims_of(self, t, what: str):
        """``t``'s dims; an op output's are inferred now (hd.Graph infers them at validate) when unset."""
        if not isinstance(t, tensor):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: expected a tensor of this graph, got {type(t).__name__}")
        dims = t.get_dim()
        if dims:
            return list(dims)
        try:
            return self._hd._dims_now(t._hd())
        except HipdnnError as e:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: its dims are not set and cannot be inferred yet: "
                                                f"{e.message}") from None

    def _named(self, t, name, suffix):
        """A composed op's output named as cuDNN names it; Y and DX take the graph's default type (the
        io type once they are outputs), as cuDNN's do; statistics stay FLOAT unless set."""
        if t is None:
            return None
        if name:
            t.set_name(f"{name}::{suffix}")
        if suffix in ("Y", "DX"):
            t.set_data_type(DataType.NOT_SET)
        return self._wrap(t)

    @_translate
    def batchnorm(self, input, scale, bias, in_running_mean=None, in_running_var=None, epsilon=None, momentum=None,
                  peer_stats=None, compute_data_type=None, name=""):
        """Batchnorm training: ``[Y, mean, inv_variance, next_running_mean, next_running_var]``, the
        statistics over every axis but the channel axis (``[1, C, 1, ...]``, FLOAT); the saved
        inv_variance is ``1/sqrt(biased var + epsilon)``; the running statistics are
        ``(1 - momentum) * old + momentum * batch`` (unbiased variance), None without running inputs."""
        if peer_stats:
            self._defer("batchnorm: peer_stats (statistics shared across GPUs) are not supported")
        dims = self._dims_of(input, "batchnorm input")
        if len(dims) < 2:
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm: input dims {dims} need a channel axis")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "batchnorm: epsilon is required")
        if (in_running_mean is None) != (in_running_var is None):
            raise HipdnnError(Status.BAD_PARAM, "batchnorm: give in_running_mean and in_running_var together")
        stats = [1, dims[1]] + [1] * (len(dims) - 2)
        c = self._composer(compute_data_type)
        y, mean, inv, var = _composite.norm_forward(c, self._in(input), dims, stats, self._in(scale, "scale"),
                                                    self._in(bias, "bias"), self._scalar(epsilon, "batchnorm epsilon"))
        next_mean = next_var = None
        if in_running_mean is not None:
            if momentum is None:
                raise HipdnnError(Status.BAD_PARAM, "batchnorm: momentum is required with running statistics")
            m = self._scalar(momentum, "batchnorm momentum")
            count = _composite.reduced_count(dims, stats)
            unbiased = c.pw("MUL", var, count / max(count - 1, 1))
            # (1 - m) * old + m * new, as old + m * (new - old): m may be a baked pass-by-value scalar
            old_mean, old_var = self._in(in_running_mean, "in_running_mean"), self._in(in_running_var, "in_running_var")
            next_mean = c.pw("ADD", old_mean, c.pw("MUL", c.pw("SUB", mean, old_mean), m))
            next_var = c.pw("ADD", old_var, c.pw("MUL", c.pw("SUB", unbiased, old_var), m))
            next_mean.set_dim(stats), next_var.set_dim(stats)
        return (self._named(y, name, "Y"), self._named(mean, name, "MEAN"), self._named(inv, name, "INV_VARIANCE"),
                self._named(next_mean, name, "NEXT_RUNNING_MEAN"), self._named(next_var, name, "NEXT_RUNNING_VAR"))

    def _norm_backward(self, what, grad, input, scale, mean, inv_variance, stats_of, centered=True, want_dbias=True,
                       epsilon=None, compute_data_type=None, name=""):
        dims = self._dims_of(input, f"{what} input")
        sdims = self._dims_of(scale, f"{what} scale")
        _composite.check_stats_dims(what, dims, sdims, "scale")
        c = self._composer(compute_data_type)
        x = self._in(input)
        if inv_variance is None:
            if epsilon is None:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: give mean and inv_variance, or epsilon to compute them")
            _, m, inv, _ = _composite.norm_forward(c, x, dims, stats_of, None, None, self._scalar(epsilon, f"{what} epsilon"),
                                                   centered)
        else:
            stats = self._dims_of(inv_variance, f"{what} inv_variance")
            _composite.check_stats_dims(what, dims, stats, "inv_variance")
            stats_of = stats
            inv = self._in(inv_variance, "inv_variance")
            m = self._in(mean, "mean") if centered else None
            if centered and m is None:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: mean is required with inv_variance")
        dx, dscale, dbias = _composite.norm_backward(c, self._in(grad, "grad"), x, dims, stats_of,
                                                     self._in(scale, "scale"), sdims, m, inv, centered, want_dbias)
        return self._named(dx, name, "DX"), self._named(dscale, name, "DSCALE"), self._named(dbias, name, "DBIAS")

    @_translate
    def batchnorm_backward(self, grad, input, scale, mean=None, inv_variance=None, epsilon=None, peer_stats=None,
                           compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of batchnorm training (saved mean and inv_variance, or epsilon to
        recompute them from the input)."""
        if peer_stats:
            self._defer("batchnorm_backward: peer_stats (statistics shared across GPUs) are not supported")
        dims = self._dims_of(input, "batchnorm_backward input")
        stats = [1, dims[1]] + [1] * (len(dims) - 2) if len(dims) >= 2 else None
        return self._norm_backward("batchnorm_backward", grad, input, scale, mean, inv_variance, stats,
                                   epsilon=epsilon, compute_data_type=compute_data_type, name=name)

    @_translate
    def layernorm_backward(self, grad, input, scale, mean, inv_variance, compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of layernorm (statistics over the axes where ``mean`` has 1)."""
        return self._norm_backward("layernorm_backward", grad, input, scale, mean, inv_variance, None,
                                   compute_data_type=compute_data_type, name=name)

    @_translate
    def rmsnorm_backward(self, grad, input, scale, inv_variance, has_dbias=False, compute_data_type=None, name=""):
        """``[DX, dscale, dbias or None]`` of rmsnorm (statistics over the axes where ``inv_variance`` has 1)."""
        return self._norm_backward("rmsnorm_backward", grad, input, scale, None, inv_variance, None, centered=False,
                                   want_dbias=bool(has_dbias), compute_data_type=compute_data_type, name=name)

    @_translate
    def instancenorm(self, norm_forward_phase, input, scale, bias, epsilon, compute_data_type=None, name=""):
        """``[Y, mean, inv_variance]``: statistics per sample and channel over the spatial axes
        (``[N, C, 1, ...]``, FLOAT); mean and inv_variance are None in INFERENCE."""
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "instancenorm norm_forward_phase")
        dims = self._dims_of(input, "instancenorm input")
        if len(dims) < 3:
            raise HipdnnError(Status.BAD_PARAM, f"instancenorm: input dims {dims} need spatial axes")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "instancenorm: epsilon is required")
        stats = dims[:2] + [1] * (len(dims) - 2)
        y, mean, inv, _ = _composite.norm_forward(self._composer(compute_data_type), self._in(input), dims, stats,
                                                  self._in(scale, "scale"), self._in(bias, "bias"),
                                                  self._scalar(epsilon, "instancenorm epsilon"))
        if phase != E.HD_PHASE.TRAINING:
            return self._named(y, name, "Y"), None, None
        return self._named(y, name, "Y"), self._named(mean, name, "MEAN"), self._named(inv, name, "INV_VARIANCE")

    @_translate
    def instancenorm_backward(self, grad, input, scale, mean=None, inv_variance=None, epsilon=None,
                              compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of instancenorm (saved mean and inv_variance, or epsilon to recompute them)."""
        dims = self._dims_of(input, "instancenorm_backward input")
        stats = dims[:2] + [1] * (len(dims) - 2)
        return self._norm_backward("instancenorm_backward", grad, input, scale, mean, inv_variance, stats,
                                   epsilon=epsilon, compute_data_type=compute_data_type, name=name)

    @_translate
    def genstats(self, input, compute_data_type=None, name=""):
        """``[sum, sq_sum]``: per-channel sum and sum of squares over every other axis (``[1, C, 1, ...]``)."""
        dims = self._dims_of(input, "genstats input")
        if len(dims) < 2:
            raise HipdnnError(Status.BAD_PARAM, f"genstats: input dims {dims} need a channel axis")
        stats = [1, dims[1]] + [1] * (len(dims) - 2)
        c = self._composer(compute_data_type)
        x = self._in(input)
        return self._named(c.sum(x, stats), name, "SUM"), self._named(c.sum(c.pw("MUL", x, x), stats), name, "SQ_SUM")

    # -- ops: attention ---------------------------------------------------------------------------
    @_translate
    def sdpa(self, q, k, v, attn_scale=None, bias=None, is_inference=None, generate_stats=None,
             use_alibi_mask=False, use_padding_mask=False, seq_len_q=None, seq_len_kv=None, use_causal_mask=False,
             use_causal_mask_bottom_right=False, sliding_window_length=None, dropout=None, rng_dump=None,
             paged_attention_k_table=None, paged_attention_v_table=None, paged_attention_max_seq_len_kv=None,
             compute_data_type=None, name="", **kwargs):
        if kwargs:
            raise TypeError(f"sdpa: unexpected keyword argument(s): {sorted(kwargs)}")
        stats = generate_stats if generate_stats is not None else (is_inference is False)
        for flag, what in ((use_alibi_mask, "use_alibi_mask"), (use_padding_mask, "use_padding_mask"),
                           (sliding_window_length is not None, "sliding_window_length"),
                           (dropout is not None, "dropout"), (rng_dump is not None, "rng_dump"),
                           (paged_attention_k_table is not None or paged_attention_v_table is not None,
                            "paged attention"), (seq_len_q is not None or seq_len_kv is not None, "seq_len_q/kv")):
            if flag:
                self._defer(f"sdpa: {what} is not supported by this engine")
        causal = bool(use_causal_mask)
        if use_causal_mask_bottom_right:
            qd, kd = q.get_dim(), k.get_dim()
            if qd is None or kd is None or qd[2] != kd[2]:
                self._defer("sdpa: use_causal_mask_bottom_right with Sq != Skv is not supported (this engine "
                            "aligns the causal mask top-left; the two agree only when Sq == Skv)")
            causal = True
        scale = attn_scale
        if isinstance(scale, tensor):
            scale = self._in(scale, "attn_scale")
        elif scale is not None and not (isinstance(scale, numbers.Real) and not isinstance(scale, bool)):
            raise HipdnnError(Status.BAD_PARAM, f"sdpa: attn_scale must be a number or a tensor, got {scale!r}")
        o = self._hd.sdpa(self._in(q, "q"), self._in(k, "k"), self._in(v, "v"), attn_scale=scale, is_causal=causal,
                          mask=self._in(bias, "bias"), compute_data_type=self._cdt(compute_data_type),
                          name=name or None)
        st = self._sdpa_stats(q, k, scale, bias, causal) if stats else None
        return self._wrap(o), st

    def _sdpa_stats(self, q, k, scale, bias, causal):
        """cuDNN's Stats, ``max + log(sum(exp(s - max)))`` of the scaled (masked) scores per query row
        ([B, H, Sq, 1], FLOAT), composed from matmul, pointwise and reduction nodes: this engine's
        SDPA node has no statistics output. K^T is K's buffer seen with its last two axes swapped
        (an extra graph input bound to K's buffer at execute)."""
        qd, kd, ks = q.get_dim(), k.get_dim(), k.get_stride()
        if qd is None or kd is None or len(qd) != 4 or qd[1] != kd[1]:
            _unsupported(f"sdpa: Stats with grouped-query heads (q dims {qd}, k dims {kd}) are not supported; "
                         "generate_stats=False works")
        hd = self._hd
        F = DataType.FLOAT
        kt = hd.tensor(name=f"{k.get_name()}::T", dim=[kd[0], kd[1], kd[3], kd[2]], stride=[ks[0], ks[1], ks[3], ks[2]],
                       data_type=k._hd().get_data_type())
        self._aliases.append((kt, k))
        sc = hd.matmul(self._in(q), kt, compute_data_type=F)
        factor = scale if scale is not None else 1.0 / math.sqrt(qd[3])
        sc = hd.pointwise(sc, factor, mode=PointwiseMode.MUL, compute_data_type=F)
        if bias is not None:
            sc = hd.pointwise(sc, self._in(bias, "bias"), mode=PointwiseMode.ADD, compute_data_type=F)
        if causal:   # NOTE: masked scores get -1e30: exp() of them is exactly 0, and no row is all masked
            row = hd.pointwise(sc, mode=PointwiseMode.GEN_INDEX, axis=2, compute_data_type=F)
            col = hd.pointwise(sc, mode=PointwiseMode.GEN_INDEX, axis=3, compute_data_type=F)
            keep = hd.pointwise(row, col, mode=PointwiseMode.CMP_GE, compute_data_type=F)
            sc = hd.pointwise(sc, -1e30, keep, mode=PointwiseMode.BINARY_SELECT, compute_data_type=F)
        rows = [qd[0], qd[1], qd[2], 1]
        mx = hd.reduction(sc, mode=E.HD_REDUCTION.MAX, compute_data_type=F).set_dim(rows)
        e = hd.pointwise(hd.pointwise(sc, mx, mode=PointwiseMode.SUB, compute_data_type=F), mode=PointwiseMode.EXP,
                         compute_data_type=F)
        sm = hd.reduction(e, mode=E.HD_REDUCTION.ADD, compute_data_type=F).set_dim(rows)
        st = hd.pointwise(mx, hd.pointwise(sm, mode=PointwiseMode.LOG, compute_data_type=F), mode=PointwiseMode.ADD,
                          compute_data_type=F)
        return self._wrap(st).set_data_type(E.data_type.FLOAT)
