"""Repros against SGLang itself: a standalone pytest file that runs the real ``get_image_feature``.

:func:`emit_repro` writes, for a manifest's batch, a scenario, a what-if or a minimal failing
request, ``test_kimi_k3_repro_<slug>.py`` plus the JSON it reads (shapes, grids, deferred configs,
ranks; PNGs only when asked for, never for a redacted batch). The test imports the installed SGLang,
builds real ``MultimodalDataItem`` s with the real deferred config, runs the real
``KimiK3ForConditionalGeneration.get_image_feature`` on every rank that owns an image, on the CPU
(SGLang's vision-DP runner replaced by one that uses SGLang's own ``get_dp_encoder_lb_assignment``),
and asserts what the fixed release does: nothing raises and every image's rows equal its grid. It
fails on a release with the bug with SGLang's own message. :class:`~.case.ReproCase` is the data
file's model and :func:`~.case.expectations` what the test does on each release, from the kit's replay;
:func:`check_repro_folder` refuses an output folder before any work is done.
"""

from ._emit import MARKER, check_repro_folder, emit_repro, render, template_text
from .case import FeatureSpec, ItemSpec, RankExpectation, ReproCase, build_case, expectations

__all__ = [
    "MARKER",
    "FeatureSpec",
    "ItemSpec",
    "RankExpectation",
    "ReproCase",
    "build_case",
    "check_repro_folder",
    "emit_repro",
    "expectations",
    "render",
    "template_text",
]
