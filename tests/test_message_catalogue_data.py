"""The catalogue's TOML files (kimi_viz/message_catalogue/data/) and the loader that reads them.

Every file in ``data/`` is read (``common.toml`` and each of ``STAGE_FILES``, none left over), every
long text breaks its lines after a space, and an entry is read as the :class:`Message` it spells: names,
texts and moved sites resolved. A planted mistake (an unknown key, a missing field, an unknown name or
text, a bad release span or stage, a taken key) stops the load with a ``ValueError`` naming the file
and the entry.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import replace

import pytest

from kimi_viz.message_catalogue import CATALOGUE, STAGE_FILES, where
from kimi_viz.message_catalogue._load import DATA, load, span
from kimi_viz.message_catalogue.messages import MSG_LENGTH, Message, Site, Stage

PLANTED = """\
stage = "split"

[[message]]
key = "planted"
template = "planted {}"
sites = [["MODEL", "MATERIALIZE", "ValueError", "0.5.18-0.5.23"]]
fields = ["rows:n"]
after = "{SCHEDULER_FAILS} And more."
"""
NEWEST = "0.5.23"


def test_every_data_file_is_read():
    assert sorted(p.stem for p in DATA.glob("*.toml")) == sorted((*STAGE_FILES, "common"))
    assert load(STAGE_FILES) == CATALOGUE


def test_every_long_text_breaks_its_lines_after_a_space():
    """A line-ending backslash drops the line break, so ``word \\`` + ``next`` reads ``word next``."""
    glued = [
        f"{path.name}:{number}"
        for path in sorted(DATA.glob("*.toml"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.endswith("\\") and not line.endswith(('"""\\', " \\"))
    ]
    assert glued == []


def _load_planted(tmp_path, text: str) -> tuple[Message, ...]:
    shutil.copy(DATA / "common.toml", tmp_path / "common.toml")
    (tmp_path / "planted.toml").write_text(textwrap.dedent(text), encoding="utf-8")
    return load(("planted",), tmp_path)


def test_an_entry_is_read_with_its_names_and_texts_resolved(tmp_path):
    (message,) = _load_planted(tmp_path, PLANTED)
    materialize = "KimiK3ForConditionalGeneration.get_image_feature.materialize_item_features"
    assert message == Message(
        "planted",
        "planted {}",
        Stage.SPLIT,
        (Site("models/kimi_k3.py", materialize, "ValueError", span("0.5.18-0.5.23")),),
        fields=("rows:n",),
        after=(
            "Raised in the scheduler's forward pass: the scheduler process exits, and every request of the batch "
            "(and the server) with it. And more."
        ),
    )


