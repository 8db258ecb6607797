"""``python -m kimi_viz.message_catalogue``: print docs/pipeline.md §11, the catalogue by stage."""

from . import markdown

print(markdown())
