"""IPython startup file of the kernels tests/test_notebooks_from_wheel.py runs notebooks in, after
tests/source_tree_guard.py (a cell that reads the source tree fails).

setup() returns the profile asked for (its name, so every branch a cell takes on it) with the `ci`
profile's sizes and demo model (the cpu profile's, Gemma 3 270M, is a download a runtime makes, not
a file of the source tree); once it has run (jax is up by then), every Trainer.fit stops after
BARE_NOTEBOOK_STEPS steps: the profile's code paths, at a few steps each, compiling mostly the
programs CI's own run of the notebooks compiles (the persistent cache shares them). Every pipeline
is loaded with its held-out evaluation and on-policy pair sampling cut to the sizes of notebook
09's ci profile (PIPELINE_CAPS, applied as `--set` settings): sampling, which Trainer.fit does not
cover, would otherwise take most of the run.
"""

import dataclasses
import os

import tunix_lite.course.setup as _course_setup  # imports no jax

STEPS = int(os.environ["BARE_NOTEBOOK_STEPS"])
PIPELINE_CAPS = {"evaluation.n_prompts": 8, "evaluation.samples": 4, "on_policy_pairs.prompts": 64}

_setup = _course_setup.setup


def _setup_then_cap_steps(*args, **kwargs):
    profile = _setup(*args, **kwargs)
    ci = _course_setup.PROFILES["ci"]
    data = profile.mesh_shape["data"]
    profile = dataclasses.replace(profile, steps=ci.steps, batch=-(-ci.batch // data) * data,
                                  seq=ci.seq, gen_tokens=ci.gen_tokens, demo_model=ci.demo_model)
    from tunix_lite.training.trainer import Trainer

    fit = Trainer.fit

    def capped(self, batches, steps, **options):
        return fit(self, batches, min(steps, STEPS), **options)

    Trainer.fit = capped
    return profile


_course_setup.setup = _setup_then_cap_steps


def _capped_settings(pipeline) -> list[str]:
    """`--set` settings that cut `pipeline`'s sampling to PIPELINE_CAPS (none where it is smaller)."""
    caps, settings = PIPELINE_CAPS, []
    evaluation = pipeline.spec.evaluation
    if evaluation is not None:
        samples = min(evaluation.samples, caps["evaluation.samples"])
        settings += [f"evaluation.n_prompts={min(evaluation.n_prompts, caps['evaluation.n_prompts'])}",
                     f"evaluation.samples={samples}",
                     f"evaluation.scaling={[n for n in evaluation.scaling if n <= samples] or [1]}"]
    for index, stage in enumerate(pipeline.stages):
        if stage.on_policy_pairs is not None:
            prompts = min(stage.on_policy_pairs.prompts, caps["on_policy_pairs.prompts"])
            settings.append(f"stages.{index}.on_policy_pairs.prompts={prompts}")
    return settings


def _cap_pipelines() -> None:
    import tunix_lite.pipeline as pipeline_package
    import tunix_lite.pipeline.spec as spec

    load = spec.load_pipeline

    def capped(path, *, settings=(), **overrides):
        pipeline = load(path, settings=settings, **overrides)
        return load(path, settings=[*settings, *_capped_settings(pipeline)], **overrides)

    spec.load_pipeline = pipeline_package.load_pipeline = capped


_cap_pipelines()
