"""cuDNN FE's op methods of ``cudnn.pygraph`` (conv, matmul, pointwise, norms, SDPA), each building
``hd.Graph`` nodes at once; mixed into ``pygraph``."""
from __future__ import annotations

import builtins
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

    # -- ops: slice ---------------------------------------------------------------------------
    @_translate
    def slice(self, input, slices=(), compute_data_type=None, name="", **kwargs):
        """cuDNN FE's ``slice`` (Python slices, one per leading axis; steps > 0): a graph input's
        slice is a view of the caller's buffer (cuDNN FE's pointer-arithmetic form, used below
        cuDNN 9.22): an extra graph input with the sliced dims and the input's strides times the
        steps, bound at execute to the input's buffer from the slice's first element. Slicing an
        op's result (a virtual tensor) is NOT_SUPPORTED: hipDNN's graph has no slice node."""
        if kwargs:
            raise TypeError(f"slice: unexpected keyword argument(s): {sorted(kwargs)}")
        if not isinstance(input, tensor) or input._g is not self:
            raise HipdnnError(Status.BAD_PARAM, "slice: input must be a tensor of this graph")
        src = input._hd()
        if input._pbv or id(src) not in self._inputs or src.get_is_virtual():
            _unsupported(f"slice: '{input.get_name()}' is not a graph input: only graph inputs can be sliced here "
                         "(a view of the caller's buffer); slicing an op's result needs a slice node, which "
                         "hipDNN's graph has not")
        if input._reorder is not None:
            _unsupported(f"slice: '{input.get_name()}' is declared with reordering {input._reorder}")
        dims, strides = src.get_dim(), src.get_stride()
        if not dims or not strides:
            raise HipdnnError(Status.BAD_PARAM, f"slice: set the dims and strides of '{input.get_name()}' first")
        slices = list(slices or ())
        if len(slices) > len(dims):
            raise HipdnnError(Status.BAD_PARAM, f"slice: {len(slices)} slices for a tensor of rank {len(dims)}")
        out_d, out_s, offset = [], [], 0
        for i, d in enumerate(dims):
            sl = slices[i] if i < len(slices) else builtins.slice(None)
            if not isinstance(sl, builtins.slice):
                raise HipdnnError(Status.BAD_PARAM, f"slice: slices[{i}] must be a Python slice, got {sl!r}")
            start, stop, step = sl.indices(int(d))
            if step <= 0:
                raise HipdnnError(Status.BAD_PARAM, f"slice: slices[{i}] has step {step}: steps must be positive")
            n = len(range(start, stop, step))
            if n == 0:
                raise HipdnnError(Status.BAD_PARAM, f"slice: slices[{i}] ({sl}) of an axis of {d} is empty")
            out_d.append(n)
            out_s.append(int(strides[i]) * step)
            offset += start * int(strides[i])
        view = self._hd.tensor(name=name or f"{input.get_name()}::slice", dim=out_d, stride=out_s,
                               data_type=src.get_data_type())
        self._aliases.append((view, input, offset))
        return self._wrap(view)

    # -- ops: pointwise ----------------------------------------------------------------------
    def _pw(self, mode, a, b=None, c=None, compute_data_type=None, name="", **params):
        y = self._hd.pointwise(self._in(a), self._in(b), self._in(c), mode=PointwiseMode[mode],
                               compute_data_type=self._cdt(compute_data_type), name=name or None, **params)
        return self._wrap(y._like_input())   # cuDNN's pointwise rule: unset strides copied from an input

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
        """``(Y, inv_variance)``: ``inv_variance`` is None in INFERENCE; in TRAINING it has 1 on the
        normalized axes (``[N, 1, ...]``, every axis but the batch axis, as cuDNN's), FLOAT. On
        hd.Graph.rmsnorm (``forward_phase``, ``bias``); ``bias`` is added after the scale."""
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "rmsnorm norm_forward_phase")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "rmsnorm: epsilon is required")
        eps = self._scalar(epsilon, "rmsnorm epsilon")
        cdt = self._cdt(compute_data_type)
        x = self._in(input)
        training = phase == E.HD_PHASE.TRAINING
        if _hd_has(self._hd, "rmsnorm", "forward_phase"):
            out = self._hd.rmsnorm(x, self._in(scale, "scale"), epsilon=eps,
                                   forward_phase=E.HD_PHASE.TRAINING if training else E.HD_PHASE.INFERENCE,
                                   bias=self._in(bias, "bias"), compute_data_type=cdt, name=name or None)
            return self._settled(out if training else (out, None), name, ("Y", "INV_VARIANCE"))
        inv = None       # an hd.Graph whose RMSNorm node has neither statistics nor bias: composed
        if training:
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
        if bias is not None:
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

    def _settled(self, outs, name="", suffixes=()):
        """A node's outputs, wrapped, named ``name::SUFFIX`` as cuDNN names them, their dims inferred
        now when unset (cuDNN code sizes its output buffers from ``get_dim()`` before validate;
        hd.Graph infers dims at validate)."""
        res = []
        for t, suffix in zip(outs, suffixes or [None] * len(outs)):
            if t is not None and name and suffix:
                t.set_name(f"{name}::{suffix}")
            if t is not None and not t.get_dim():
                try:
                    self._hd._dims_now(t)
                except HipdnnError:
                    pass               # validate says what is wrong, at validate
            res.append(self._wrap(t))
        return tuple(res)

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
        if in_running_mean is not None and momentum is None:
            raise HipdnnError(Status.BAD_PARAM, "batchnorm: momentum is required with running statistics")
        if _hd_has(self._hd, "batchnorm", kind="BATCHNORM"):
            kw = {} if in_running_mean is None else dict(
                momentum=self._scalar(momentum, "batchnorm momentum"),
                in_running_mean=self._in(in_running_mean, "in_running_mean"),
                in_running_var=self._in(in_running_var, "in_running_var"))
            out = self._hd.batchnorm(self._in(input), self._in(scale, "scale"), self._in(bias, "bias"),
                                     epsilon=self._scalar(epsilon, "batchnorm epsilon"),
                                     compute_data_type=self._cdt(compute_data_type), name=name or None, **kw)
            return self._settled(out, name, ("Y", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"))
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
        if _hd_has(self._hd, "batchnorm_backward", kind="BATCHNORM_BACKWARD"):
            out = self._hd.batchnorm_backward(
                self._in(grad, "grad"), self._in(input), self._in(scale, "scale"), self._in(mean, "mean"),
                self._in(inv_variance, "inv_variance"),
                epsilon=None if epsilon is None or inv_variance is not None else
                self._scalar(epsilon, "batchnorm_backward epsilon"),     # cuDNN: saved statistics win
                compute_data_type=self._cdt(compute_data_type), name=name or None)
            return self._settled(out, name, ("DX", "DSCALE", "DBIAS"))
        dims = self._dims_of(input, "batchnorm_backward input")
        stats = [1, dims[1]] + [1] * (len(dims) - 2) if len(dims) >= 2 else None
        return self._norm_backward("batchnorm_backward", grad, input, scale, mean, inv_variance, stats,
                                   epsilon=epsilon, compute_data_type=compute_data_type, name=name)

    @_translate
    def layernorm_backward(self, grad, input, scale, mean, inv_variance, compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of layernorm (statistics over the axes where ``mean`` has 1)."""
        if _hd_has(self._hd, "layernorm_backward", kind="LAYERNORM_BACKWARD"):
            out = self._hd.layernorm_backward(self._in(grad, "grad"), self._in(input), self._in(scale, "scale"),
                                              self._in(mean, "mean"), self._in(inv_variance, "inv_variance"),
                                              compute_data_type=self._cdt(compute_data_type), name=name or None)
            return self._settled(out, name, ("DX", "DSCALE", "DBIAS"))
        return self._norm_backward("layernorm_backward", grad, input, scale, mean, inv_variance, None,
                                   compute_data_type=compute_data_type, name=name)

    @_translate
    def rmsnorm_backward(self, grad, input, scale, inv_variance, has_dbias=False, compute_data_type=None, name=""):
        """``[DX, dscale, dbias or None]`` of rmsnorm (statistics over the axes where ``inv_variance`` has 1)."""
        if _hd_has(self._hd, "rmsnorm_backward", kind="RMSNORM_BACKWARD"):
            out = self._hd.rmsnorm_backward(self._in(grad, "grad"), self._in(input), self._in(scale, "scale"),
                                            self._in(inv_variance, "inv_variance"), has_dbias=bool(has_dbias),
                                            compute_data_type=self._cdt(compute_data_type), name=name or None)
            return self._settled(out, name, ("DX", "DSCALE", "DBIAS"))
        return self._norm_backward("rmsnorm_backward", grad, input, scale, None, inv_variance, None, centered=False,
                                   want_dbias=bool(has_dbias), compute_data_type=compute_data_type, name=name)

    # -- ops: block scaling -------------------------------------------------------------------
    @_translate
    def block_scale_quantize(self, input, block_size, axis=None, transpose=False, compute_data_type=None, name=""):
        """``[Y, scale]`` (cuDNN FE's block_scale_quantize): Y FP8_E4M3 and scale FP8_E8M0 unless
        set otherwise with ``set_data_type`` before the graph is built (FP4_E2M1 with an FP8_E4M3
        scale for NVFP4); see ``hd.Graph.block_scale_quantize``."""
        if isinstance(block_size, (list, tuple)):
            if len(block_size) != 1:
                raise HipdnnError(Status.BAD_PARAM, f"block_scale_quantize: block_size {list(block_size)} must be one size")
            block_size = block_size[0]
        y, s = self._hd.block_scale_quantize(self._in(input), int(block_size), axis=axis, transpose=bool(transpose),
                                             compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._settled([y, s], name, ("Y", "SCALE"))

    @_translate
    def block_scale_dequantize(self, input, scale, block_size, is_negative_scale=False, compute_data_type=None,
                               name=""):
        """``Y = input * scale`` over blocks (cuDNN FE's block_scale_dequantize); Y takes the graph's
        default type. ``is_negative_scale=True`` is not supported (NOT_SUPPORTED at build)."""
        if is_negative_scale:
            self._defer("block_scale_dequantize: is_negative_scale=True is not supported")
        y = self._hd.block_scale_dequantize(self._in(input), self._in(scale, "scale"), block_size,
                                            compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._settled([y], name, ("Y",))[0]

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
    def _sdpa_mask(self, what, q, k, use_causal_mask, use_causal_mask_bottom_right, diagonal_alignment,
                   left_bound, right_bound, sliding_window_length):
        """cuDNN's masking arguments (the preferred diagonal band, or the deprecated causal flags)
        as this engine's one mask, top-left causal: returns ``is_causal``; every band this engine
        cannot express is recorded (refused at validate and the build steps)."""
        if use_causal_mask and use_causal_mask_bottom_right:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: use_causal_mask and use_causal_mask_bottom_right cannot "
                                                "both be true")
        if (use_causal_mask or use_causal_mask_bottom_right) and right_bound is not None:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: use_causal_mask(_bottom_right) and "
                                                "diagonal_band_right_bound cannot be set at the same time")
        if sliding_window_length is not None and left_bound is not None:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: sliding_window_length and diagonal_band_left_bound cannot "
                                                "be set at the same time")
        align = E.to_hd(E.diagonal_alignment, diagonal_alignment, f"{what} diagonal_alignment") \
            if diagonal_alignment is not None else E.diagonal_alignment.TOP_LEFT
        if use_causal_mask:
            align, right_bound = E.diagonal_alignment.TOP_LEFT, 0
        if use_causal_mask_bottom_right:
            align, right_bound = E.diagonal_alignment.BOTTOM_RIGHT, 0
        if sliding_window_length is not None:
            left_bound = sliding_window_length
        if left_bound is not None:
            self._defer(f"{what}: diagonal_band_left_bound / sliding window ({left_bound}) is not supported by this "
                        "engine (no mask but top-left causal)", at_validate=True)
        if right_bound is None:
            return False
        if isinstance(right_bound, bool) or not isinstance(right_bound, numbers.Integral) or right_bound < 0:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: diagonal_band_right_bound must be an int >= 0 or None, "
                                                f"got {right_bound!r}")
        if right_bound != 0:
            self._defer(f"{what}: diagonal_band_right_bound={right_bound} is not supported by this engine (0, the "
                        "causal mask, is)", at_validate=True)
            return False
        if int(align) == int(E.diagonal_alignment.BOTTOM_RIGHT):
            qd, kd = q.get_dim(), k.get_dim()
            if not qd or not kd or len(qd) != 4 or len(kd) != 4 or qd[2] != kd[2]:
                self._defer(f"{what}: a bottom-right aligned causal mask with S_q != S_kv (q dims {qd}, k dims {kd}) "
                            "is not supported by this engine (its causal mask is top-left aligned; the two agree "
                            "only when S_q == S_kv)", at_validate=True)
                return False
        return True

    def _sdpa_scale(self, what, attn_scale):
        """cuDNN's attn_scale: unset is 1.0 (hd.Graph's unset is 1/sqrt(D): the scale goes explicitly)."""
        if attn_scale is None:
            return 1.0
        if isinstance(attn_scale, tensor):
            return self._in(attn_scale, "attn_scale")
        if isinstance(attn_scale, bool) or not isinstance(attn_scale, numbers.Real):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: attn_scale must be a number or a tensor, got {attn_scale!r}")
        return float(attn_scale)

    def _sdpa_refuse(self, what, pairs):
        for flag, feature in pairs:
            if flag:
                self._defer(f"{what}: {feature} is not supported by this engine", at_validate=True)

    @_translate
    def sdpa(self, q, k, v, is_inference=None, attn_scale=None, bias=None, block_mask=None, use_alibi_mask=False,
             use_padding_mask=False, seq_len_q=None, seq_len_kv=None, use_causal_mask=False,
             use_causal_mask_bottom_right=False, sliding_window_length=None, diagonal_alignment=None,
             diagonal_band_left_bound=None, diagonal_band_right_bound=None, dropout=None, rng_dump=None,
             paged_attention_k_table=None, paged_attention_v_table=None, paged_attention_max_seq_len_kv=None,
             max_total_seq_len_q=None, max_total_seq_len_kv=None, compute_data_type=None, name="", score_mod=None,
             generate_stats=None, implementation=None, score_max=None, score_sum_exp=None, sink_token=None,
             unfuse_fma=False, cu_seq_len_q=None, cu_seq_len_kv=None, stats_use_log2=False):
        """``(O, Stats)`` in cuDNN FE's argument order (python/pygraph/sdpa.cpp). Stats (FLOAT
        ``[B, H, S_q, 1]``, the natural-log sum of exp of the scaled, masked scores) comes with
        ``generate_stats=True`` / ``is_inference=False``, else None. ``bias`` is added to the scaled
        scores (hd's float mask). Causal masks: top-left (``use_causal_mask`` or
        ``diagonal_band_right_bound=0``), and bottom-right when S_q == S_kv. Every other feature is
        recorded and refused (cudnnGraphNotSupportedError naming it) at ``validate`` and the build
        steps, as cuDNN refuses the SDPA configurations its engines lack, never here."""
        what = "sdpa"
        if generate_stats is not None and is_inference is not None:
            raise HipdnnError(Status.BAD_PARAM, "sdpa: exactly one of {generate_stats, is_inference} must be set "
                                                "(prefer generate_stats)")
        stats = bool(generate_stats) if generate_stats is not None else (is_inference is False)
        if implementation is not None:
            # NOTE: cuDNN's kernel family (AUTO / COMPOSITE / UNIFIED); this engine has one SDPA
            # implementation, which every value runs
            E.to_hd(E.attention_implementation, implementation, "sdpa: implementation")
        self._sdpa_refuse(what, (
            (block_mask is not None, "block_mask"), (use_alibi_mask, "use_alibi_mask (ALiBi)"),
            (use_padding_mask, "use_padding_mask (variable sequence lengths)"),
            (seq_len_q is not None or seq_len_kv is not None, "seq_len_q / seq_len_kv"),
            (cu_seq_len_q is not None or cu_seq_len_kv is not None, "cu_seq_len_q / cu_seq_len_kv"),
            (dropout is not None, "dropout"), (rng_dump is not None, "rng_dump"),
            (paged_attention_k_table is not None or paged_attention_v_table is not None
             or paged_attention_max_seq_len_kv is not None, "paged attention"),
            (max_total_seq_len_q is not None or max_total_seq_len_kv is not None,
             "max_total_seq_len_q / max_total_seq_len_kv (ragged layouts)"),
            (score_max is not None or score_sum_exp is not None, "score_max / score_sum_exp"),
            (sink_token is not None, "sink_token"), (bool(stats_use_log2), "stats_use_log2")))
        causal = self._sdpa_mask(what, q, k, use_causal_mask, use_causal_mask_bottom_right, diagonal_alignment,
                                 diagonal_band_left_bound, diagonal_band_right_bound, sliding_window_length)
        scale = self._sdpa_scale(what, attn_scale)
        if score_mod is not None:
            if not callable(score_mod):
                raise HipdnnError(Status.BAD_PARAM, f"sdpa: score_mod must be callable (graph, score) -> tensor, got "
                                                    f"{type(score_mod).__name__}")
            composed = self._sdpa_score_mod(q, k, v, scale, bias, causal, score_mod, stats)
            if composed is not None:
                return composed
        args = (self._in(q, "q"), self._in(k, "k"), self._in(v, "v"))
        kw = dict(attn_scale=scale, is_causal=causal, mask=self._in(bias, "bias"),
                  compute_data_type=self._cdt(compute_data_type), name=name or None)
        if not stats:
            return self._wrap(self._hd.sdpa(*args, **kw)), None
        if _hd_has(self._hd, "sdpa", "generate_stats"):
            o, st = self._hd.sdpa(*args, generate_stats=True, **kw)
            return self._wrap(o), self._wrap(st)
        o = self._hd.sdpa(*args, **kw)      # an hd.Graph without the stats output: composed Stats
        return self._wrap(o), self._sdpa_stats(q, k, scale, bias, causal)

    @_translate
    def sdpa_backward(self, q, k, v, o, dO, stats, attn_scale=None, bias=None, dBias=None, use_alibi_mask=False,
                      use_padding_mask=False, seq_len_q=None, seq_len_kv=None, max_total_seq_len_q=None,
                      max_total_seq_len_kv=None, use_causal_mask=False, use_causal_mask_bottom_right=False,
                      sliding_window_length=None, diagonal_alignment=None, diagonal_band_left_bound=None,
                      diagonal_band_right_bound=None, dropout=None, rng_dump=None, use_deterministic_algorithm=False,
                      compute_data_type=None, name="", score_mod=None, score_mod_bprop=None, sink_token=None,
                      dSink_token=None):
        """``(dQ, dK, dV)`` in cuDNN FE's argument order (python/pygraph/sdpa.cpp), on
        hd.Graph.sdpa_backward: ``stats`` is the forward's Stats; the masks are sdpa's. ``dBias``
        and the features sdpa refuses are refused at ``validate`` and the build steps.
        ``use_deterministic_algorithm`` is accepted and changes nothing (the plans here are
        deterministic)."""
        what = "sdpa_backward"
        self._sdpa_refuse(what, (
            (dBias is not None, "dBias (the gradient of the bias)"), (use_alibi_mask, "use_alibi_mask (ALiBi)"),
            (use_padding_mask, "use_padding_mask (variable sequence lengths)"),
            (seq_len_q is not None or seq_len_kv is not None, "seq_len_q / seq_len_kv"),
            (max_total_seq_len_q is not None or max_total_seq_len_kv is not None,
             "max_total_seq_len_q / max_total_seq_len_kv (ragged layouts)"),
            (dropout is not None, "dropout"), (rng_dump is not None, "rng_dump"),
            (score_mod is not None or score_mod_bprop is not None, "score_mod / score_mod_bprop"),
            (sink_token is not None or dSink_token is not None, "sink_token / dSink_token")))
        causal = self._sdpa_mask(what, q, k, use_causal_mask, use_causal_mask_bottom_right, diagonal_alignment,
                                 diagonal_band_left_bound, diagonal_band_right_bound, sliding_window_length)
        scale = self._sdpa_scale(what, attn_scale)
        if not _hd_has(self._hd, "sdpa_backward"):
            _unsupported("sdpa_backward: this engine's hd.Graph has no sdpa_backward node yet")
        dq, dk, dv = self._hd.sdpa_backward(self._in(q, "q"), self._in(k, "k"), self._in(v, "v"), self._in(o, "o"),
                                            self._in(dO, "dO"), self._in(stats, "stats"), attn_scale=scale,
                                            is_causal=causal, mask=self._in(bias, "bias"),
                                            compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._wrap(dq), self._wrap(dk), self._wrap(dv)

    def _sdpa_score_mod(self, q, k, v, scale, bias, causal, score_mod, want_stats):
        """cuDNN's flexible-graph SDPA (``score_mod``): the attention composed from matmul, pointwise
        and reduction nodes, with the caller's callback given this graph and the scaled (biased,
        masked) scores ``[B, H, S_q, S_kv]`` (FLOAT) and returning the modified scores, which the
        softmax then reads: ``O = softmax(score_mod(S)) V``, Stats ``max + log(sum(exp(s - max)))``.
        K^T is K's buffer seen with its last two axes swapped (an extra input bound to K's buffer).
        Grouped-query heads are refused (None, with the refusal recorded)."""
        qd, kd, vd = q.get_dim(), k.get_dim(), v.get_dim()
        if any(d is None or len(d) != 4 for d in (qd, kd, vd)) or not qd[1] == kd[1] == vd[1]:
            self._defer(f"sdpa: score_mod with grouped-query heads or non-4D tensors (q dims {qd}, k dims {kd}, v dims "
                        f"{vd}) is not supported by this engine's composed flexible SDPA", at_validate=True)
            return None
        hd = self._hd
        F = DataType.FLOAT
        ks = k.get_stride()
        kt = hd.tensor(name=f"{k.get_name()}::T", dim=[kd[0], kd[1], kd[3], kd[2]], stride=[ks[0], ks[1], ks[3], ks[2]],
                       data_type=k._hd().get_data_type())
        self._aliases.append((kt, k))
        sc = hd.matmul(self._in(q), kt, compute_data_type=F).set_data_type(F)
        sc = hd.pointwise(sc, scale, mode=PointwiseMode.MUL, compute_data_type=F).set_data_type(F)
        if bias is not None:
            sc = hd.pointwise(sc, self._in(bias, "bias"), mode=PointwiseMode.ADD, compute_data_type=F).set_data_type(F)
        if causal:   # NOTE: masked scores get -1e30: exp() of them is exactly 0
            row = hd.pointwise(sc, mode=PointwiseMode.GEN_INDEX, axis=2, compute_data_type=F)
            col = hd.pointwise(sc, mode=PointwiseMode.GEN_INDEX, axis=3, compute_data_type=F)
            keep = hd.pointwise(row, col, mode=PointwiseMode.CMP_GE, compute_data_type=F)
            sc = hd.pointwise(sc, -1e30, keep, mode=PointwiseMode.BINARY_SELECT, compute_data_type=F).set_data_type(F)
        modified = score_mod(self, self._wrap(sc))
        if not isinstance(modified, tensor):
            raise HipdnnError(Status.BAD_PARAM, f"sdpa: score_mod must return a tensor of this graph, got "
                                                f"{type(modified).__name__}")
        sc = self._in(modified, "score_mod's result")
        rows = [qd[0], qd[1], qd[2], 1]
        mx = hd.reduction(sc, mode=E.HD_REDUCTION.MAX, compute_data_type=F).set_dim(rows).set_data_type(F)
        e = hd.pointwise(hd.pointwise(sc, mx, mode=PointwiseMode.SUB, compute_data_type=F).set_data_type(F),
                         mode=PointwiseMode.EXP, compute_data_type=F).set_data_type(F)
        sm = hd.reduction(e, mode=E.HD_REDUCTION.ADD, compute_data_type=F).set_dim(rows).set_data_type(F)
        p = hd.pointwise(e, sm, mode=PointwiseMode.DIV, compute_data_type=F).set_data_type(F)
        o = self._wrap(hd.matmul(p, self._in(v, "v"), compute_data_type=F))
        if not want_stats:
            return o, None
        st = hd.pointwise(mx, hd.pointwise(sm, mode=PointwiseMode.LOG, compute_data_type=F).set_data_type(F),
                          mode=PointwiseMode.ADD, compute_data_type=F)
        return o, self._wrap(st).set_data_type(E.data_type.FLOAT)

    def _sdpa_stats(self, q, k, scale, bias, causal):
        """cuDNN's Stats, ``max + log(sum(exp(s - max)))`` of the scaled (masked) scores per query row
        ([B, H, Sq, 1], FLOAT), composed from matmul, pointwise and reduction nodes, for an hd.Graph
        whose SDPA node has no statistics output. K^T is K's buffer seen with its last two axes
        swapped (an extra graph input bound to K's buffer at execute)."""
        qd, kd, ks = q.get_dim(), k.get_dim(), k.get_stride()
        if qd is None or kd is None or len(qd) != 4 or qd[1] != kd[1]:
            self._defer(f"sdpa: Stats with grouped-query heads (q dims {qd}, k dims {kd}) are not supported by "
                        "this engine's composed statistics; generate_stats=False works", at_validate=True)
            return None
        hd = self._hd
        F = DataType.FLOAT
        kt = hd.tensor(name=f"{k.get_name()}::T", dim=[kd[0], kd[1], kd[3], kd[2]], stride=[ks[0], ks[1], ks[3], ks[2]],
                       data_type=k._hd().get_data_type())
        self._aliases.append((kt, k))
        sc = hd.matmul(self._in(q), kt, compute_data_type=F)
        sc = hd.pointwise(sc, scale, mode=PointwiseMode.MUL, compute_data_type=F)
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


_HAS = {}


def _hd_has(hd_graph, method: str, param: str | None = None, kind=None) -> bool:
    """Whether hd.Graph has ``method`` (taking ``param``) and, with ``kind``, lowers that op kind
    (graph_ir.desc.LOWERED_KINDS): the facade maps onto a real node where one exists and composes
    the op otherwise."""
    key = (type(hd_graph), method, param, kind)
    if key not in _HAS:
        import inspect
        fn = getattr(type(hd_graph), method, None)
        ok = callable(fn)
        if ok and param is not None:
            try:
                ok = param in inspect.signature(fn).parameters
            except (TypeError, ValueError):
                ok = False
        if ok and kind is not None:
            from graph_ir import desc
            ok = getattr(desc.OpKind, kind) in desc.LOWERED_KINDS
        _HAS[key] = ok
    return _HAS[key]
