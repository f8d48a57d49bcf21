"""The one benchmark entry point: every workload x every implementation, tables, a plot.

    python benchmarks/run.py                          # all workloads x {tunix_lite, tunix, trl, torch}, 3 reps
    python benchmarks/run.py --smoke                  # tunix_lite only, 1 step, no Gemma: ~1-2 min on 2 cores
    python benchmarks/run.py --workloads sft_full,sft_lora --impls tunix_lite,torch --reps 5
    python benchmarks/run.py --setup --write-results  # build missing peer venvs, then update RESULTS.md

Each measurement is a fresh subprocess (`impl_<name>.py --workload W`, see common.py) in the
implementation's own interpreter: tunix_lite runs in this one, a peer in benchmarks/.venvs/<peer>
(made by `benchmarks/peers/setup.sh <peer>`). Within each repetition the implementations take turns on
a workload (A B C, then B C A, ...), so a burst of load from elsewhere on a shared machine lands on all of
them rather than on one. An exit code of 3 means "this implementation has no such workload" (n/a).

MFU = achieved model FLOP/s (common.train_flops_per_step / median step time) over this machine's
measured float32 matmul peak (median of several large jnp.dot calls, measured before each repetition;
the best measurement counts).

Writes <out>/results.json, results.md and results.png (default out: benchmarks/out/), and with
--write-results also benchmarks/RESULTS.md and RESULTS.png (hand-written notes under "## Notes" in
RESULTS.md are kept). Where a tunix_lite step's time goes: benchmarks/profile_step.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402

IMPLS = ("tunix_lite", "tunix", "trl", "torch")
PEERS = IMPLS[1:]
NOT_APPLICABLE = common.NOT_APPLICABLE
CACHE_BYTES = 256 * 2**20  # weights larger than any CPU cache stream from memory on every decode step

PEAK_SNIPPET = """
import json, statistics, sys, time
import jax, jax.numpy as jnp
n, runs = int(sys.argv[1]), int(sys.argv[2])
a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
dot = jax.jit(jnp.dot)
dot(a, b).block_until_ready()
times = []
for _ in range(runs):
    start = time.perf_counter()
    dot(a, b).block_until_ready()
    times.append(time.perf_counter() - start)
import numpy as np  # the BLAS numpy links (OpenBLAS here), for context: torch's MKL is in its class
x, y = np.asarray(a), np.asarray(b)
blas = []
for _ in range(runs):
    start = time.perf_counter()
    x @ y
    blas.append(time.perf_counter() - start)
# Memory bandwidth: decoding one token at batch 1 streams every weight once, so bytes/s bounds decode.
big = jnp.ones((2**28,), jnp.float32)  # 1 GiB, far beyond any cache
total = jax.jit(jnp.sum)
total(big).block_until_ready()
reads = []
for _ in range(runs):
    start = time.perf_counter()
    total(big).block_until_ready()
    reads.append(time.perf_counter() - start)
print(json.dumps(dict(n=n, runs=runs, flops_per_s=2 * n**3 / statistics.median(times),
                      best_flops_per_s=2 * n**3 / min(times), blas_flops_per_s=2 * n**3 / statistics.median(blas),
                      read_bytes_per_s=big.nbytes / statistics.median(reads))))
