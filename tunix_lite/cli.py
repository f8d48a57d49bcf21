"""`tunix-lite` command line: info, generate, train, sft, run, plan, eval (and the course's grade /
grade-capstone / grade-all / build-exercises)."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
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

    print(f"tunix-lite {_version('tunix-lite')}  python {platform.python_version()}  "
          f"({platform.machine()})")
    for dist in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "torch"):
        print(f"  {dist:<17} {_version(dist)}")
    devices = jax.devices()
    print(f"backend: {jax.default_backend()}  devices: {len(devices)} x {devices[0].device_kind}")
    from tunix_lite import compile_cache

    cache = compile_cache.cache_path()
    print(f"compilation cache: {cache or 'off'}"
          + (f" ({compile_cache.SWITCH}=0 turns it off)" if cache else ""))
    mesh = suggest_mesh(len(devices))
    print("suggested mesh: " + ", ".join(f"{k}={v}" for k, v in mesh.items())
          + f"   (tunix_lite.sharding.make_mesh(**{mesh}))")
    return 0


def cmd_generate(args) -> int:
    import json

    from tunix_lite.chat import format_chat
    from tunix_lite.sampler import Sampler, check_sampling
    from tunix_lite.training.stopped_run import load_model_or_run

    settings = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                    seed=args.seed)
    # before the model loads
    check_sampling(args.max_new_tokens, 1, args.temperature, args.top_k, args.top_p)
    for i, prompt in enumerate(args.prompt, start=1):
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as e:  # Python keeps an argument's bad bytes as lone surrogates
            raw = prompt[e.start:e.end].encode("utf-8", "surrogateescape")
            raise ValueError(f"--prompt {i}: bytes {raw!r} at character {e.start + 1} are not "
                             "UTF-8; pass UTF-8 text (a UTF-8 terminal or file encoding)") from None
    model, tokenizer = load_model_or_run(args.model, verbose=True)
    sampler = Sampler(model, tokenizer)
    prompts = [format_chat(tokenizer, [{"role": "user", "content": p}]) if args.chat else p
               for p in args.prompt]
    start = time.perf_counter()
    out = sampler.generate(prompts, args.max_new_tokens, **settings)
    seconds = time.perf_counter() - start
    for prompt, text, n in zip(args.prompt, out.texts, out.lengths):
        if args.json:  # one object per line: several prompts' outputs cannot run into each other
            print(json.dumps({"prompt": prompt, "completion": text, "tokens": int(n)},
                             ensure_ascii=False))
        else:
            print(f"{prompt}{text}" if not args.chat else text)
    print(f"[{int(out.lengths.sum())} tokens in {seconds:.1f} s, compile included]",
          file=sys.stderr)
    return 0


def cmd_train(args) -> int:
    from tunix_lite.training import algorithms

    overrides = {key: value for key, value in (("steps", args.steps),
                                               ("output_dir", args.output_dir),
                                               ("model", args.model)) if value is not None}
    if args.resume_from_intact:  # absent, the config file's resume_from_intact holds
        overrides["resume_from_intact"] = True
    config = algorithms.load_config(args.config, algorithm="sft" if args.command == "sft" else None,
                                    settings=args.settings, **overrides)
    result = algorithms.run(config)
    paused = "" if result.finished else "; time budget used: rerun the same command to continue"
    print(f"[{len(result.history)} steps in {result.seconds:.0f} s{paused}]", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from tunix_lite.pipeline import load_pipeline, plan, run_pipeline

    pipeline = load_pipeline(args.pipeline, settings=args.settings, max_minutes=args.max_minutes,
                             output_dir=args.output_dir)
    if args.check:
        print(plan(pipeline))
        return 0
    result = run_pipeline(pipeline)
    state = ("finished" if result.finished
             else "paused at the time budget; rerun the same command to continue")
    print(f"[{state}: {result.output_dir} in {result.seconds:.0f} s; "
          f"the table: {result.output_dir}/report/table.md]", file=sys.stderr)
    return 0


def cmd_plan(args) -> int:
    from tunix_lite.planner import Plan

    rollout = tuple(int(x) for x in args.rollout.split(",")) if args.rollout else None
    if rollout is not None and len(rollout) != 2:
        raise ValueError(f"--rollout: expected G,NEW_TOKENS (e.g. 8,256), got {args.rollout!r}")
    plan = Plan.make(args.model, args.devices, args.strategy, batch=args.batch, seq=args.seq,
                     lora_rank=args.lora, quantize=args.quantize, remat=args.remat,
                     logits_chunk=args.logits_chunk, compute_dtype=args.dtype,
                     micro_batches=args.micro_batches, rollout=rollout, tensor=args.tensor)
    print(plan.report())
    return 0


def cmd_eval(args) -> int:
    import json

    from tunix_lite.loading import model_config
    from tunix_lite.evaluation.model_eval import (check_settings, decontaminate, eval_records,
                                                  evaluate, report_text, split_by_seen)
    from tunix_lite.training.stopped_run import load_model_or_run

    check_settings(n=args.n, samples=args.samples, temperature=args.temperature,
                   max_new_tokens=args.max_new_tokens)
    model_config(args.model)  # a missing model directory is named here, before data or weights load
    records, reward_fn = eval_records(args.data, n=args.n, seed=args.seed)
    records, decontamination, seen = decontaminate(records, args.model, args.exclude)
    model, tokenizer = load_model_or_run(args.model, verbose=True)
    report = {"command": "tunix-lite " + shlex.join(args.argv), "model": args.model,
              "data": args.data, "seed": args.seed, **decontamination}
    report |= evaluate(model, tokenizer, records, reward_fn, samples=args.samples,
                       temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                       seed=args.seed or 0)
    split_by_seen(report, seen)
    print(json.dumps(report) if args.json else report_text(report))
    return 0


def cmd_grade_all(args) -> int:
    from tunix_lite.course import roster

    return roster.grade_all(args.submissions, args.csv, phase=args.phase, tests_dir=args.tests,
                            timeout=args.timeout, image=args.docker)


def add_set_option(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                        help=f"set any key of the file, e.g. {example}; repeatable. KEY is a "
                             "dotted path (LIST.INDEX for a list), VALUE is YAML; checked and "
                             "saved as the file's values are; a dedicated flag (e.g. "
                             "--output-dir) wins over it")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunix-lite", description=__doc__)
    parser.add_argument("--no-compile-cache", action="store_true",
                        help="compile every program afresh (default: XLA's persistent cache "
                             "under the cache directory, so a rerun skips its compiles; "
                             "tunix-lite info shows where)")
    sub = parser.add_subparsers(dest="command", required=True)

    (sub.add_parser("info", help="versions, backend, devices and a suggested mesh")
     .set_defaults(fn=cmd_info))

    gen = sub.add_parser("generate", help="generate text from a model")
    gen.add_argument("--model", default="tiny",
                     help="tiny | gemma3-270m | a checkpoint directory | a training run's "
                          "output_dir (unfinished: its newest checkpoint) | a hub id")
    gen.add_argument("--prompt", action="append", required=True,
                     help="repeat for a batch (with --json, each output is one JSON line)")
    gen.add_argument("--chat", action="store_true",
                     help="wrap the prompt in the model's chat turn format")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=None)
    gen.add_argument("--top-p", type=float, default=None)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--json", action="store_true",
                     help='print one JSON object per prompt and line: '
                          '{"prompt", "completion", "tokens"}')
    gen.set_defaults(fn=cmd_generate)

    for name, text in (("train", "train with any algorithm from a YAML config "
                                 "(its `algorithm:` key: sft | dpo | grpo | distill)"),
                       ("sft", "supervised fine-tuning (full, LoRA or QLoRA) from a YAML config")):
        train = sub.add_parser(name, help=text)
        train.add_argument("--config", required=True,
                           help="a YAML file of config keys, or the name of a config shipped "
                                "with tunix_lite, e.g. sft_tiny (a wrong name lists them)")
        train.add_argument("--steps", type=int, default=None, help="override the config's steps")
        train.add_argument("--model", default=None, help="override the config's model")
        train.add_argument("--output-dir", default=None, help="override the config's output_dir")
        train.add_argument("--resume-from-intact", action="store_true",
                           help="when the latest checkpoint does not read, resume from the newest "
                                "one that does (config key resume_from_intact)")
        add_set_option(train, "learning_rate=3e-4")
        train.set_defaults(fn=cmd_train)

    plan = sub.add_parser("plan", help="memory per device, FLOPs, roofline step time and MFU of "
                                       "a training step")
    plan.add_argument("--model", default="gemma3-1b",
                      help="a preset: tiny, gemma3-270m, gemma3-1b, llama3.2-1b, ...")
    plan.add_argument("--devices", default="v5e-8",
                      help="KIND-COUNT: v3-8, v4-8, v5e-8, v5p-8, v6e-8, h100-8, a100-8")
    plan.add_argument("--strategy", default="fsdp", choices=["dp", "fsdp", "tp", "fsdp_tp"])
    plan.add_argument("--batch", type=int, default=32, help="rows per optimizer step")
    plan.add_argument("--seq", type=int, default=1024, help="tokens per row")
    plan.add_argument("--lora", type=int, default=None, help="LoRA rank (train adapters only)")
    plan.add_argument("--quantize", choices=["int8", "nf4"], default=None,
                      help="QLoRA base format (with --lora)")
    plan.add_argument("--remat", action="store_true",
                      help="recompute block activations in the backward pass")
    plan.add_argument("--logits-chunk", type=int, default=None,
                      help="tokens per vocabulary-projection chunk")
    plan.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"],
                      help="compute dtype")
    plan.add_argument("--micro-batches", type=int, default=1)
    plan.add_argument("--tensor", type=int, default=None,
                      help="tensor-parallel size for fsdp_tp (default 2)")
    plan.add_argument("--rollout", default=None,
                      help="G,NEW_TOKENS: add the sampler's KV cache for G samples of "
                           "each of the batch's prompts")
    plan.set_defaults(fn=cmd_plan)

    pipe = sub.add_parser("run", help="a multi-stage pipeline (e.g. sft -> dpo -> grpo) from one "
                                      "YAML file, with held-out evaluation after each stage and "
                                      "an exported model")
    pipe.add_argument("pipeline", help="a pipeline YAML file, or the name of one shipped with "
                                       "tunix_lite, e.g. capstone_tiny (a wrong name lists them)")
    pipe.add_argument("--max-minutes", type=float, default=None,
                      help="this session's wall-clock budget: then checkpoint and exit; "
                           "rerun to continue")
    pipe.add_argument("--output-dir", default=None, help="override the file's output_dir")
    pipe.add_argument("--check", action="store_true",
                      help="check the file and print the plan; no compute")
    add_set_option(pipe, "stages.2.steps=50")
    pipe.set_defaults(fn=cmd_run)

    ev = sub.add_parser("eval", help="score a model on a data spec with the training reward: "
                                     "accuracy with a 95%% interval, format, per task; "
                                     "pass@k, maj@k")
    ev.add_argument("--model", default="tiny",
                    help="tiny | gemma3-270m | a checkpoint or exported hf/ directory | a training "
                         "run's output_dir (a LoRA run: its adapters on its base model; an "
                         "unfinished run: its newest checkpoint, or RUN/checkpoints/STEP)")
    ev.add_argument("--data", default="synthetic",
                    help="synthetic | a records file (.jsonl .json .csv .parquet: prompt, answer[, "
                         "domain]) | reasoning_gym:TASK[,TASK...][?size=..&seed=..&TASK.key=value]")
    ev.add_argument("--n", type=int, default=None,
                    help="prompts to score (reasoning-gym: its size; default: a file's all, 200 "
                         "synthetic, the spec's size)")
    ev.add_argument("--seed", type=int, default=None,
                    help="seed of the generated prompts and of the samples")
    ev.add_argument("--samples", type=int, default=1,
                    help="K > 1: also K sampled answers per prompt, for pass@K and maj@K")
    ev.add_argument("--temperature", type=float, default=1.0, help="the K samples' temperature")
    ev.add_argument("--max-new-tokens", type=int, default=None,
                    help="reply budget; default: 128, or room for the longest reference reply")
    ev.add_argument("--exclude", action="append", default=[], metavar="SOURCE",
                    help="score only the prompts SOURCE does not ask (repeatable): a data spec, a "
                         "records file, or a training run's or pipeline's output_dir (the data "
                         "its config names, and its start model's); the report says how many "
                         "(n_excluded)")
    ev.add_argument("--json", action="store_true",
                    help="print one JSON object: accuracy, ci95, format, n, per_task, pass@K, ...")
    ev.set_defaults(fn=cmd_eval)

    roster = sub.add_parser("grade-all",
                            help="instructor: grade a roster of notebooks into one CSV "
                                 "(tunix_lite/course/roster.py says who is a learner)")
    roster.add_argument("submissions", help="a folder: one sub-folder or NAME.ipynb per learner")
    roster.add_argument("--csv", required=True,
                        help="the CSV to write, replaced only when complete")
    roster.add_argument("--tests", help="a folder of hidden test modules (phaseNN.py)")
    roster.add_argument("--phase", help="the phase of every notebook (default: each file's NN_)")
    roster.add_argument("--timeout", type=float, default=30.0,
                        help="seconds per exercise and per graded cell (default 30)")
    roster.add_argument("--docker", metavar="IMAGE",
                        help="grade each learner in a fresh container of IMAGE (no network, "
                             "read-only; course/instructor/Dockerfile builds it)")
    roster.set_defaults(fn=cmd_grade_all)

    # listed for --help; main() hands their arguments straight to the course tools' own parsers
    sub.add_parser("grade", help="grade an exercise notebook (tunix-lite grade NB.ipynb --help)")
    sub.add_parser("grade-capstone", help="grade a capstone pipeline run and its write-up "
                                          "(tunix-lite grade-capstone RUN_DIR --help)")
    sub.add_parser("build-exercises", help="build exercises/ from solutions/ (--check to verify)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["grade"], ["grade-capstone"], ["build-exercises"]):
        from tunix_lite.course import build, capstone, grading

        tool = {"grade": grading.main, "grade-capstone": capstone.main,
                "build-exercises": build.main}
        return tool[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv  # what a report quotes as the command that made it
    if args.no_compile_cache:
        from tunix_lite import compile_cache

        # read by every compile_cache.enable() of this process
        os.environ[compile_cache.SWITCH] = "0"
    try:
        return args.fn(args)
    except (ValueError, KeyError, OSError, ImportError, RuntimeError, FloatingPointError) as e:
        # Bad input (and a full disk, a diverged run) gets one line that says what and where,
        # not a traceback.
        # str(KeyError) adds quotes
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"tunix-lite {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
