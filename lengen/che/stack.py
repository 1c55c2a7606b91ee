"""N CHE models of one shape as one stack (lengen.che.group): their parameters stacked
[N, ...], the stacked Adam and per-model gradient clipping, each member's dropout plan, and the
forward, which is the model's own (CHEModel.hidden and its readout) run by
torch.func.functional_call under vmap over the stacked weights, each member with its own runtime
(MemberRuntime: what differs per member, injected into the model's attention and dropout).

Precision bf16 in a group means bf16 activations: each step's forward runs on a bfloat16 copy of
the float32 weights (the gradients come back to the float32 stack through the cast; Adam and its
state stay float32), so every activation, and every activation's gradient, is half the bytes. It
replaces torch.autocast (which a model trained alone in bf16 runs under), which keeps the residual
stream, the norms and their gradients in float32 and casts the weights at every use: the group
step is bound by memory traffic (benchmarks/step_traffic.py)."""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, vmap

from lengen.devices import to_device
from lengen.kernels.model_stack import attention_for_stack
from lengen.models.attention import Runtime
from lengen.models.che import CHEModel
from lengen.models.dropout import Dropout, bernoulli_keep_mask
from lengen.che.config import TrainConfig
from lengen.training.optim import ADAM_BETAS, ADAM_EPS


#: the activations' dtype in a group, by TrainConfig.precision (absent: the weights', float32)
ACTIVATION_DTYPES = {"bf16": torch.bfloat16}


