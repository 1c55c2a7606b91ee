"""The CHE benchmark's recurrent baselines (Deletang et al. 2023): RNN, LSTM, Stack-RNN, Tape-RNN,
as in `neural_networks_chomsky_hierarchy` (arXiv 2207.02098) and dm-haiku.

Contract (the benchmark's `make_model_with_empty_targets`): no embedding; step t reads the one-hot
x_t of width V+1 (EMPTY = id V); the L input tokens are followed by T = output_length EMPTY tokens
and the logits y_t = W_o ReLU(h_t) + b_o of the last T steps are the answer. Every model takes
CHEModel's call, `model(inputs, output_length, positions)`, and ignores `positions`.

- RNN:  h_t = ReLU(W_x x_t + b_x + W_h h_{t-1} + b_h)   (haiku VanillaRNN, double bias, ReLU)
- LSTM: [i, g, f, o] = W [x_t; h_{t-1}] + b; c_t = s(f + 1) c_{t-1} + s(i) tanh(g); h_t = s(o) tanh(c_t)
- Stack-RNN: the RNN reads [x_t; S_{t-1}[0]]; (push, pop, no-op) = softmax(W_a h_t + b_a),
  v_t = W_v h_t + b_v, and the stack (row 0 = top) moves as `stack_update`.
- Tape-RNN: the RNN reads [x_t; M_{t-1}[0]]; w_t = MLP(h_t) is written to the head cell, then
  softmax(W_a h_t + b_a) mixes the shifts of `tape_update` (stay, left, right, jump left/right by L).

Linear layers use haiku's init: W ~ TruncNormal(std 1/sqrt(fan_in), cut at 2 std), b = 0. The
RNN and LSTM run on PyTorch's fused kernels (torch.rnn_relu, torch.lstm) with the weights
rearranged from haiku's layout in every forward call, so parameters, gradients and optimiser
steps are those of the haiku cells. The Stack-RNN and Tape-RNN loop over the steps; the input
projection of all steps is one lookup up front, and each step is a few fused matmuls.

Stack depth / tape length: `ModelConfig.memory_size`, or when it is None the number of steps of the
forward call, L + T. Neither size changes a parameter's shape, and L + T steps can never push a
cell off the bottom of the stack, so the default memory is as good as an unbounded one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lengen.models.che import CHEModel
from lengen.models.config import ModelConfig

#: (push, pop, no-op): the order of the Stack-RNN's action softmax
STACK_ACTIONS = ("push", "pop", "noop")
#: the Tape-RNN's actions and their shifts (torch.roll's sign: shift k moves cell m to m + k);
#: None stands for the jump of L cells
TAPE_ACTIONS = ("stay", "left", "right", "jump_left", "jump_right")
TAPE_MLP = (64, 64)


def haiku_linear(fan_in: int, fan_out: int) -> nn.Linear:
    """nn.Linear with haiku's default init: TruncNormal(std 1/sqrt(fan_in), within 2 std), zero bias."""
    layer = nn.Linear(fan_in, fan_out)
    haiku_init_(layer.weight, layer.bias)
    return layer


def haiku_init_(weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    std = 1.0 / math.sqrt(weight.shape[1])
    with torch.no_grad():
        nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)
        if bias is not None:
            bias.zero_()


# -- the memories -------------------------------------------------------------------------------

