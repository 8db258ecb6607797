"""What each SGLang release shipped, change by change, and the fix search that names the change ending a failure.

* :mod:`.shipped`: one :class:`Change` per change of the release table's rules (the SGLang pull requests that
  made it, else the file and function), held by each :class:`~kimi_viz.releases.Release` entry (``shipped``);
* :mod:`.rules`: the table's rules by name: which differ between two releases, which releases run one, a
  release with one change's rules alone;
* :mod:`.fix_search`: :func:`first_fixing_release`, the one fix search every question uses, and the
  :class:`FixRelease` it finds.

Names are imported lazily: the table (:mod:`kimi_viz.releases`) imports :mod:`.shipped`, and the rest import it.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "Change": "shipped",
    "RULE_GROUPS": "rules",
    "rule_names": "rules",
    "rule_value": "rules",
    "rule_differences": "rules",
    "releases_where": "rules",
    "with_rules": "rules",
    "shipped_in": "rules",
    "FixRelease": "fix_search",
    "FixSearch": "fix_search",
    "first_fixing_release": "fix_search",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
