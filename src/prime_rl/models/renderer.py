"""The chat renderer shared by sampling (orchestrator, eval) and training (SFT), and the tokenizer it renders with.

One renderer serves both, so every next-turn prompt extends the tokens actually sampled and SFT trains on the
same token layout that RL samples (docs/orchestrator.md, "Renderers").

`renderer.name`:
- `auto` (default): a named `renderers` renderer for the model's family, else `template`. The family is found by
  the tokenizer's hub id (`renderers`' model map), else by parity: the first text renderer of the `renderers`
  package whose token ids equal the model's own chat template on probe conversations (system + user; a finished
  assistant turn; a tool call and its result, with tools) is the model's family (e.g. `qwen3` for Qwen3 templates).
- `template`: `prime_rl.models.template_renderer.TemplateRenderer`, driven by the tokenizer's chat template.
- any name `renderers` knows (`qwen3`, `llama-3`, `default`, ...).

`renderer.enable_thinking` goes to the renderer's `enable_thinking` field, or to the chat template when the
template reads that variable; an explicit setting that can do neither is refused.

The tokenizer a renderer gets has `encode` memoized for short strings and `decode` for short id lists
(`memoize_encode`): the `renderers` package re-encodes the same few scaffold strings (`<|im_start|>assistant\n`,
`\n`, the empty think block, role names) about 15 times per GridSim rollout and decodes single tokens and pairs 6
times, each through transformers' per-call set-up.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from prime_rl.models.template_renderer import TemplateRenderer, template_reads

# renderers that probe the network or need multimodal processors: never candidates for parity matching
_NOT_PROBED = {"default", "auto", "gpt-oss"}
_PROBE_TOOLS = [
    {"type": "function", "function": {"name": "get", "description": "Get a value.",
                                      "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}
]  # fmt: skip
_PROBES: list[tuple[list[dict], bool, bool]] = [  # (messages, with tools, add_generation_prompt)
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}], False, True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], False, False),
    (
        [
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "Get a."},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"key": "a"}}}]},
            {"role": "tool", "name": "get", "content": "1"},
        ],
        True,
        True,
    ),
]  # fmt: skip


def _template_ids(tokenizer: Any, messages: list[dict], tools: list[dict] | None, gen: bool) -> list[int]:
    kw = {"tools": tools} if tools else {}
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen, return_dict=False, **kw)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def family_renderer(tokenizer: Any) -> str | None:
    """The named `renderers` renderer for this tokenizer's model family, or None (see the module docstring)."""
    from renderers.base import MODEL_RENDERER_MAP, RENDERER_REGISTRY, _populate_registry, create_renderer
    from renderers.configs import _config_class_for

    by_id = MODEL_RENDERER_MAP.get(getattr(tokenizer, "name_or_path", "") or "")
    if by_id is not None:
        return by_id
    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        return None
    try:
        wants = [_template_ids(tokenizer, m, _PROBE_TOOLS if t else None, g) for m, t, g in _PROBES]
    except Exception:  # noqa: BLE001 - a template that cannot render the probes matches no family
        return None
    _populate_registry()
    for name in sorted(set(RENDERER_REGISTRY) - _NOT_PROBED):
        try:
            renderer = create_renderer(tokenizer, _config_class_for(name)())
            got = [list(renderer.render_ids(m, tools=_PROBE_TOOLS if t else None, add_generation_prompt=g))
                   for m, t, g in _PROBES]  # fmt: skip
        except Exception:  # noqa: BLE001 - renderers assert their family's special tokens: not this family
            continue
        if got == wants:
            return name
    return None


def resolve_renderer_name(tokenizer: Any, name: str) -> str:
    """`auto` -> the family's renderer name or `template`; any other name unchanged."""
    if name != "auto":
        return name
    return family_renderer(tokenizer) or "template"


class _MemoEncode:
    """`tokenizer.encode` with a bounded LRU cache of (text, add_special_tokens) -> ids for strings of at most
    `max_chars` characters; every other call (longer text, other keyword arguments) goes straight through. Returns
    a new list each time (callers may change it)."""

    def __init__(self, encode: Any, max_chars: int = 256, max_entries: int = 4096):
        self.encode, self.max_chars, self.max_entries = encode, max_chars, max_entries
        self.cache: OrderedDict[tuple[str, bool], list[int]] = OrderedDict()

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        if args or not isinstance(text, str) or len(text) > self.max_chars or set(kwargs) - {"add_special_tokens"}:
            return self.encode(text, *args, **kwargs)
        key = (text, bool(kwargs.get("add_special_tokens", True)))
        ids = self.cache.get(key)
        if ids is None:
            ids = list(self.encode(text, add_special_tokens=key[1]))
            self.cache[key] = ids
            if len(self.cache) > self.max_entries:
                self.cache.popitem(last=False)
        return list(ids)


