"""Shared-prefix micro-batches: K samples that begin with the same P tokens run the prefix once.

Tool-calling chat data repeat a long constant head in every sample (system prompt, the template's tools block:
~880 of ~1,500 byte tokens per GridSim demonstration). Packing runs it K times; here the prefix runs once with
its key/value cache kept in the autograd graph, the cache is repeated K times, and the K suffixes run as one
right-padded [K, S] batch that attends to the cached prefix (causal attention, positions P..P+S-1). The
logprobs are those of K separate forwards of prefix + suffix_k (tests/trainer/test_shared_prefix.py checks
values and gradients against `logprobs.compute_logprobs`), at roughly (P + K*S) / (K*(P + S)) of the token
compute. Right padding needs no attention mask: pads come after every real token, so causal attention never
lets a real token see one.

Used by `sft` with `data.shared_prefix = true` and by the RL trainer with `shared_prefix = true`, where
`regroup` unpacks the orchestrator's packed micro-batches and regroups their samples so that a GRPO group's
members (same prompt) share one micro-batch: the prompt runs once per group instead of `group_size` times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from prime_rl.trainer.forward import ForwardOutput, check_sampling, forward_micro_batch
from prime_rl.trainer.loss import LossInputs
from prime_rl.transport.batch import MicroBatch


@dataclass
class SharedPrefixMicroBatch:
    """K samples with a common prefix.

    Attributes:
        prefix_ids: [P] int, P >= 1, the tokens every sample starts with (no loss token among them).
        suffix_ids: [K, S] int, each sample's remaining tokens, right-padded with `pad_id`.
        valid: [K, S] bool, true on real (non-pad) suffix tokens.
        loss_mask: [K, S] bool, the suffix tokens trained on (a subset of `valid`).
        advantages, inference_logprobs: [K, S] float (RL; zeros for SFT), as in `transport.batch.MicroBatch`.
        temperature: [K, S] float, the temperature each suffix token was sampled at (ones for SFT).
        teacher_logprobs: [K, S] float or None, the teacher's logprob of each suffix token (on-policy distillation).
    """

    prefix_ids: np.ndarray
    suffix_ids: np.ndarray
    valid: np.ndarray
    loss_mask: np.ndarray
    advantages: np.ndarray | None = None
    inference_logprobs: np.ndarray | None = None
    temperature: np.ndarray | None = None
    teacher_logprobs: np.ndarray | None = None

    def __post_init__(self) -> None:
        num_samples, suffix_len = self.suffix_ids.shape
        if len(self.prefix_ids) < 1:
            raise ValueError("shared prefix must hold at least one token")
        if self.advantages is None:
            self.advantages = np.zeros((num_samples, suffix_len), np.float32)
        if self.inference_logprobs is None:
            self.inference_logprobs = np.zeros((num_samples, suffix_len), np.float32)
        if self.temperature is None:
            self.temperature = np.ones((num_samples, suffix_len), np.float32)
        for name in ("valid", "loss_mask", "advantages", "inference_logprobs", "temperature", "teacher_logprobs"):
            if getattr(self, name) is not None and getattr(self, name).shape != (num_samples, suffix_len):
                raise ValueError(
                    f"{name} has shape {getattr(self, name).shape}, must be [K, S] = {(num_samples, suffix_len)}"
                )
        if bool((self.loss_mask & ~self.valid).any()):
            raise ValueError("loss_mask is true on a padding token")

    def __len__(self) -> int:
        """Tokens the model runs: P + K * S."""
        return len(self.prefix_ids) + self.suffix_ids.size

    @property
    def sample_len(self) -> int:
        """Length of the longest sample: P + S."""
        return len(self.prefix_ids) + self.suffix_ids.shape[1]

    @property
    def num_samples(self) -> int:
        return int(self.suffix_ids.shape[0])


def common_prefix_len(seqs: Sequence[np.ndarray], loss_masks: Sequence[np.ndarray]) -> int:
    """Length P of the longest common prefix of `seqs` ([L_k] int each) that holds no loss token and leaves at
    least one token in every sample's suffix (so P <= min L_k - 1). 0 when the first tokens differ."""
    max_len = min(len(seq) for seq in seqs) - 1
    if max_len <= 0:
        return 0
    first = np.asarray(seqs[0][:max_len])
    prefix_len = max_len
    for seq in seqs[1:]:
        diff = np.nonzero(np.asarray(seq[:prefix_len]) != first[:prefix_len])[0]
        if len(diff):
            prefix_len = int(diff[0])
    for mask in loss_masks:
        hit = np.nonzero(np.asarray(mask[:prefix_len]))[0]
        if len(hit):
            prefix_len = int(hit[0])
    return prefix_len