class MemberRuntime(Runtime):
    """One model of the stack, seen from inside vmap. Its sequence is padded at the end to the
    stack's longest: padded keys get -inf (no real query sees them, and they get no gradient) and
    log-n scaling counts the real keys. `dropout_keep` holds the member's dropout masks, drawn
    outside vmap from its own stream (ModelStack.dropout_masks), one per dropout call in call
    order (None: no dropout), and `dropout_scale` the 0-d factor 1 / (1 - p) for what is kept.
    Positions are checked outside vmap (ModelStack.__call__): a check reads values."""

    def __init__(self, key_bias: torch.Tensor, real_keys: torch.Tensor, attention,
                 dropout_keep: list[torch.Tensor] | None = None, dropout_scale: torch.Tensor | None = None):
        self.key_bias = key_bias            # [Tk]: 0 for a real key, -inf for padding
        self.real_keys = real_keys          # 0-d: how many keys are real
        self.kernel = attention             # lengen.kernels.model_stack.stacked_attention or sdpa
        self.dropout_keep, self.dropout_scale = dropout_keep, dropout_scale

    def attention(self, q, k, v, bias, causal, scale):
        # bf16 activations (ModelStack.activation_dtype): an encoding's float32 table may have
        # promoted q or k; the kernel takes one dtype, the projections' (v's)
        q, k = q.to(v.dtype), k.to(v.dtype)
        padding = self.key_bias.to(q.dtype)[None, None, None, :]  # [1, 1, 1, Tk]
        bias = padding if bias is None else bias + padding
        return self.kernel(q, k, v, bias=bias, causal=causal, scale=scale)

    def dropout(self, drop: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """x with this member's next dropout mask applied, where the model alone calls `drop`."""
        if not drop.training or self.dropout_keep is None:
            return x
        if not self.dropout_keep:
            raise RuntimeError("the forward called dropout more often than the stack planned masks for")
        keep = self.dropout_keep.pop(0)
        if keep.shape != x.shape:
            raise RuntimeError(f"dropout mask {tuple(keep.shape)} drawn for an input {tuple(x.shape)}: "
                               "the stack plans one [B, T, d_model] mask per dropout call")
        return x * (keep.to(x.dtype) * self.dropout_scale)

    def check_positions(self, pe, pos) -> None:
        pass


class _PaddedLogits(nn.Module):
    """functional_call runs a module's forward: this one's is the model's own hidden states and
    readout, at the positions `readout_index` [O] of a sequence padded at the end ([input, EMPTY
    output slots, padding]), each member with its own readout positions."""

    def __init__(self, model: CHEModel):
        super().__init__()
        self.model = model

    def forward(self, tokens, pos, readout_index, runtime: MemberRuntime):
        return self.model.readout(self.model.hidden(tokens, pos, runtime).index_select(1, readout_index))


class ModelStack:
    """Stacked parameters, Adam state, per-model hyperparameters and dropout streams of N models;
    their forward is the first model's own (CHEModel.hidden, readout) under vmap over the stack."""

    def __init__(self, models: list[CHEModel], cfgs: list[TrainConfig], dropout_gens, device):
        self.models, self.device = models, device
        self.n = len(models)
        self.names = [n for n, p in models[0].named_parameters() if p.requires_grad]
        self.params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).to(device)
                       .requires_grad_(True) for n in self.names}
        # parameters that do not train (FoPE's fixed coefficients) still differ between members
        # (each drew its own at init): stacked too, outside Adam, so each member reads its own
        self.frozen = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).to(device)
                       for n, p in models[0].named_parameters() if not p.requires_grad}
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.adam_step = 0
        # members by learning rate, for the fused Adam kernel (one learning rate per call)
        lrs = [c.lr for c in cfgs]
        self.lr_groups = [(lr, [i for i, x in enumerate(lrs) if x == lr]) for lr in dict.fromkeys(lrs)]
        self._step_count = torch.zeros((), dtype=torch.float32, device=device)  # the kernel's state_steps
        self.clip = torch.tensor([c.grad_clip for c in cfgs], dtype=torch.float32, device=device)
        self.forward = _PaddedLogits(models[0])
        self.pe = models[0].encoder.pe
        self.attention = attention_for_stack(device)
        self.dropout = [c.model.dropout for c in cfgs]
        self.dropout_gens = dropout_gens
        # the model calls each Dropout module once per forward (checked in _one)
        self.dropout_calls = sum(isinstance(m, Dropout) for m in models[0].modules())
        self.d_model = cfgs[0].model.d_model
        # the members share the precision (check_groupable); bf16: weights cast per step, no autocast
        self.activation_dtype = ACTIVATION_DTYPES.get(cfgs[0].precision)
        self._bucket_leaves = []  # (members, their parameter leaves) of this step's buckets

    def _one(self, params, tokens, pos, key_bias, n_keys, out_idx, keep, scale):
        masks = None if keep is None else list(keep.unbind(0))
        member = MemberRuntime(key_bias, n_keys, self.attention, masks, scale)
        named = {f"model.{n}": p for n, p in params.items()}
        logits = functional_call(self.forward, named, (tokens, pos, out_idx, member))
        if member.dropout_keep:
            raise RuntimeError(f"the forward used {self.dropout_calls - len(member.dropout_keep)} of the "
                               f"{self.dropout_calls} planned dropout masks")
        return logits

    def dropout_masks(self, members: list[int], totals: list[int], batch: int, T: int):
        """Bool keep masks [M, calls, B, T, d_model] and factors 1/(1 - p) [M] of the members, or
        (None, None) when none of them drops. On the CPU each member draws from its own generator
        exactly what its forward would draw alone (bernoulli_keep_mask, call by call, at its real
        length; its padding keeps everything); on CUDA one draw serves the stack (one model alone
        draws through F.dropout there, whose stream no other kernel reproduces)."""
        rates = [self.dropout[i] for i in members]
        if not any(rates):
            return None, None
        M, S, D = len(members), self.dropout_calls, self.d_model
        # built on the host and sent without waiting: torch.tensor(..., device=cuda) syncs the stream
        (scale,) = to_device(self.device, torch.tensor([1.0 / (1.0 - p) for p in rates], dtype=torch.float32))
        if self.device.type == "cuda":
            (drop_p,) = to_device(self.device, torch.tensor(rates, dtype=torch.float32).view(M, 1, 1, 1, 1))
            return torch.rand((M, S, batch, T, D), device=self.device) >= drop_p, scale
        keep = torch.ones((M, S, batch, T, D), dtype=torch.bool)
        for j, (i, t, p) in enumerate(zip(members, totals, rates)):
            if p > 0:
                for call in range(S):
                    keep[j, call, :, :t] = bernoulli_keep_mask((batch, t, D), p, self.dropout_gens[i])
        return keep, scale

    def project(self):
        """The encoding's parameter bounds on the whole stack, as its forward projects them (a
        bucket of members runs on a copy of their rows, so the stack itself is projected here)."""
        with torch.no_grad():
            for name, (lo, hi) in self.pe.bounds.items():
                self.params[f"encoder.pe.{name}"].clamp_(min=lo, max=hi)

    def __call__(self, tokens, pos, key_bias, n_keys, out_idx, keep=None, scale=None,
                 members: torch.Tensor | None = None):
        """Logits [M, B, O, V] of the models `members` (indices into the stack; None: all N) on
        their step tensors (each with M rows). Gradients reach the whole stack's parameters."""
        params = {**self.params, **self.frozen}
        if members is not None:
            # the bucket's rows as leaves of their own, their gradients added into the stack's
            # rows before the step (_take_bucket_grads): index_select's backward would write a
            # zero gradient of the whole stack per parameter and bucket, and autograd add those up
            params = {n: p.detach().index_select(0, members) for n, p in params.items()}
            for n in self.names:
                params[n].requires_grad_(True)
            self._bucket_leaves.append((members, {n: params[n] for n in self.names}))
        if self.activation_dtype is not None:  # the encoding's own parameters act on positions: kept float32
            params = {n: p.to(self.activation_dtype) if p.is_floating_point() and not n.startswith("encoder.pe.")
                      else p for n, p in params.items()}
        self.pe.check_positions(pos)  # outside vmap: the check reads values
        drop = 0 if keep is not None else None
        return vmap(self._one, in_dims=(0, 0, 0, 0, 0, 0, drop, drop))(
            params, tokens, pos, key_bias, n_keys, out_idx, keep, scale)

    def train(self, flag: bool = True):
        self.forward.train(flag)

    @torch.no_grad()
    def _take_bucket_grads(self):
        """The gradients of the buckets' leaves (__call__ with `members`) into the stack's rows."""
        for members, leaves in self._bucket_leaves:
            for n, leaf in leaves.items():
                if leaf.grad is None:
                    continue
                p = self.params[n]
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.index_add_(0, members, leaf.grad)
        self._bucket_leaves.clear()

    @torch.no_grad()
    def clip_and_step(self):
        """torch.nn.utils.clip_grad_norm_ per model (the norm of its own gradient), then Adam with
        each model's learning rate: torch's fused Adam kernel (what a model alone steps with,
        lengen.training.optim.che_adam), once per distinct learning rate, on the whole stacked
        tensors or on each member's rows of them."""
        self._take_bucket_grads()
        grads = [self.params[n].grad for n in self.names]
        N = self.n
        norms = torch.stack([torch.linalg.vector_norm(g.reshape(N, -1), dim=1) for g in grads])  # [K, N]
        total = torch.linalg.vector_norm(norms, dim=0)
        coef = (self.clip / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view((N,) + (1,) * (g.dim() - 1)))
        self.adam_step += 1
        self._step_count.fill_(float(self.adam_step))
        tensors = [[self.params[n] for n in self.names], grads, [self.exp_avg[n] for n in self.names],
                   [self.exp_avg_sq[n] for n in self.names]]
        for lr, rows in self.lr_groups:
            lists = tensors if len(rows) == N else [[t[i] for t in ts for i in rows] for ts in tensors]
            torch._fused_adam_(*lists, [], [self._step_count] * len(lists[0]), lr=lr, beta1=ADAM_BETAS[0],
                               beta2=ADAM_BETAS[1], weight_decay=0.0, eps=ADAM_EPS, amsgrad=False, maximize=False)
        for n in self.names:
            self.params[n].grad = None

    # -- per-model views (checkpoints, evaluation) ------------------------------------------------
    @torch.no_grad()
    def unstack(self, i: int, optimizer: torch.optim.Adam | None = None) -> None:
        """Model i's weights (and Adam state) from the stack into its CHEModel (and optimizer)."""
        named = dict(self.models[i].named_parameters())
        for n in self.names:
            named[n].copy_(self.params[n][i])
            if optimizer is not None and self.adam_step > 0:
                optimizer.state[named[n]] = {
                    "step": torch.tensor(float(self.adam_step), dtype=torch.float32),
                    "exp_avg": self.exp_avg[n][i].clone(), "exp_avg_sq": self.exp_avg_sq[n][i].clone()}

    @torch.no_grad()
    def restack(self, i: int, optimizer: torch.optim.Adam, step: int) -> None:
        """Model i's weights and Adam state (restored from its checkpoint) into the stack."""
        named = dict(self.models[i].named_parameters())
        for n in self.names:
            p = named[n]
            self.params[n][i].copy_(p)
            state = optimizer.state.get(p)
            if state:
                self.exp_avg[n][i].copy_(state["exp_avg"])
                self.exp_avg_sq[n][i].copy_(state["exp_avg_sq"])
        self.adam_step = step