class _MemoDecode:
    """`tokenizer.decode` with a bounded LRU cache of (ids, skip_special_tokens) -> text for at most `max_ids` ids
    (the renderer decodes single tokens and pairs many times per turn); every other call goes straight through."""

    def __init__(self, decode: Any, max_ids: int = 8, max_entries: int = 8192):
        self.decode, self.max_ids, self.max_entries = decode, max_ids, max_entries
        self.cache: OrderedDict[tuple, str] = OrderedDict()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # only `decode(ids)` / `decode(ids, skip_special_tokens=...)` is cached; everything else (e.g. transformers'
        # `batch_decode`, which calls `decode(token_ids=..., ...)`) goes straight through
        if len(args) != 1 or set(kwargs) - {"skip_special_tokens"} or not isinstance(args[0], list | tuple | int):
            return self.decode(*args, **kwargs)
        ids = args[0]
        seq = (ids,) if isinstance(ids, int) else tuple(ids)
        if len(seq) > self.max_ids or not all(type(i) is int for i in seq):
            return self.decode(ids, **kwargs)
        key = (isinstance(ids, int), seq, bool(kwargs.get("skip_special_tokens", False)))
        text = self.cache.get(key)
        if text is None:
            text = self.decode(ids, **kwargs)
            self.cache[key] = text
            if len(self.cache) > self.max_entries:
                self.cache.popitem(last=False)
        return text


def _rust_backend(tok: Any) -> Any:
    """`tok`'s `tokenizers.Tokenizer` when transformers' `__call__`, `encode` and `decode` of `tok` are the stock
    `TokenizersBackend` ones (each a wrapper around that backend), else None: then `RendererTokenizer` has no fast
    path and passes every call through."""
    try:
        from tokenizers import Tokenizer
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    cls = type(tok)
    stock = (
        isinstance(tok, TokenizersBackend)
        and cls.__call__ is PreTrainedTokenizerBase.__call__
        and cls.decode is PreTrainedTokenizerBase.decode
        and cls._encode_plus is TokenizersBackend._encode_plus
        and cls._convert_encoding is TokenizersBackend._convert_encoding
        and cls._decode is TokenizersBackend._decode
        and not hasattr(cls, "_switch_to_input_mode")  # seq2seq tokenizers switch modes inside __call__
    )
    backend = getattr(tok, "_tokenizer", None)
    return backend if stock and isinstance(backend, Tokenizer) else None


def _call_cache(tok: RendererTokenizer, n_chars: int) -> OrderedDict | None:
    """Which answers of `RendererTokenizer.__call__` are kept, by text length: texts of at most 32 characters (the
    renderers' capability probe `tok("a", ...)`, two or three per turn, and bare scaffolds; up to 4096 of them) and
    texts of 512 to 32768 characters (a system prompt with its tool schemas, the same for every task of a source and
    the costliest text a first prompt encodes; the 16 most recently used). The texts between (user prompts, tool
    results) are encoded each time: they rarely repeat in a run (they do in benchmarks/orchestrator.py, whose stub
    answers every rollout of a group alike, which a cache of them would flatter)."""
    if n_chars <= 32:
        return tok._short
    if 512 <= n_chars <= 32768:
        return tok._long
    return None


