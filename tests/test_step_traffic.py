"""benchmarks/step_traffic.py's byte counter (the roofline in docs/engineering/performance.md) against bytes
worked out by hand for a few operators on the meta device."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from step_traffic import Traffic  # noqa: E402

F32 = 4


def test_bytes_read_and_written_per_operator_by_hand():
    x = torch.empty(1000, 64, device="meta")
    w = torch.empty(64, 256, device="meta")
    b = torch.empty(256, device="meta")
    scores = torch.empty(2, 50, 50, device="meta")
    square = torch.empty(4, 50, 50, device="meta")  # activations [B, T, d] at T = d: only scores=False counts them
    g, m, v = (torch.empty(64, 256, device="meta") for _ in range(3))
    steps = torch.empty((), device="meta")
    t = Traffic()
    with t:
        y = x @ w                      # reads x and w, writes y
        y.view(-1)                     # a view: nothing moves
        torch.ops.aten._unsafe_view(y, (-1,))  # shares y's storage: nothing moves
        torch.relu(y)
        y + b.expand(1000, 256)        # the broadcast bias is read at its own size
        y.t().reshape(-1)              # a transposed reshape copies
        scores.softmax(-1)             # [.., T, T]: attention scores, kept apart
        out = torch.empty(1000, 256, device="meta")   # allocated, not written
        torch.mul(y[:, :128], 2.0, out=out[:, :128])  # reads half of y, writes half of out
        y.add_(b)                                      # in place: reads y and b, writes y
        out.copy_(y)                                   # overwrites out without reading it
        rows = torch.empty(10, 256, device="meta")
        index = torch.empty(10, dtype=torch.int64, device="meta")
        out.index_add_(0, index, rows)                 # reads and writes 10 rows of out, reads rows and index
        # a multi-tensor kernel: reads every tensor of its lists, writes those marked written (all but steps)
        torch._fused_adam_([w], [g], [m], [v], [], [steps], lr=0.1, beta1=0.9,
                           beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    half = 1000 * 128 * F32
    assert t.read == {"mm": (1000 * 64 + 64 * 256) * F32, "relu": 1000 * 256 * F32,
                      "add.Tensor": (1000 * 256 + 256) * F32, "clone": 1000 * 256 * F32, "_softmax": 0,
                      "mul.out": half, "add_.Tensor": (1000 * 256 + 256) * F32, "copy_": 1000 * 256 * F32,
                      "index_add_": (2 * 10 * 256) * F32 + 10 * 8,
                      "_fused_adam_": (4 * 64 * 256 + 1) * F32}
    assert t.written == {"mm": 1000 * 256 * F32, "relu": 1000 * 256 * F32, "add.Tensor": 1000 * 256 * F32,
                         "clone": 1000 * 256 * F32, "_softmax": 0, "mul.out": half, "add_.Tensor": 1000 * 256 * F32,
                         "copy_": 1000 * 256 * F32, "index_add_": 10 * 256 * F32, "_fused_adam_": 4 * 64 * 256 * F32}
    assert t.scores == 2 * 50 * 50 * F32
    off = Traffic(scores=False)  # the fused SDPA: no operator writes scores, every square is counted
    with off:
        scores.softmax(-1)
        square.sigmoid()
    assert off.written == {"_softmax": 2 * 50 * 50 * F32, "sigmoid": 4 * 50 * 50 * F32} and off.scores == 0


def test_the_fused_rotation_is_one_pass():
    """lengen.kernels.rotary's custom operator (RoPE's rotation as CUDA runs it) is counted as one
    operator: x and the tables read once (a table broadcast over batch and heads at its storage's
    size), the output written once. x [2, 3, 5, 8] float32 is 960 bytes; each table is a
    [1, 1, 5, 4] float32 storage (80 bytes) expanded to [2, 3, 5, 4] (480 bytes of elements)."""
    import lengen.kernels.rotary  # noqa: F401  (registers lengen::rotate_halves)

    x = torch.empty(2, 5, 3, 8, device="meta").transpose(1, 2)
    c, s = (torch.empty(1, 1, 5, 4, device="meta").expand(2, 3, 5, 4) for _ in range(2))
    traffic = Traffic(scores=False)
    with traffic:
        torch.ops.lengen.rotate_halves(x, c, s, 1.0)
    assert dict(traffic.calls) == {"lengen.rotate_halves": 1}
    assert traffic.read["lengen.rotate_halves"] == 960 + 80 + 80
    assert traffic.written["lengen.rotate_halves"] == 960
