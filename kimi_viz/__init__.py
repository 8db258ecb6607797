"""kimi-viz: see how SGLang turns images into Kimi-K3 vision features, and why row counts diverge.

The public names below are imported lazily so ``import kimi_viz`` stays fast. The package reads as
the pipeline: :mod:`.preprocess` (images to ``pixel_values``), :mod:`.encoder` (the vision tower),
:mod:`.request` (what a release's request side builds), :mod:`.scheduler` (SGLang's scheduler: which
requests share a prefill pass), :mod:`.forward` (the forward pass: which items reach the call, the
splice back), :mod:`.split` (the deferred split in ``get_image_feature``), :mod:`.scenarios`,
:mod:`.manifest`, :mod:`.plots`, :mod:`.capture` and :mod:`.report`; :mod:`.releases` says which
release runs which code. The verbs — :func:`replay`, :func:`whatif`, :func:`sweep`,
:func:`minimize`, :func:`explain`, :func:`triage`, :func:`run_demo` — are functions exported here;
every question they answer gets one :class:`Answer` (:mod:`.answer`). The user's own deployment is input
too: :func:`read_deployment` reads a launch command, a server's log (:func:`sample_log` is the kit's) and
typed options into the server a question is asked on, each value with its source, and
:func:`read_model_folder` a checkpoint folder (:func:`write_demo_checkpoint` writes a synthetic one).

One naming rule holds everywhere: no function shares its name with a module beside it. A module
that implements a verb is private and named after it (``_explain/``, ``split/_replay.py``), so
``kimi_viz.explain`` is always the function, whatever has been imported.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

# The one exception tree (kimi_viz.errors): every bad input the kit meets raises one of these.
_ERRORS = [
    "KimiVizError",
    "ImageLoadError",
    "ImageNotFoundError",
    "NotAnImageError",
    "TruncatedImageError",
    "EmptyImageError",
    "DecompressionBombError",
    "UnsupportedImageError",
    "ConfigError",
    "CheckpointError",
    "DeviceError",
    "RowCountError",
    "LayoutLookupError",
    "ManifestError",
    "ScenarioError",
    "OutputError",
    "CaptureError",
    "WhatIfError",
    "SettingNotInReleaseError",
    "ServerInputError",
    "ArgumentError",
]

_EXPORTS = {
    **dict.fromkeys(_ERRORS, "kimi_viz.errors"),
    # preprocess: images to pixel_values
    "load_image": "kimi_viz.preprocess.images",
    "ProcessorConfig": "kimi_viz.preprocess.config",
    "get_config": "kimi_viz.preprocess.config",
    "load_preprocessor_config": "kimi_viz.preprocess.config",
    "resize_config": "kimi_viz.preprocess.resize",
    "Processor": "kimi_viz.preprocess.processor",
    "compare": "kimi_viz.preprocess.processor",
    "load_hf_processor": "kimi_viz.preprocess.processor",
    "ProcessorOutput": "kimi_viz.preprocess.records",
    "ImageRecord": "kimi_viz.preprocess.records",
    "BatchLayout": "kimi_viz.preprocess.layout",
    "compare_layouts": "kimi_viz.preprocess.layout",
    # encoder
    "VisionEncoder": "kimi_viz.encoder.runtime",
    "resolve_device": "kimi_viz.devices",
    # releases
    "RELEASES": "kimi_viz.releases",
    "NEWEST": "kimi_viz.releases",
    "Release": "kimi_viz.releases",
    # request side
    "ServerSettings": "kimi_viz.request.settings",
    "RequestImage": "kimi_viz.request.images",
    "probe_image": "kimi_viz.request.images",
    "image_sources": "kimi_viz.request.images",
    "build_request": "kimi_viz.request.sides",
    # the deferred split
    "Batch": "kimi_viz.split.batch",
    "Item": "kimi_viz.split.batch",
    "Feature": "kimi_viz.split.batch",
    "assign_ranks": "kimi_viz.split.ranks",
    "replay": "kimi_viz.split._replay",
    "Trace": "kimi_viz.split.trace",
    "Verdict": "kimi_viz.split.verdict",
    "Status": "kimi_viz.split.verdict",
    "build_verdict": "kimi_viz.split.verdict",
    "format_verdict": "kimi_viz.split.verdict",
    # scenarios, manifests, views
    "SCENARIOS": "kimi_viz.scenarios.catalogue",
    "get_scenario": "kimi_viz.scenarios.catalogue",
    "run_scenario": "kimi_viz.scenarios.catalogue",
    "read_manifest": "kimi_viz.manifest.read",
    "write_manifest": "kimi_viz.manifest.write",
    "Stepper": "kimi_viz.report.stepper",
    # the verbs
    "explain": "kimi_viz._explain",
    "triage": "kimi_viz._triage",
    "TriageResult": "kimi_viz._triage",
    "write_triage_outputs": "kimi_viz._triage",
    # the one answer, to every question: a request, a workload, a client's request, a captured batch
    "Answer": "kimi_viz.answer",
    "Sweep": "kimi_viz.answer",
    "Minimized": "kimi_viz.answer",
    "whatif": "kimi_viz._whatif.ask",
    "sweep": "kimi_viz._whatif.ask",
    "minimize": "kimi_viz._whatif.ask",
    "run_load_scenario": "kimi_viz._whatif.under_load",
    "sweep_pairs": "kimi_viz._whatif.pairs",
    "answer_text": "kimi_viz.report.answer_views",
    "answer_json": "kimi_viz.report.answer_documents",
    "sweep_text": "kimi_viz.report.answer_views",
    "sweep_table": "kimi_viz.report.answer_views",
    "pairs_table": "kimi_viz.report.answer_views",
    "minimized_text": "kimi_viz.report.answer_views",
    "minimized_table": "kimi_viz.report.answer_views",
    "sweep_summary": "kimi_viz.report.answer_views",
    "request_table": "kimi_viz.report.answer_views",
    "pass_table": "kimi_viz.report.answer_views",
    "workload_table": "kimi_viz.report.answer_views",
    "check_table": "kimi_viz.report.answer_views",
    "prompt_table": "kimi_viz.report.answer_views",
    # under load: workloads of several requests, the forward pass
    "Workload": "kimi_viz.request.workload",
    "Request": "kimi_viz.request.workload",
    "CacheSeed": "kimi_viz.request.workload",
    "together": "kimi_viz.request.workload",
    "read_workload": "kimi_viz.request.workload",
    "LoadSettings": "kimi_viz.scheduler.flags",
    "parse_workload": "kimi_viz.request.workload",
    "LOAD_SCENARIOS": "kimi_viz.scenarios.under_load",
    # a client's own request: its checks on the request side, then the same replay
    "parse_request": "kimi_viz.request.chat",
    "read_request": "kimi_viz.request.chat",
    "run_demo": "kimi_viz._demo",
    # the user's own deployment as input: a launch command, a server's log, a checkpoint folder
    "DeploymentInput": "kimi_viz._whatif.deployment",
    "Deployment": "kimi_viz._whatif.deployment",
    "read_deployment": "kimi_viz._whatif.deployment",
    "ModelFolder": "kimi_viz.request.model_folder",
    "read_model_folder": "kimi_viz.request.model_folder",
    "write_demo_checkpoint": "kimi_viz.request.demo_checkpoint",
    # the sample data: images, a server's log
    "SAMPLE_PHOTOS": "kimi_viz.data",
    "sample_images": "kimi_viz.data",
    "sample_path": "kimi_viz.data",
    "sample_log": "kimi_viz.data",
}

__all__ = sorted(_EXPORTS) + ["__version__"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