class RendererTokenizer:
    """The tokenizer as `renderers` renderers see it (their `Tokenizer`/`OffsetTokenizer` protocol): every
    attribute and call is `tok`'s, with the same answers, but the calls a renderer makes several times per turn skip
    transformers' per-call set-up (argument normalisation, padding/truncation bookkeeping, `BatchEncoding` batching):

    - `tok(text, add_special_tokens=..., return_offsets_mapping=...)` on one string (what `attribute_text_segments`
      calls for every message it renders, and its capability probe `tok("a", ...)` before each): one call of the
      Rust backend's `encode` (transformers' wrapper cost ~60 us of a ~70 us probe); the answers for the probe and
      for long system prompts are kept (`_call_cache`);
    - `decode(ids, skip_special_tokens=...)` of a list of ids: the backend's `decode` (the parser decodes every
      completion; short lists still come from `tok.decode`'s memo, `memoize_encode`);
    - `convert_tokens_to_ids` of one token string (the reasoning scan asks for `<think>` and `</think>` several
      times per turn): kept;
    - `unk_token_id` and `eos_token_id` (read ~20 times per turn; transformers resolves them through `__getattr__`):
      read once.

    The fast paths run only when `tok` is a stock `TokenizersBackend` (`_rust_backend`) and its backend is in the
    state transformers' own call would leave it in (no truncation, no padding, `split_special_tokens` as set);
    otherwise the call goes to `tok`. Like the memo, it assumes the tokenizer's vocabulary and special tokens do
    not change once the renderer is made. `tests/models/test_memo_tokenizer.py` compares it with the plain tokenizer.
    """

    def __init__(self, tok: Any):
        attrs = self.__dict__
        attrs["_tok"] = tok
        attrs["_backend"] = _rust_backend(tok)
        names = getattr(tok, "model_input_names", None) or []
        attrs["_type_ids"] = "token_type_ids" in names
        attrs["_attention"] = "attention_mask" in names
        for name in ("unk_token_id", "eos_token_id"):
            if hasattr(tok, name):
                attrs[name] = getattr(tok, name)
        attrs["_short"] = OrderedDict()  # (text, add_special_tokens, offsets) -> (data, encoding): see _call_cache
        attrs["_long"] = OrderedDict()
        attrs["_token_ids"] = {}  # convert_tokens_to_ids of one token string

    @property
    def wrapped(self) -> Any:
        """The tokenizer this one answers for."""
        return self._tok

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._tok, name, value)

    def __len__(self) -> int:
        return len(self._tok)

    def __repr__(self) -> str:
        return f"RendererTokenizer({self._tok!r})"

    def _ready(self) -> Any:
        """The backend when a fast path gives what transformers would, else None."""
        backend = self._backend
        if backend is None or backend.truncation is not None or backend.padding is not None:
            return None
        return backend if backend.encode_special_tokens == self._tok.split_special_tokens else None

    def __call__(self, text: Any = None, *args: Any, **kwargs: Any) -> Any:
        backend = self._ready() if type(text) is str and not args else None
        if backend is None or not kwargs.keys() <= {"add_special_tokens", "return_offsets_mapping"}:
            return self._tok(text, *args, **kwargs)
        from transformers.tokenization_utils_base import BatchEncoding

        special, offsets = bool(kwargs.get("add_special_tokens", True)), bool(kwargs.get("return_offsets_mapping"))
        key = (text, special, offsets)
        cache = _call_cache(self, len(text))
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            if cache is self._long:
                cache.move_to_end(key)
            data, enc = hit
            return BatchEncoding({k: list(v) for k, v in data.items()}, [enc])
        enc = backend.encode(text, add_special_tokens=special)
        data: dict[str, Any] = {"input_ids": enc.ids}
        if self._type_ids:
            data["token_type_ids"] = enc.type_ids
        if self._attention:
            data["attention_mask"] = enc.attention_mask
        if offsets:
            data["offset_mapping"] = enc.offsets
        warn = getattr(self._tok, "_eventual_warn_about_too_long_sequence", None)
        if warn is not None:  # transformers' "longer than model_max_length" warning, as its own call gives it
            warn(data["input_ids"], None, True)
        if cache is not None:
            cache[key] = ({k: list(v) for k, v in data.items()}, enc)
            if len(cache) > (4096 if cache is self._short else 16):
                cache.popitem(last=False)
        return BatchEncoding(data, [enc])

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if type(tokens) is not str:
            return self._tok.convert_tokens_to_ids(tokens)
        token_id = self._token_ids.get(tokens)
        if token_id is None:
            token_id = self._token_ids[tokens] = self._tok.convert_tokens_to_ids(tokens)
        return token_id

    def decode(self, token_ids: Any = None, *args: Any, **kwargs: Any) -> Any:
        if (
            type(token_ids) is list
            and len(token_ids) > 8  # shorter lists: the memo of `tok.decode`
            and type(token_ids[0]) is int  # not a batch
            and not args
            and kwargs.keys() <= {"skip_special_tokens"}
            and self._backend is not None
            and not self._tok.clean_up_tokenization_spaces
        ):
            try:
                return self._backend.decode(token_ids, skip_special_tokens=bool(kwargs.get("skip_special_tokens", False)))
            except TypeError:  # an id that is not a Python int (numpy): transformers converts it first
                pass
        if token_ids is None:
            return self._tok.decode(*args, **kwargs)
        return self._tok.decode(token_ids, *args, **kwargs)


