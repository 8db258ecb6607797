"""Every pair of images as two requests arriving together, swept over every release group × attention-TP size.

:func:`sweep_pairs` asks the load question for a set of images: for every unordered pair, two
single-image requests prefilled together — a :class:`~.questions.WorkloadQuestion` swept as
:func:`~.ask.sweep` sweeps any question (rows are the release groups that see a workload alike), so each
pair's answer is a :class:`~kimi_viz.answer.Sweep` of :class:`~kimi_viz.answer.Answer` s. Each image's
items are built once per release group and shared by every pair; every cell is one forward-pass replay in
shapes mode, without a fix search. The table and JSON are the answer's presenters'
(:func:`~kimi_viz.report.answer_views.pairs_table`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from ..answer import Cell, PairSweep, Sweep
from ..errors import SettingNotInReleaseError, WhatIfError
from ..forward.workload_replay import build_workload_request
from ..releases import RELEASES
from ..request.images import probe_images
from ..request.settings import ServerSettings
from ..request.workload import Request, Workload
from ..scheduler.flags import LoadSettings
from ..split.ranks import check_tp_size
from .ask import SWEEP_TP_SIZES, collector_paused, release_groups, sweep_row
from .questions import PreparedWorkload, WorkloadQuestion

MAX_PAIR_IMAGES = 64  # 2016 pairs


def sweep_pairs(
    images: Sequence[Any],
    *,
    releases: Sequence[str] | None = None,
    tp_sizes: Sequence[int] = SWEEP_TP_SIZES,
    settings: ServerSettings | None = None,
    load: LoadSettings | None = None,
) -> PairSweep:
    """Return the :class:`~kimi_viz.answer.PairSweep`: each pair of ``images`` as two requests arriving together,
    swept over every release group (only the groups holding ``releases``, when given) × ``tp_sizes``."""
    probed = probe_images(images)
    if not 2 <= len(probed) <= MAX_PAIR_IMAGES:
        raise WhatIfError(f"images: a pairs sweep needs 2 to {MAX_PAIR_IMAGES} images, got {len(probed)}")
    settings = settings if settings is not None else ServerSettings()
    load = load if load is not None else LoadSettings()
    tps = tuple(check_tp_size(tp, "tp") for tp in tp_sizes)
    for version in releases or ():
        if version not in RELEASES:
            raise WhatIfError(f"releases: {version!r} is not a known release; expected one of {', '.join(RELEASES)}")
    pairs = list(itertools.combinations(range(len(probed)), 2))
    questions = [
        WorkloadQuestion(Workload((Request("r1", (probed[a],)), Request("r2", (probed[b],)))), settings, load)
        for a, b in pairs
    ]
    groups = [g for g in release_groups(questions[0]) if not releases or any(r.version in releases for r in g)]
    cells: list[list[Cell]] = [[] for _ in pairs]
    with collector_paused():
        for group in groups:  # each image's items built once per group, shared by every pair
            try:
                built = [build_workload_request(Request("r", (image,)), settings, group[0]) for image in probed]
            except SettingNotInReleaseError:
                for row, question in zip(cells, questions):
                    row += sweep_row(question, group, tps)  # each refuses the settings the same way
                continue
            for row, question, (a, b) in zip(cells, questions, pairs):
                prepared = PreparedWorkload(question, group[0], [built[a], built[b]])
                row += sweep_row(question, group, tps, prepared)
    sweeps = tuple(Sweep(q.subject, tps, tuple(row)) for q, row in zip(questions, cells))
    return PairSweep(tuple(probed), tuple(pairs), sweeps)


__all__ = ["MAX_PAIR_IMAGES", "sweep_pairs"]