def make_shared_prefix_batch(
    input_ids: Sequence[np.ndarray],
    loss_masks: Sequence[np.ndarray],
    pad_id: int = 0,
    extra: dict[str, Sequence[np.ndarray]] | None = None,
) -> SharedPrefixMicroBatch | None:
    """Build one micro-batch from K samples (`input_ids[k]`, `loss_masks[k]`: [L_k]); None when they share no
    prefix (P = 0): pack those instead. `extra` may hold per-token `advantages`, `inference_logprobs`,
    `temperature` and `teacher_logprobs` ([L_k] each), cut the same way (padding: 0, 0, 1, 0)."""
    prefix_len = common_prefix_len(input_ids, loss_masks)
    if prefix_len == 0:
        return None
    suffix_len = max(len(x) for x in input_ids) - prefix_len
    num_samples = len(input_ids)
    suffix = np.full((num_samples, suffix_len), pad_id, dtype=np.int64)
    valid = np.zeros((num_samples, suffix_len), bool)
    loss = np.zeros((num_samples, suffix_len), bool)
    fields = {name: np.full((num_samples, suffix_len), 1.0 if name == "temperature" else 0.0, np.float32)
              for name in extra or {}}  # fmt: skip
    for i, (ids, mask) in enumerate(zip(input_ids, loss_masks, strict=True)):
        tail_len = len(ids) - prefix_len
        suffix[i, :tail_len] = ids[prefix_len:]
        valid[i, :tail_len] = True
        loss[i, :tail_len] = mask[prefix_len:]
        for name, arr in fields.items():
            arr[i, :tail_len] = extra[name][i][prefix_len:]
    return SharedPrefixMicroBatch(np.asarray(input_ids[0][:prefix_len], dtype=np.int64), suffix, valid, loss, **fields)


def regroup(micro_batches: Sequence[MicroBatch], micro_batch_size: int, pad_id: int = 0) -> list:
    """Unpack packed RL micro-batches into samples (a sample starts where `position_ids` is 0), sort them by
    token ids so that samples with the same prompt are neighbours, and cut them into `SharedPrefixMicroBatch`es of
    up to `micro_batch_size` samples. Micro-batches without loss tokens (rank padding) are dropped: the caller
    pads the count back (`train_step` needs the same count on every rank). Returns [] when nothing is trained.

    The loss is unchanged: every loss token keeps its advantage, inference logprob and temperature, and its
    logprob is computed on the same preceding tokens (tests/trainer/test_shared_prefix.py).
    """
    samples = []
    for mb in micro_batches:
        if not mb.loss_mask.any():
            continue
        starts = np.nonzero(mb.position_ids == 0)[0].tolist()
        if not starts or starts[0] != 0:
            starts = [0, *starts]
        for start, end in zip(starts, [*starts[1:], len(mb)], strict=True):
            if mb.loss_mask[start:end].any():
                samples.append({f: getattr(mb, f)[start:end] for f in _RL_FIELDS if getattr(mb, f) is not None})
    samples.sort(key=lambda x: x["input_ids"].tolist())
    out: list = []
    for i in range(0, len(samples), micro_batch_size):
        group = samples[i : i + micro_batch_size]
        extra = {f: [x[f] for x in group]
                 for f in ("advantages", "inference_logprobs", "temperature", "teacher_logprobs") if f in group[0]}  # fmt: skip
        spm = make_shared_prefix_batch([x["input_ids"] for x in group], [x["loss_mask"] for x in group], pad_id, extra)
        if spm is None:  # no common first token: one plain micro-batch per sample
            out.extend(MicroBatch(**{**x, "position_ids": np.arange(len(x["input_ids"]))}) for x in group)
        else:
            out.append(spm)
    return out