def stack_update(stack: torch.Tensor, actions: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """One soft stack step (Joulin & Mikolov 2015). stack [B, D, d] with row 0 the top; actions
    [B, 3] the (push, pop, no-op) weights; value [B, d] what a push puts on top. A push drops the
    bottom cell; a pop brings in a zero cell at the bottom."""
    B, D, d = stack.shape
    # rows -1..D of the stack, with the pushed value above the top and a zero cell below the bottom
    padded = torch.cat([value[:, None], stack, stack.new_zeros(B, 1, d)], 1)
    push, pop, noop = actions[:, 0, None, None], actions[:, 1, None, None], actions[:, 2, None, None]
    return push * padded[:, :D] + pop * padded[:, 2:] + noop * stack


def tape_shifts(jump: int) -> tuple[int, ...]:
    """The shifts of TAPE_ACTIONS in torch.roll's sign (the reference's (0, -1, +1, -L, +L))."""
    return (0, -1, 1, -jump, jump)


def tape_index(size: int, jump: int, device=None) -> torch.Tensor:
    """[5 * size] rows to gather: action k's new cell m is the old cell (m - shift_k) mod size."""
    m = torch.arange(size, device=device)
    return torch.cat([(m - s) % size for s in tape_shifts(jump)])


def tape_update(tape: torch.Tensor, actions: torch.Tensor, write: torch.Tensor, jump: int,
                index: torch.Tensor | None = None) -> torch.Tensor:
    """One soft tape step (the benchmark's TapeInputLengthJumpCore). tape [B, S, d] is circular
    with the head at row 0; `write` [B, d] replaces the head cell (every action writes); then
    actions [B, 5] mix the written tape rolled by the shifts of TAPE_ACTIONS:
    new[m] = stay*W[m] + left*W[m+1] + right*W[m-1] + jump_left*W[m+L] + jump_right*W[m-L]."""
    B, S, d = tape.shape
    if index is None:
        index = tape_index(S, jump, tape.device)
    written = torch.cat([write[:, None], tape[:, 1:]], 1)
    moved = written.index_select(1, index).view(B, 5, S * d)
    return torch.bmm(actions[:, None], moved).view(B, S, d)


# -- the models ---------------------------------------------------------------------------------

class RecurrentCHEModel(nn.Module):
    """Shared contract: one-hot inputs, EMPTY slots, the ReLU readout at the last T steps."""

    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.empty_token = input_vocab_size
        self.width = input_vocab_size + 1          # one-hot width V + 1
        self.hidden = cfg.hidden_size
        self.readout = haiku_linear(cfg.hidden_size, output_vocab_size)

    def forward(self, inputs: torch.Tensor, output_length: int, positions: torch.Tensor | None = None):
        """inputs [B, L] -> logits [B, output_length, output_vocab]; `positions` is ignored."""
        B, L = inputs.shape
        empty = torch.full((B, output_length), self.empty_token, dtype=inputs.dtype, device=inputs.device)
        tokens = torch.cat([inputs, empty], dim=1)
        hidden = self.states(tokens, L)               # [B, T, H]: the states of the last T steps
        return self.readout(F.relu(hidden))

    def states(self, tokens: torch.Tensor, input_length: int) -> torch.Tensor:
        raise NotImplementedError

    def memory_size(self, steps: int) -> int:
        return self.cfg.memory_size or steps

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _one_hot(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.one_hot(tokens, self.width).to(self.readout.weight.dtype)


class RNNModel(RecurrentCHEModel):
    """haiku VanillaRNN (ReLU, double bias) on torch.rnn_relu."""

    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__(cfg, input_vocab_size, output_vocab_size)
        self.input_to_hidden = haiku_linear(self.width, self.hidden)
        self.hidden_to_hidden = haiku_linear(self.hidden, self.hidden)

    def states(self, tokens, input_length):
        x = self._one_hot(tokens)
        h0 = x.new_zeros(1, x.shape[0], self.hidden)
        params = [self.input_to_hidden.weight, self.hidden_to_hidden.weight, self.input_to_hidden.bias,
                  self.hidden_to_hidden.bias]
        out, _ = torch.rnn_relu(x, h0, params, True, 1, 0.0, self.training, False, True)
        return out[:, input_length:]


class LSTMModel(RecurrentCHEModel):
    """haiku LSTM: one Linear over [x; h] to gates (i, g, f, o), +1 on the forget gate in the
    forward pass; run on torch.lstm (gate order i, f, g, o) with the rows permuted."""

    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__(cfg, input_vocab_size, output_vocab_size)
        H = self.hidden
        self.gates = haiku_linear(self.width + H, 4 * H)   # haiku layout: rows i, g, f, o
        self.register_buffer("torch_order", torch.cat([torch.arange(0, H), torch.arange(2 * H, 3 * H),
                                                       torch.arange(H, 2 * H), torch.arange(3 * H, 4 * H)]),
                             persistent=False)
        forget_one = torch.zeros(4 * H)
        forget_one[H:2 * H] = 1.0                           # torch order: the f rows
        self.register_buffer("forget_one", forget_one, persistent=False)

    def states(self, tokens, input_length):
        x = self._one_hot(tokens)
        w = self.gates.weight.index_select(0, self.torch_order)
        b = self.gates.bias.index_select(0, self.torch_order)
        h0 = x.new_zeros(1, x.shape[0], self.hidden)
        params = [w[:, :self.width], w[:, self.width:], b, self.forget_one.to(b.dtype)]
        out, _, _ = torch.lstm(x, (h0, h0), params, True, 1, 0.0, self.training, False, True)
        return out[:, input_length:]


class _MemoryRNN(RecurrentCHEModel):
    """A VanillaRNN controller reading [x_t; memory head cell] (haiku: one Linear over that
    concatenation, one over h), with its input projection looked up for all steps at once."""

    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__(cfg, input_vocab_size, output_vocab_size)
        self.cell = cfg.memory_cell_size
        self.input_to_hidden = haiku_linear(self.width + self.cell, self.hidden)
        self.hidden_to_hidden = haiku_linear(self.hidden, self.hidden)

    def _controller(self, tokens):
        """(x_proj, N tensors [B, H]: W_x x_t + b_x + b_h for every step, W_rec [d + H, H] so that
        h_t = ReLU(x_proj[t] + [head; h_{t-1}] @ W_rec))."""
        w_in = self.input_to_hidden.weight
        table = w_in[:, :self.width].t() + self.input_to_hidden.bias + self.hidden_to_hidden.bias
        x_proj = F.embedding(tokens.t(), table)
        w_rec = torch.cat([w_in[:, self.width:], self.hidden_to_hidden.weight], 1).t()
        return x_proj.unbind(0), w_rec   # unbind: one backward node, not one zero-filled copy per step


class StackRNNModel(_MemoryRNN):
    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__(cfg, input_vocab_size, output_vocab_size)
        self.actions = haiku_linear(self.hidden, 3)
        self.push_value = haiku_linear(self.hidden, self.cell)

    def states(self, tokens, input_length):
        B, N = tokens.shape
        x_proj, w_rec = self._controller(tokens)
        w_heads = torch.cat([self.actions.weight, self.push_value.weight]).t()   # [H, 3 + d]
        b_heads = torch.cat([self.actions.bias, self.push_value.bias])
        stack = x_proj[0].new_zeros(B, self.memory_size(N), self.cell)
        h = x_proj[0].new_zeros(B, self.hidden)
        out = []
        for t in range(N):
            h = torch.relu(torch.addmm(x_proj[t], torch.cat([stack[:, 0], h], 1), w_rec))
            heads = torch.addmm(b_heads, h, w_heads)
            stack = stack_update(stack, torch.softmax(heads[:, :3], -1), heads[:, 3:])
            if t >= input_length:
                out.append(h)
        return torch.stack(out, 1)


class TapeRNNModel(_MemoryRNN):
    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__(cfg, input_vocab_size, output_vocab_size)
        a, b = TAPE_MLP
        self.write_mlp = nn.Sequential(haiku_linear(self.hidden, a), nn.ReLU(), haiku_linear(a, b), nn.ReLU(),
                                       haiku_linear(b, self.cell))
        self.actions = haiku_linear(self.hidden, len(TAPE_ACTIONS))

    def states(self, tokens, input_length):
        B, N = tokens.shape
        x_proj, w_rec = self._controller(tokens)
        first, _, second, _, last = self.write_mlp
        a = first.out_features
        w_heads = torch.cat([first.weight, self.actions.weight]).t()                # [H, 64 + 5]
        b_heads = torch.cat([first.bias, self.actions.bias])
        size = self.memory_size(N)
        index = tape_index(size, input_length, tokens.device)
        tape = x_proj[0].new_zeros(B, size, self.cell)
        h = x_proj[0].new_zeros(B, self.hidden)
        out = []
        for t in range(N):
            h = torch.relu(torch.addmm(x_proj[t], torch.cat([tape[:, 0], h], 1), w_rec))
            heads = torch.addmm(b_heads, h, w_heads)
            write = last(torch.relu(second(torch.relu(heads[:, :a]))))
            tape = tape_update(tape, torch.softmax(heads[:, a:], -1), write, input_length, index)
            if t >= input_length:
                out.append(h)
        return torch.stack(out, 1)


MODELS = {"rnn": RNNModel, "lstm": LSTMModel, "stack_rnn": StackRNNModel, "tape_rnn": TapeRNNModel}


def build_model(cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int) -> nn.Module:
    """The CHE model of cfg.architecture: CHEModel (the Transformer) or a recurrent baseline."""
    if cfg.architecture == "transformer":
        return CHEModel(cfg, input_vocab_size, output_vocab_size)
    cfg.validate()
    return MODELS[cfg.architecture](cfg, input_vocab_size, output_vocab_size)