"""


# ----------------------------------------------------------------------------- running

def interpreter(impl: str) -> tuple[list[str] | None, str]:
    """(command prefix, status): status "ok", "no implementation" or "not set up"."""
    if impl == "tunix_lite":
        return [sys.executable, str(HERE / "impl_tunix_lite.py")], "ok"
    script = HERE / "peers" / f"impl_{impl}.py"
    python = HERE / ".venvs" / impl / "bin" / "python"
    if not script.exists():
        return None, "no implementation"
    if not python.exists():
        return None, "not set up"
    return [str(python), str(script)], "ok"


def setup(impl: str) -> None:
    print(f"setting up {impl}: bash benchmarks/peers/setup.sh {impl}", file=sys.stderr, flush=True)
    subprocess.run(["bash", str(HERE / "peers" / "setup.sh"), impl], check=False)


def child_env() -> dict:
    # TUNIX_LITE_COMPILATION_CACHE=0: every first step is a compile (tunix_lite.load would reuse earlier runs')
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", TUNIX_LITE_COMPILATION_CACHE="0")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))  # peers import common
    return env


def matmul_peak(n: int, runs: int) -> dict:
    """This machine's float32 matmul FLOP/s and memory read bandwidth, measured in a fresh process like
    the workloads."""
    out = subprocess.run([sys.executable, "-c", PEAK_SNIPPET, str(n), str(runs)], capture_output=True, text=True,
                         env=child_env(), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_one(prefix: list[str], workload: str, steps: int, warmup: int, timeout: float) -> dict:
    cmd = prefix + ["--workload", workload, "--steps", str(steps), "--warmup", str(warmup)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env())
    except subprocess.TimeoutExpired:
        return dict(status="timeout", wall_s=timeout)
    wall = time.perf_counter() - start
    if proc.returncode == NOT_APPLICABLE:
        return dict(status="n/a", wall_s=wall)
    if proc.returncode != 0:
        return dict(status="error", wall_s=wall, error=(proc.stderr or proc.stdout)[-1500:])
    try:
        return dict(status="ok", wall_s=wall, result=common.parse_result(proc.stdout))
    except ValueError as e:
        return dict(status="error", wall_s=wall, error=str(e)[-1500:])


# ----------------------------------------------------------------------------- summarising

def summarise(records: list[dict], workloads: list[str], impls: list[str], status: dict, peak: dict) -> list[dict]:
    """One row per (workload, impl): median and spread over repetitions."""
    rows = []
    for w in workloads:
        # Every side decodes the same float32 weights; tunix_lite reports their size.
        weight_bytes = next((r["result"]["weight_bytes"] for r in records if r["workload"] == w
                             and r["status"] == "ok" and r["result"].get("weight_bytes")), None)
        for impl in impls:
            mine = [r for r in records if r["workload"] == w and r["impl"] == impl]
            ok = [r["result"] for r in mine if r["status"] == "ok"]
            row = dict(workload=w, impl=impl, reps=len(ok))
            if not ok:
                row["status"] = mine[-1]["status"] if mine else status.get(impl, "not run")
                if mine and "error" in mine[-1]:
                    row["error"] = mine[-1]["error"]
                rows.append(row)
                continue
            row["status"] = "ok"

            def med(key, results=ok):
                values = [r[key] for r in results if r.get(key) is not None]
                return statistics.median(values) if values else None

            tps = [r["tokens_per_s"] for r in ok if r.get("tokens_per_s")]
            row |= dict(tokens_per_s=common.summary(tps) if tps else None,
                        step_s=med("median", [r["step_s"] for r in ok if r.get("step_s")]),
                        first_step_s=med("first_step_s"), peak_mb=max(r["peak_mb"] for r in ok),
                        steps_peak_mb=max((r["steps_peak_mb"] for r in ok if r.get("steps_peak_mb")), default=None),
                        flops_per_s=med("flops_per_s"))
            row["mfu"] = row["flops_per_s"] / peak["flops_per_s"] if row["flops_per_s"] else None
            for key in DETAIL_KEYS:
                if med(key) is not None:
                    row[key] = med(key)
            if "decode_tokens_per_s" in row and weight_bytes and weight_bytes > CACHE_BYTES:
                # batch-1 decode reads every weight once per token: the share of the bandwidth bound reached
                row["decode_bandwidth_use"] = row["decode_tokens_per_s"] * weight_bytes / peak["read_bytes_per_s"]
            rows.append(row)
    return rows


# Per-workload figures an implementation may report beside tokens/s (medians over repetitions).
DETAIL_KEYS = ("prefill_tokens_per_s", "decode_tokens_per_s", "pairs_per_s", "rollout_tokens_per_s", "rollout_s",
               "update_s")


def _fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def detail(r: dict) -> str:
    """The last column: prefill / decode tok/s for generation, pairs/s for preference training, rollout tok/s
    and the split of the step for RL."""
    if "decode_tokens_per_s" in r:
        return f"{_fmt(r['prefill_tokens_per_s'])} / {_fmt(r['decode_tokens_per_s'], 1)}"
    if "rollout_s" in r:
        return (f"rollout {_fmt(r['rollout_tokens_per_s'])} tok/s ({_fmt(r['rollout_s'], 2)} s), "
                f"update {_fmt(r['update_s'], 2)} s")
    if "pairs_per_s" in r:
        return f"{_fmt(r['pairs_per_s'], 2)} pairs/s"
    return ""


def main_table(rows: list[dict]) -> str:
    lines = ["| workload | impl | tokens/s (median) | min–max | step s | first step s | peak MB | steps MB | MFU "
             "| prefill / decode tok/s, or detail |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['workload']} | {r['impl']} | {r['status']} | | | | | | | |")
            continue
        t = r["tokens_per_s"] or {}
        digits = 1 if t.get("median", 100) < 100 else 0
        spread = f"{_fmt(t.get('min'), digits)}–{_fmt(t.get('max'), digits)}" if t.get("n", 0) > 1 else ""
        gen = detail(r)
        if r.get("decode_bandwidth_use"):
            gen += f" ({100 * r['decode_bandwidth_use']:.0f}% of bw)"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "–"
        if r.get("mfu") and common.WORKLOADS[r["workload"]].get("lora_rank"):
            mfu = f"({mfu})"  # full-step FLOPs: see the notes
        lines.append(f"| {r['workload']} | {r['impl']} | {_fmt(t.get('median'), digits)} | {spread} | "
                     f"{_fmt(r['step_s'], 3)} | {_fmt(r['first_step_s'], 1)} | {_fmt(r['peak_mb'])} | "
                     f"{_fmt(r['steps_peak_mb'])} | {mfu} | {gen} |")
    return "\n".join(lines)


def ratio_table(rows: list[dict], impls: list[str]) -> str | None:
    """tunix_lite tokens/s divided by each peer's, per workload (> 1: tunix_lite is faster)."""
    peers = [p for p in impls if p != "tunix_lite"]
    by = {(r["workload"], r["impl"]): r for r in rows if r["status"] == "ok" and r.get("tokens_per_s")}
    workloads = [w for w in dict.fromkeys(r["workload"] for r in rows) if (w, "tunix_lite") in by]
    if not peers or not any((w, p) in by for w in workloads for p in peers):
        return None
    lines = ["| workload | " + " | ".join(f"vs {p}" for p in peers) + " |", "|---|" + "---:|" * len(peers)]
    for w in workloads:
        ours = by[(w, "tunix_lite")]["tokens_per_s"]["median"]
        cells = [f"{ours / by[(w, p)]['tokens_per_s']['median']:.2f}×" if (w, p) in by else "–" for p in peers]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], impls: list[str], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError:
        return False
    ok = [r for r in rows if r["status"] == "ok" and r.get("tokens_per_s")]
    workloads = list(dict.fromkeys(r["workload"] for r in ok))
    shown = [i for i in impls if any(r["impl"] == i for r in ok)]
    if not ok:
        return False
    fig = Figure(figsize=(max(6, 1.3 * len(workloads) * max(len(shown), 1) ** 0.5), 4))
    ax = fig.add_subplot()
    width = 0.8 / len(shown)
    for k, impl in enumerate(shown):
        xs, ys, lo, hi = [], [], [], []
        for i, w in enumerate(workloads):
            r = next((r for r in ok if r["workload"] == w and r["impl"] == impl), None)
            if r:
                t = r["tokens_per_s"]
                xs.append(i + (k - (len(shown) - 1) / 2) * width)
                ys.append(t["median"])
                lo.append(t["median"] - t["min"])
                hi.append(t["max"] - t["median"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=impl)
    ax.set_xticks(range(len(workloads)), workloads, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s (median, min–max)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


DEFAULT_NOTES = """- Each cell is the median over repetitions of (tokens per step / median step time); min–max is the
  spread of those per-repetition values. The machine is shared: load from other work shows up as spread.
- first step s = compile + the first step, in a fresh process (no persistent compilation cache).
- peak MB = the process's peak resident memory (interpreter, framework, loading and compilation included);
  steps MB = the peak sampled while the timed calls ran (implementations that report it).
- MFU = model FLOPs per second (matmuls only, common.train_flops_per_step) over XLA's own large-matmul
  rate; a BLAS (numpy's here, MKL in torch) can beat that rate, so a torch row can show a higher MFU.
  LoRA rows, in parentheses, count a full step's FLOPs (so that their tokens/s compare): their frozen
  weights get no weight gradient, so the real work is about 2/3 of that and the figure is no utilization.
- Generation: tokens/s counts generated tokens over whole generate calls (prefill included); prefill and
  decode tokens/s are split out as in the implementations' docstrings. "% of bw" (weights larger than the
  caches): decoding one token at batch 1 reads every float32 weight once, so decode tok/s × weight bytes
  over the measured read bandwidth is the share of the memory-bandwidth bound reached (100% = no
  implementation can decode faster).
- Post-training workloads (dpo, orpo, grpo, distill_*, rollout_group_*): what tokens/s counts and what a step
  holds are defined in benchmarks/common.py (WORKLOADS, workload_flops). grpo's detail column splits the
  step into the rollout (generated tokens/s) and the rest (update = step - rollout).
"""


def timing_text(args) -> str:
    """'5 timed steps after 2 warm-up calls (gemma_lora: 3 after 1)' for the workloads run."""
    timings = {w: common.timing(w, args.steps, args.warmup) for w in args.workloads}
    usual = max(set(timings.values()), key=list(timings.values()).count)
    others = ", ".join(f"{w}: {s} after {k}" for w, (s, k) in timings.items() if (s, k) != usual)
    return f"{usual[0]} timed steps after {usual[1]} warm-up calls" + (f" ({others})" if others else "")


def results_md(data: dict, table: str, ratios: str | None, notes: str, plot_file: str | None) -> str:
    m, peak = data["machine"], data["matmul_peak"]
    parts = [
        "# Benchmark results", "",
        f"Generated by `benchmarks/run.py` on {m['date']}.", "",
        f"- machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, load average {m['load_1min']} at start, "
        f"{m.get('load_1min_end', '?')} at the end",
        f"- command: `{data['command']}`",
        f"- settings: {data['settings']['reps']} repetitions × {data['settings']['timing']}, implementations "
        f"alternating within each repetition",
        f"- float32 matmul peak (the MFU denominator): {peak['flops_per_s'] / 1e9:.1f} GFLOP/s (jnp.dot "
        f"{peak['n']}², median of {peak['runs']} calls; the best of the {len(peak['all_flops_per_s'])} repetitions' "
        f"measurements: {', '.join(f'{p / 1e9:.0f}' for p in peak['all_flops_per_s'])}); numpy's BLAS on the same "
        f"product: {peak['blas_flops_per_s'] / 1e9:.1f} GFLOP/s",
        f"- memory read bandwidth: {peak['read_bytes_per_s'] / 1e9:.1f} GB/s (jnp.sum over 1 GiB, median; the "
        f"bound for batch-1 decoding)", "",
        "## Throughput", "", table, ""] + ([f"![tokens/s per workload and implementation]({plot_file})", ""]
                                           if plot_file else [])
    if ratios:
        parts += ["## tunix_lite vs each peer (tokens/s ratio, > 1 = tunix_lite faster)", "", ratios, ""]
    parts += ["## Notes", "", notes.strip(), ""]
    return "\n".join(parts)


def existing_notes(path: Path) -> str | None:
    """Hand-written notes in an existing RESULTS.md survive regeneration."""
    if not path.exists():
        return None
    text = path.read_text()
    return text.split("\n## Notes\n", 1)[1] if "\n## Notes\n" in text else None


# ----------------------------------------------------------------------------- main

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", help=f"comma-separated subset of: {','.join(common.WORKLOADS)}")
    p.add_argument("--impls", help=f"comma-separated subset of: {','.join(IMPLS)}")
    p.add_argument("--reps", type=int, default=3, help="repetitions (each a fresh process per implementation)")
    p.add_argument("--steps", type=int, help="timed steps per call (default: each workload's, common.timing)")
    p.add_argument("--warmup", type=int, help="untimed calls first, the compiling one included (default: "
                   "each workload's)")
    p.add_argument("--smoke", action="store_true",
                   help="tunix_lite only, 1 rep, 1 step + 1 warm-up, no Gemma workloads (unless --with-gemma)")
    p.add_argument("--with-gemma", action="store_true", help="with --smoke: include the Gemma 3 270M workloads")
    p.add_argument("--setup", action="store_true", help="create missing peer venvs (benchmarks/peers/setup.sh)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per call")
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--write-results", action="store_true", help="also write benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    unknown = lambda given, known: sorted(set(given) - set(known))  # noqa: E731
    if args.smoke:
        args.reps, args.steps, args.warmup = 1, 1, 1
        args.impls = args.impls or "tunix_lite"
        if not args.workloads:
            args.workloads = ",".join(w for w, spec in common.WORKLOADS.items()
                                      if args.with_gemma or not spec["shape"].startswith("gemma"))
    args.workloads = args.workloads.split(",") if args.workloads else list(common.WORKLOADS)
    args.impls = args.impls.split(",") if args.impls else list(IMPLS)
    for given, known, what in ((args.workloads, common.WORKLOADS, "workloads"), (args.impls, IMPLS, "impls")):
        if unknown(given, known):
            p.error(f"unknown {what}: {unknown(given, known)}; choose from {','.join(known)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = "python benchmarks/run.py " + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv))
    prefixes, status = {}, {}
    for impl in args.impls:
        prefix, state = interpreter(impl)
        if state == "not set up" and args.setup:
            setup(impl)
            prefix, state = interpreter(impl)
        prefixes[impl], status[impl] = prefix, state
        if state != "ok":
            print(f"{impl}: {state}", file=sys.stderr)
    runnable = [i for i in args.impls if status[i] == "ok"]

    machine = common.machine()
    records, skip, peaks = [], set(), []
    for rep in range(args.reps):
        # Once per repetition, and the best one counts: on a shared machine a single measurement can land
        # in a burst of someone else's load and inflate every MFU.
        peaks.append(matmul_peak(*((1024, 3) if args.smoke else (4096, 5))))
        print(f"[rep {rep + 1}/{args.reps}] float32 matmul: {peaks[-1]['flops_per_s'] / 1e9:.1f} GFLOP/s",
              file=sys.stderr, flush=True)
        for w in args.workloads:
            order = runnable[rep % len(runnable):] + runnable[:rep % len(runnable)] if runnable else []
            for impl in order:
                if (w, impl) in skip:
                    continue
                steps, warmup = common.timing(w, args.steps, args.warmup)
                r = run_one(prefixes[impl], w, steps, warmup, args.timeout)
                records.append(dict(workload=w, impl=impl, rep=rep) | r)
                if r["status"] == "n/a":
                    skip.add((w, impl))
                tps = r.get("result", {}).get("tokens_per_s")
                note = f"{tps:,.1f} tok/s" if tps else r["status"] + (": " + r["error"].strip().splitlines()[-1]
                                                                      if r.get("error") else "")
                print(f"[rep {rep + 1}/{args.reps}] {w:18s} {impl:10s} {note} ({r['wall_s']:.0f} s)",
                      file=sys.stderr, flush=True)

    machine["load_1min_end"] = round(os.getloadavg()[0], 2)
    peak = max(peaks, key=lambda p: p["flops_per_s"]) | dict(all_flops_per_s=[p["flops_per_s"] for p in peaks])
    rows = summarise(records, args.workloads, args.impls, status, peak)
    table, ratios = main_table(rows), ratio_table(rows, args.impls)
    data = dict(machine=machine, command=command, matmul_peak=peak,
                settings=dict(reps=args.reps, timing=timing_text(args), smoke=args.smoke),
                summary=rows, records=records)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(data, indent=1))
    plotted = plot(rows, args.impls, args.out / "results.png")
    (args.out / "results.md").write_text(results_md(data, table, ratios, DEFAULT_NOTES, plotted and "results.png"))
    if args.write_results:
        path = HERE / "RESULTS.md"
        if plotted:
            shutil.copyfile(args.out / "results.png", HERE / "RESULTS.png")
        notes = existing_notes(path) or DEFAULT_NOTES
        path.write_text(results_md(data, table, ratios, notes, plotted and "RESULTS.png"))
    print(f"\nfloat32 matmul peak {peak['flops_per_s'] / 1e9:.1f} GFLOP/s; {machine['cpu']}, {machine['cores']} cores, "
          f"load {machine['load_1min']}\n")
    print(table)
    if ratios:
        print("\n" + ratios)
    print(f"\nwrote {args.out / 'results.json'}, results.md, results.png", file=sys.stderr)
    return 0 if all(r["status"] in ("ok", "n/a") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
