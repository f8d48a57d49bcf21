"""`tunix-lite` command line: info, generate, train, sft (and the course's grade / build-exercises)."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from importlib import metadata


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cmd_info(args) -> int:
    import jax

    from tunix_lite.sharding import suggest_mesh

    print(f"tunix-lite {_version('tunix-lite')}  python {platform.python_version()}  ({platform.machine()})")
    for dist in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "torch"):
        print(f"  {dist:<17} {_version(dist)}")
    devices = jax.devices()
    print(f"backend: {jax.default_backend()}  devices: {len(devices)} x {devices[0].device_kind}")
    mesh = suggest_mesh(len(devices))
    print("suggested mesh: " + ", ".join(f"{k}={v}" for k, v in mesh.items())
          + f"   (tunix_lite.sharding.make_mesh(**{mesh}))")
    return 0


def cmd_generate(args) -> int:
    import json

    from tunix_lite.chat import format_chat
    from tunix_lite.loading import load
    from tunix_lite.sampler import Sampler, check_sampling

    settings = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    check_sampling(args.max_new_tokens, 1, args.temperature, args.top_k, args.top_p)  # before the model loads
    model, tokenizer = load(args.model, verbose=True)
    sampler = Sampler(model, tokenizer)
    prompts = [format_chat(tokenizer, [{"role": "user", "content": p}]) if args.chat else p for p in args.prompt]
    start = time.perf_counter()
    out = sampler.generate(prompts, args.max_new_tokens, **settings)
    seconds = time.perf_counter() - start
    for prompt, text, n in zip(args.prompt, out.texts, out.lengths):
        if args.json:  # one object per line: several prompts' outputs cannot run into each other
            print(json.dumps({"prompt": prompt, "completion": text, "tokens": int(n)}, ensure_ascii=False))
        else:
            print(f"{prompt}{text}" if not args.chat else text)
    print(f"[{int(out.lengths.sum())} tokens in {seconds:.1f} s, compile included]", file=sys.stderr)
    return 0


def cmd_train(args) -> int:
    from tunix_lite.training import algorithms

    overrides = {key: value for key, value in (("steps", args.steps), ("output_dir", args.output_dir),
                                               ("model", args.model)) if value is not None}
    config = algorithms.load_config(args.config, algorithm="sft" if args.command == "sft" else None, **overrides)
    result = algorithms.run(config)
    print(f"[{len(result.history)} steps in {result.seconds:.0f} s]", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunix-lite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="versions, backend, devices and a suggested mesh").set_defaults(fn=cmd_info)

    gen = sub.add_parser("generate", help="generate text from a model")
    gen.add_argument("--model", default="tiny", help="tiny | gemma3-270m | a checkpoint directory | a hub id")
    gen.add_argument("--prompt", action="append", required=True,
                     help="repeat for a batch (with --json, each output is one JSON line)")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat turn format")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=None)
    gen.add_argument("--top-p", type=float, default=None)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--json", action="store_true",
                     help='print one JSON object per prompt and line: {"prompt", "completion", "tokens"}')
    gen.set_defaults(fn=cmd_generate)

    for name, text in (("train", "train with any algorithm from a YAML config (its `algorithm:` key: "
                                 "sft | dpo | grpo | distill)"),
                       ("sft", "supervised fine-tuning (full, LoRA or QLoRA) from a YAML config")):
        train = sub.add_parser(name, help=text)
        train.add_argument("--config", required=True, help="YAML file of config keys, e.g. configs/sft_tiny.yaml")
        train.add_argument("--steps", type=int, default=None, help="override the config's steps")
        train.add_argument("--model", default=None, help="override the config's model")
        train.add_argument("--output-dir", default=None, help="override the config's output_dir")
        train.set_defaults(fn=cmd_train)

    # listed for --help; main() hands their arguments straight to the course tools' own parsers
    sub.add_parser("grade", help="grade an exercise notebook (tunix-lite grade NB.ipynb --help)")
    sub.add_parser("build-exercises", help="build exercises/ from solutions/ (--check to verify)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["grade"], ["build-exercises"]):
        from tunix_lite.course import build, grading

        return (grading.main if argv[0] == "grade" else build.main)(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, KeyError, OSError, ImportError, RuntimeError, FloatingPointError) as e:
        # Bad input (and a full disk, a diverged run) gets one line that says what and where, not a traceback.
        message = e.args[0] if isinstance(e, KeyError) and e.args else e  # str(KeyError) adds quotes
        print(f"tunix-lite {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
