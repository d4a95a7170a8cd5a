"""The trainer's input: packed micro-batches for step N, one file per data-parallel rank.

File `rollouts/step_N/rank_R.bin` is msgpack (never pickle) of::

    {"format": "prime-rl/batch", "version": 1, "step": N, "rank": R, "world_size": W,
     "total_loss_tokens": int,               # loss tokens of the whole step, all ranks (loss normaliser)
     "micro_batches": [{field: {"dtype": str, "shape": [T], "data": bytes}, ...}, ...],
     "metrics": {...}}                       # orchestrator-side numbers, for logging only

Every rank's file of one step holds the same number of micro-batches (the orchestrator pads with micro-batches
whose `loss_mask` is all zero), so FSDP collectives line up. Per micro-batch, all fields are 1-D of length T
(T <= seq_len): the samples packed back to back, `position_ids` restarting at 0 for each sample. The optional
field `teacher_logprobs` (float32 [T], the teacher's logprob of each token; on-policy distillation,
`[orchestrator.teacher]`) is present in every micro-batch of a step that has it, and absent otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from prime_rl.transport.atomic import atomic_write_bytes

FORMAT = "prime-rl/batch"
VERSION = 1

# field name -> numpy dtype on disk
FIELDS: dict[str, str] = {
    "input_ids": "int32",
    "position_ids": "int32",
    "loss_mask": "bool",
    "advantages": "float32",
    "inference_logprobs": "float32",
    "temperature": "float32",
}
# optional fields: written when set, read when present
OPTIONAL_FIELDS: dict[str, str] = {"teacher_logprobs": "float32"}


class BatchFormatError(ValueError):
    """A batch file is not in the expected format (names the file and the field)."""


@dataclass
class MicroBatch:
    """One packed sequence of T tokens; every array has shape [T].

    `inference_logprobs[t]` is the inference engine's logprob (at `temperature[t]`) of token `input_ids[t]`
    given the tokens before it; it is only meaningful where `loss_mask[t]` is true. `teacher_logprobs[t]` (optional,
    None when the run has no teacher) is the teacher's logprob of the same token at temperature 1.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    loss_mask: np.ndarray
    advantages: np.ndarray
    inference_logprobs: np.ndarray
    temperature: np.ndarray
    teacher_logprobs: np.ndarray | None = None

    def __post_init__(self) -> None:
        length = None
        for name, dtype in self.dtypes().items():
            arr = np.ascontiguousarray(np.asarray(getattr(self, name)).astype(dtype, copy=False))
            if arr.ndim != 1:
                raise BatchFormatError(f"micro-batch field {name!r} must be 1-D, got shape {arr.shape}")
            if length is None:
                length = arr.shape[0]
            elif arr.shape[0] != length:
                raise BatchFormatError(f"micro-batch field {name!r} has length {arr.shape[0]}, expected {length}")
            setattr(self, name, arr)

    def dtypes(self) -> dict[str, str]:
        """Field name -> dtype of the fields this micro-batch holds (`FIELDS`, plus the optional ones that are set)."""
        return {**FIELDS, **{k: v for k, v in OPTIONAL_FIELDS.items() if getattr(self, k) is not None}}

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())

    def nonfinite_fields(self) -> list[str]:
        """Fields holding NaN or inf on a loss token (`advantages`, `inference_logprobs`, `temperature`,
        `teacher_logprobs` when set); [] when none does. One vectorised check per field (docs/design.md invariant 7)."""
        mask = self.loss_mask
        names = ["advantages", "inference_logprobs", "temperature"] + [k for k in OPTIONAL_FIELDS if getattr(self, k) is not None]
        return [name for name in names if not bool(np.isfinite(getattr(self, name)[mask]).all())]

    @classmethod
    def empty_like(cls, length: int = 1, pad_id: int = 0, teacher: bool = False) -> MicroBatch:
        """A padding micro-batch with no loss tokens (with `teacher`: zero `teacher_logprobs`)."""
        zeros = np.zeros(length, dtype=np.float32)
        return cls(np.full(length, pad_id), np.arange(length), np.zeros(length, bool), zeros, zeros, np.ones(length),
                   zeros if teacher else None)


def concat_micro_batches(mbs: list[MicroBatch], max_tokens: int) -> list[MicroBatch]:
    """Concatenate consecutive micro-batches while the result holds at most `max_tokens` tokens (one that is longer
    on its own stays as it is). The result is again a packed micro-batch: `position_ids` still restart at 0 for
    each sample, so the samples stay separate; every token keeps its fields, in order (a loss-free micro-batch
    without the optional `teacher_logprobs` merged with ones that have them gets zeros there). Returns new
    micro-batches (the inputs when nothing merges).

    Raises:
        BatchFormatError: a micro-batch with loss tokens lacks `teacher_logprobs` that another one has."""
    groups: list[list[MicroBatch]] = []
    size = 0
    for mb in mbs:
        if groups and size + len(mb) <= max_tokens:
            groups[-1].append(mb)
            size += len(mb)
        else:
            groups.append([mb])
            size = len(mb)
    return [g[0] if len(g) == 1 else _concat(g) for g in groups]


