"""Which TF32 conversion reproduces torch's (cuDNN's) TF32 convolution? Runs on a CUDA machine with
torch only: the conv of cuDNN FE's deviceless test (N16 C128 64x64, K256 3x3, NHWC, f32) with TF32
allowed, against IEEE convs (TF32 off) of operands converted to TF32 three ways. Prints JSON."""
import json
import torch

torch.manual_seed(0)
x = torch.randn(16, 128, 64, 64, device="cuda").to(memory_format=torch.channels_last)
w = torch.randn(256, 128, 3, 3, device="cuda").to(memory_format=torch.channels_last)


def conv(a, b, tf32):
    torch.backends.cudnn.allow_tf32 = tf32
    y = torch.nn.functional.conv2d(a, b, padding=1)
    torch.cuda.synchronize()
    return y


def as_bits(t):
    return t.contiguous().view(torch.int32)


def rna(t):      # nearest, ties away from zero
    return ((as_bits(t) + 0x1000) & -8192).view(torch.float32).reshape(t.shape).to(memory_format=torch.channels_last)


def rne(t):      # nearest, ties to even
    b = as_bits(t)
    lsb = (b >> 13) & 1
    return ((b + 0xFFF + lsb) & -8192).view(torch.float32).reshape(t.shape).to(memory_format=torch.channels_last)


def rz(t):       # low bits dropped
    return (as_bits(t) & -8192).view(torch.float32).reshape(t.shape).to(memory_format=torch.channels_last)


ref = conv(x, w, True)
out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
for name, f in (("ieee", lambda t: t), ("rna", rna), ("rne", rne), ("rz", rz), ("rna_x_only", None)):
    if name == "rna_x_only":
        y = conv(rna(x), w, False)
    else:
        y = conv(f(x), f(w), False)
    d = (y - ref).abs()
    bad = (d > 1e-3 + 1e-3 * ref.abs()).sum().item()
    out[name] = {"max_abs": d.max().item(), "mismatched": bad, "of": ref.numel()}
y2 = conv(x, w, True)
out["tf32_repeat_max_abs"] = (y2 - ref).abs().max().item()
print(json.dumps(out))