def test_a_named_template_and_a_moved_site_are_read(tmp_path):
    text = """\
        stage = "EPD transfer"

        [moved]
        old_file = "ENCODE_SERVER"
        new_file = "SERVER"
        new_since = "0.5.19"

        [[message]]
        key = "planted"
        name = "MSG_LENGTH"
        sites = [
          { old = "MMEncoder._send", new = "MMEncoder._stage", kind = "error", since = "0.5.18" },
          { function = "f", kind = "warning", new_file = "PREPROCESSOR" },
        ]
        """
    (message,) = _load_planted(tmp_path, text)
    assert message.template == MSG_LENGTH and message.name == "MSG_LENGTH" and message.stage is Stage.EPD
    assert message.sites == (
        Site("disaggregation/encode_server.py", "MMEncoder._send", "error", ("0.5.18",)),
        Site("disaggregation/encoder/server.py", "MMEncoder._stage", "error", span("0.5.19-0.5.23")),
        Site("disaggregation/encode_server.py", "f", "warning", span("0.5.17-0.5.18")),
        Site("disaggregation/encoder/preprocessor.py", "f", "warning", span("0.5.19-0.5.23")),
    )


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('after = "', 'meanings = "x"\nafter = "', "unknown key(s) ['meanings']"),
        ('sites = [["MODEL", "MATERIALIZE", "ValueError", "0.5.18-0.5.23"]]\n', "", "missing ['sites']"),
        ('template = "planted {}"', 'name = "MSG_LENGTH"\ntemplate = "planted {}"', "either name"),
        ('template = "planted {}"', 'name = "MSG_NO_SUCH"', "'MSG_NO_SUCH' is no MSG_* constant"),
        ('"MODEL"', '"MODELS"', "unknown name 'MODELS'"),
        ("{SCHEDULER_FAILS}", "{SCHEDULER_FAIL}", "unknown text {SCHEDULER_FAIL}"),
        ("0.5.18-0.5.23", "0.5.23-0.5.18", "runs backwards"),
        ("0.5.18-0.5.23", "0.5.16-0.5.23", "'0.5.16' is none of"),
        ("0.5.18-0.5.23", "0.5.16+", "'0.5.16' is none of"),
        ("0.5.18-0.5.23", "0.5.18+0.5.23", "'0.5.18+0.5.23' is none of"),
        ('"ValueError", "0.5.18-0.5.23"]', '"ValueError"]', "a site is [FILE, FUNCTION, KIND, RELEASES]"),
        ('fields = ["rows:n"]', "", "has 1 fields"),
        ('fields = ["rows:n"]', 'fields = ["rows:n"]\nstage = "the split"', "stage 'the split' is none of"),
        ('sites = [["MODEL"', 'sites = [{ function = "f", kind = "error" }, ["MODEL"', "a moved site is"),
    ],
)
def test_a_planted_mistake_names_the_file_and_the_entry(tmp_path, old, new, said):
    assert old in PLANTED
    with pytest.raises(ValueError, match=r"^planted\.toml: ") as raised:
        _load_planted(tmp_path, PLANTED.replace(old, new))
    assert said in str(raised.value) and "'planted'" in str(raised.value)


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('stage = "split"', 'stage = "splice!"', "stage 'splice!' is none of"),
        ('stage = "split"', 'stage = "split"\nstages = 1', "unknown key(s) ['stages']"),
        ('stage = "split"', 'stage = "split"\n[names]\nMODEL = "x.py"', "['MODEL'] are already in common.toml"),
        ('stage = "split"', 'stage = "split"\n[texts]\nShort = "x"', "a name is written in capitals"),
        ("[[message]]", '[moved]\nold_file = "A"\nnew_file = "B"\nnew_since = "0.5.17"\n[[message]]', "new_since"),
        (
            "\n",
            '\n[[message]]\nkey = "planted"\ntemplate = "other"\nsites = []\n',
            "the key is already an entry of planted.toml",
        ),
    ],
)
def test_a_planted_mistake_in_a_file_names_the_file(tmp_path, old, new, said):
    with pytest.raises(ValueError, match=r"^planted\.toml: ") as raised:
        _load_planted(tmp_path, PLANTED.replace(old, new, 1))
    assert said in str(raised.value)


def test_a_span_ends_open_closed_or_at_one_release():
    assert span("0.5.18+") == span("0.5.18-0.5.23") == ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
    assert span(f"{NEWEST}+") == span(NEWEST) == (NEWEST,)
    assert span("0.5.17-0.5.18") == ("0.5.17", "0.5.18")


def test_the_data_writes_every_span_that_reaches_the_newest_release_open():
    """A site SGLang's newest release still has is written ``A+``: no span of the data names the newest release."""
    closed = [
        f"{path.name}:{number}"
        for path in sorted(DATA.glob("*.toml"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(rf'"(0\.5\.\d+-)?{re.escape(NEWEST)}"', line)
    ]
    assert closed == []


def test_a_new_release_is_one_entry_in_the_table_and_the_open_spans_take_it(monkeypatch):
    """Appending 0.5.24 to the release table alone: every site that reached 0.5.23 now reaches 0.5.24 (the open
    spans and the moved sites' new halves), every other site keeps its releases, and none of the data changed."""
    from kimi_viz import releases

    before = {path.name: path.read_bytes() for path in DATA.glob("*.toml")}
    monkeypatch.setitem(releases.RELEASES, "0.5.24", replace(releases.RELEASES[NEWEST], version="0.5.24"))
    catalogue = load(STAGE_FILES)
    assert len(catalogue) == len(CATALOGUE)
    grown = 0
    for old, new in zip(CATALOGUE, catalogue):
        assert (new.key, len(new.sites)) == (old.key, len(old.sites))
        for was, now in zip(old.sites, new.sites):
            if NEWEST in was.releases:
                assert now.releases == (*was.releases, "0.5.24"), (old.key, was)
                grown += 1
            else:
                assert now.releases == was.releases, (old.key, was)
    assert grown == 183 + 44  # the open spans of the data and the moved sites' new halves
    length = next(m for m in catalogue if m.key == "feature-length")
    assert where(length) == [
        "sglang/srt/models/kimi_k3.py, KimiK3ForConditionalGeneration.get_image_feature.materialize_item_features "
        "(ValueError 0.5.18–0.5.24)"
    ]
    assert {path.name: path.read_bytes() for path in DATA.glob("*.toml")} == before