def memoize_encode(tokenizer: Any) -> Any:
    """Give `tokenizer` (in place; returned) an `encode` that caches short strings (`_MemoEncode`) and a `decode`
    that caches short id lists (`_MemoDecode`); idempotent. The tokenizer must not change its vocabulary afterwards
    (added tokens would not reach cached entries)."""
    if not isinstance(getattr(tokenizer, "encode", None), _MemoEncode):
        tokenizer.encode = _MemoEncode(tokenizer.encode)
    if not isinstance(getattr(tokenizer, "decode", None), _MemoDecode):
        tokenizer.decode = _MemoDecode(tokenizer.decode)
    return tokenizer


def make_renderer(tokenizer: Any, cfg: Any = "auto", enable_thinking: bool | None = None) -> Any:
    """The renderer of `cfg` for `tokenizer`.

    Args:
        cfg: a renderer name or a config with `.name` and `.enable_thinking` (RendererConfig); `auto` resolves as
            the module docstring says.
        enable_thinking: overrides the config's value (and counts as explicitly set).

    Raises:
        ValueError: unknown renderer name (`renderer.name`); an explicit `enable_thinking` the renderer and the
            chat template cannot honour; `template` on a tokenizer without a chat template.
    """
    from renderers import create_renderer
    from renderers.configs import config_from_name

    memoize_encode(tokenizer)
    name = cfg if isinstance(cfg, str) else cfg.name
    if enable_thinking is None and not isinstance(cfg, str):
        enable_thinking = cfg.enable_thinking  # None when not set, also after a config file round trip (rl's children)
    explicit = enable_thinking is not None
    enable_thinking = bool(enable_thinking)
    resolved = resolve_renderer_name(tokenizer, name)
    reads = template_reads(tokenizer, "enable_thinking")
    if resolved == "template":
        if explicit and not reads:
            raise _thinking_refused(name, resolved)
        return TemplateRenderer(tokenizer, {"enable_thinking": enable_thinking} if reads else None)
    try:
        base = config_from_name(resolved)
    except Exception as e:
        raise ValueError(
            f"renderer.name = {name!r} is not a known `renderers` renderer ({e}); try 'auto', 'template' or 'qwen3'"
        ) from e
    fields = type(base).model_fields if base is not None else {}
    if "enable_thinking" in fields:
        base = type(base)(enable_thinking=enable_thinking)
    elif resolved == "default" and reads:
        base = type(base)(enable_thinking=enable_thinking)  # DefaultRendererConfig passes extras to the template
    elif explicit:
        raise _thinking_refused(name, resolved, [f for f in fields if f != "name"])
    return create_renderer(RendererTokenizer(tokenizer), base)


def _thinking_refused(name: str, resolved: str, settings: list[str] | None = None) -> ValueError:
    """The refusal of an explicit `enable_thinking` nothing reads. `settings`: the named renderer's own settings
    (None: the chat template renders, and it does not read the variable)."""
    via = f" (resolved to {resolved!r})" if resolved != name else ""
    if settings is None:
        return ValueError(
            f"renderer.enable_thinking is set, but renderer {name!r}{via} renders with the model's chat template, "
            "which does not read `enable_thinking`: the setting would be ignored. Remove it, or use a chat template "
            "(model.chat_template) or a renderer that supports thinking"
        )
    return ValueError(
        f"renderer.enable_thinking is set, but renderer {name!r}{via} has no enable_thinking setting (its settings: "
        f"{', '.join(settings) or 'none'}); the renderer decides thinking itself, so the setting would be ignored. "
        "Remove enable_thinking, or use a renderer with that setting (e.g. 'qwen3')"
    )


def load_tokenizer(model_name: str | Path, chat_template: str | Path | None = None) -> Any:
    """`transformers.AutoTokenizer` of `model.name` (a local folder or a hub id, see `prime_rl.models.hub`), with
    the chat template replaced by the file `chat_template` when given (`model.chat_template`).

    Raises:
        ModelNotFoundError: `model.name` cannot be resolved. FileNotFoundError: no `chat_template` file.
    """
    from transformers import AutoTokenizer

    from prime_rl.models.hub import is_hub_id, resolve_model

    name = str(model_name)
    local = resolve_model(name)
    # a hub id loads by its id (from the cache resolve_model filled), so the tokenizer keeps it as name_or_path
    tok = AutoTokenizer.from_pretrained(name if is_hub_id(name) else str(local))
    if chat_template is not None:
        tok.chat_template = read_chat_template(chat_template)
    return tok


def read_chat_template(path: str | Path) -> str:
    """The text of a chat template file (`model.chat_template`). Raises FileNotFoundError naming the field."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"model.chat_template = {str(path)!r}: no such file (a Jinja chat template)")
    return file.read_text(encoding="utf-8")