_RL_FIELDS = ("input_ids", "position_ids", "loss_mask", "advantages", "inference_logprobs", "temperature",
              "teacher_logprobs")


def shared_prefix_logprobs(
    model: nn.Module, mb: SharedPrefixMicroBatch, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Logprob and entropy of every suffix token at its sampling temperature (`mb.temperature`).

    Returns:
        (logprobs [K, S] with grad, entropy [K, S] no grad, nats): logprobs[k, j] = log_softmax(logits /
        temperature[k, j])[suffix[k, j]] with the logits of prefix + suffix[k, <j]; 0 on padding. The first suffix
        token is predicted by the prefix's last logits. Same alignment as `logprobs.token_logprobs`.
    """
    prefix = torch.from_numpy(mb.prefix_ids).long().to(device)
    suffix = torch.from_numpy(mb.suffix_ids).long().to(device)
    valid = torch.from_numpy(mb.valid).to(device)
    prefix_len = prefix.shape[0]
    num_samples, suffix_len = suffix.shape
    head = model(input_ids=prefix[None], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(num_samples)  # [1, heads, P, d] -> [K, heads, P, d], still in the graph
    pos = (prefix_len + torch.arange(suffix_len, device=device))[None].expand(num_samples, suffix_len)
    tail = model(input_ids=suffix, position_ids=pos, past_key_values=cache, use_cache=False)
    logits = torch.cat([head.logits[:, -1:].expand(num_samples, 1, -1), tail.logits[:, :-1]], dim=1).float()
    temp = torch.from_numpy(mb.temperature).float().to(device)
    logits = logits / torch.where(valid & (temp > 0), temp, torch.ones_like(temp))[..., None]
    logp_all = torch.log_softmax(logits, dim=-1)
    lp = logp_all.gather(-1, suffix[..., None])[..., 0]
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros((), dtype=lp.dtype, device=lp.device)
    return torch.where(valid, lp, zero), torch.where(valid, ent, zero)


@forward_micro_batch.register
def _(mb: SharedPrefixMicroBatch, model: nn.Module, *, index: int, seq_len: int, device: torch.device) -> ForwardOutput:
    """A shared-prefix micro-batch, flattened to [K*S] suffix tokens; its token count counts the prefix once per
    sample, as packing would."""
    if mb.sample_len > seq_len:
        raise ValueError(f"micro-batch {index} has a {mb.sample_len}-token sample > seq_len = {seq_len}")
    mask = torch.from_numpy(mb.loss_mask).to(device).reshape(-1)
    temp = torch.from_numpy(mb.temperature).float().to(device).reshape(-1)
    inf_lp = torch.from_numpy(mb.inference_logprobs).float().to(device).reshape(-1)
    adv = torch.from_numpy(mb.advantages).float().to(device).reshape(-1)
    check_sampling(index, mask, temp, inf_lp, adv)
    lp, ent = shared_prefix_logprobs(model, mb, device)
    ids = torch.from_numpy(mb.suffix_ids).long().to(device).reshape(-1)
    num_tokens = mb.num_samples * len(mb.prefix_ids) + int(mb.valid.sum())
    teacher = None
    if mb.teacher_logprobs is not None:
        teacher = torch.from_numpy(mb.teacher_logprobs).float().to(device).reshape(-1)
    inputs = LossInputs(lp.reshape(-1), inf_lp, adv, mask, teacher_logprobs=teacher)
    return ForwardOutput(inputs, ent.reshape(-1), ids, num_tokens)
