"""Would this question fail on my deployment? The verb ``whatif`` and its companions ``sweep`` and ``minimize``.

Private: the public names are exported from :mod:`kimi_viz`. Read in order: :mod:`.questions` (what can
be asked: a request, a workload, a captured batch; :mod:`.chat`, a client's chat request), :mod:`.why` (why an answer
fails or passes), :mod:`.fix` (the one fix search), :mod:`.hint` (a clean request's smallest failing
partner under load), :mod:`.ask` (``whatif``, ``sweep``, ``minimize`` for any question), :mod:`.pairs`
(every pair of images prefilled together), :mod:`.under_load` (the load scenarios) and :mod:`.outputs`
(``--out DIR``). The answer's presenters, text and JSON, are :mod:`kimi_viz.report.answer_views` and
:mod:`kimi_viz.report.answer_documents`.
"""