def _concat(mbs: list[MicroBatch]) -> MicroBatch:
    fields = {f: np.concatenate([getattr(m, f) for m in mbs]) for f in FIELDS}
    for name, dtype in OPTIONAL_FIELDS.items():
        if all(getattr(m, name) is None for m in mbs):
            continue
        if any(getattr(m, name) is None and m.num_loss_tokens for m in mbs):
            raise BatchFormatError(f"micro-batches to concatenate differ in {name!r}: one with loss tokens lacks it")
        fields[name] = np.concatenate([np.zeros(len(m), dtype) if getattr(m, name) is None else getattr(m, name)
                                        for m in mbs])  # fmt: skip
    return MicroBatch(**fields)


@dataclass
class StepBatch:
    step: int
    rank: int
    world_size: int
    total_loss_tokens: int
    micro_batches: list[MicroBatch]
    metrics: dict[str, Any] = field(default_factory=dict)


def encode_batch(batch: StepBatch) -> bytes:
    mbs = [
        {name: {"dtype": dtype, "shape": [len(mb)], "data": getattr(mb, name).tobytes()}
         for name, dtype in mb.dtypes().items()}
        for mb in batch.micro_batches
    ]  # fmt: skip
    return msgpack.packb(
        {
            "format": FORMAT,
            "version": VERSION,
            "step": batch.step,
            "rank": batch.rank,
            "world_size": batch.world_size,
            "total_loss_tokens": int(batch.total_loss_tokens),
            "micro_batches": mbs,
            "metrics": batch.metrics,
        },
        use_bin_type=True,
    )


def decode_batch(data: bytes, source: str = "<bytes>") -> StepBatch:
    """Parse a batch file's bytes.

    Raises:
        BatchFormatError: wrong format/version, missing field, bad dtype/shape, or a NaN/inf advantage, inference
            logprob, temperature or teacher logprob on a loss token (names `source`, the micro-batch and the field).
    """
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several types
        raise BatchFormatError(f"{source}: not a msgpack batch file ({e})") from e
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise BatchFormatError(f"{source}: not a prime-rl batch file (format={obj.get('format') if isinstance(obj, dict) else None!r})")
    if obj.get("version") != VERSION:
        raise BatchFormatError(f"{source}: batch format version {obj.get('version')} unsupported (expected {VERSION})")
    mbs = []
    for i, raw in enumerate(obj["micro_batches"]):
        arrays = {}
        for name, dtype in FIELDS.items():
            if name not in raw:
                raise BatchFormatError(f"{source}: micro_batches[{i}] lacks field {name!r}")
            ent = raw[name]
            if ent["dtype"] != dtype:
                raise BatchFormatError(f"{source}: micro_batches[{i}].{name} has dtype {ent['dtype']}, expected {dtype}")
            arrays[name] = np.frombuffer(ent["data"], dtype=dtype).reshape(ent["shape"]).copy()
        for name, dtype in OPTIONAL_FIELDS.items():
            if name in raw:
                ent = raw[name]
                if ent["dtype"] != dtype:
                    raise BatchFormatError(f"{source}: micro_batches[{i}].{name} has dtype {ent['dtype']}, expected {dtype}")
                arrays[name] = np.frombuffer(ent["data"], dtype=dtype).reshape(ent["shape"]).copy()
        mb = MicroBatch(**arrays)
        bad = mb.nonfinite_fields()
        if bad:
            raise BatchFormatError(f"{source}: micro_batches[{i}].{bad[0]} is NaN or inf on a loss token; the "
                                   "orchestrator masks such rollouts, so this file was not written by it intact")  # fmt: skip
        mbs.append(mb)
    return StepBatch(
        step=int(obj["step"]),
        rank=int(obj["rank"]),
        world_size=int(obj["world_size"]),
        total_loss_tokens=int(obj["total_loss_tokens"]),
        micro_batches=mbs,
        metrics=dict(obj.get("metrics") or {}),
    )


def write_batch(path: Path, batch: StepBatch) -> None:
    """Write a batch file atomically (docs/design.md invariant 4)."""
    atomic_write_bytes(Path(path), encode_batch(batch))


def read_batch(path: Path) -> StepBatch:
    path = Path(path)
    return decode_batch(path.read_bytes(), source=str(path))


def wait_for_batch(path: Path, timeout_s: float, poll_s: float = 0.005) -> StepBatch:
    """Block until `path` exists (checked every `poll_s`: one stat, so 5 ms costs nothing and adds 2.5 ms on average
    to a step), then read it.

    Raises:
        TimeoutError: after `timeout_s` seconds, naming the file waited for.
    """
    path = Path(path)
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no batch at {path} after {timeout_s:.0f} s: is the orchestrator running? see logs/orchestrator.log"
            )
        time.sleep(poll_s)
    return read_batch(path)
