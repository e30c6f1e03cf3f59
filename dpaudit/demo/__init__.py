"""``dpaudit demo``: the whole pipeline on the built-in corpus, sized so that the effect shows.

- :mod:`dpaudit.demo.plan`: the sizes (full and ``--quick``) and the stage list (commands).
- :mod:`dpaudit.demo.stages`: running stages in order, skipping those whose outputs are complete
  and valid, so that a rerun after Ctrl-C resumes.
- :mod:`dpaudit.demo.verdict`: the three-line verdict printed at the end.
"""
