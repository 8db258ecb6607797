"""The folder ``kimi-viz capture`` puts first on ``PYTHONPATH`` (see ``sitecustomize.py``).

It is a package only so that installers ship ``sitecustomize.py`` with the kit; nothing imports it.
"""
