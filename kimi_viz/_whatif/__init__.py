"""Would this question fail on my deployment? The verb ``whatif`` and its companions ``sweep`` and ``minimize``.

Private: the public names are exported from :mod:`kimi_viz`. Read in order: :mod:`.questions` (what can
be asked: a request, a workload, a client's chat request, a captured batch), :mod:`.why` (why an answer
fails or passes), :mod:`.fix` (the one fix search), :mod:`.hint` (a clean request's smallest failing
partner under load), :mod:`.ask` (``whatif``, ``sweep``, ``minimize`` for any question), :mod:`.pairs`
(every pair of images prefilled together), then the presenters :mod:`.text` and :mod:`.documents`.
"""
