"""Fixes tried for real: ``gpuscope try`` re-runs a program with a fix switched on from outside it.

A *fix* (:mod:`.fixes`) is a switch rather than an edit: an environment variable, or a patch that
gpuscope's bootstrap installs in the launched process before the program's first line
(:mod:`..capture.trial`: TF32, cuDNN's autotuner, bf16 autocast, the DataLoader's defaults,
``torch.compile``, channels_last). Each is tied to the diagnosis rules whose findings it answers.

:mod:`.runs` launches one run with collection off and step marks kept, stopped at a step or time
budget; :mod:`.measure` interleaves the program as written with each fix for a few rounds, and
:mod:`.interval` turns the per-round ratios into a gain with its 95% interval; :mod:`.numerics`
says whether the program's numbers still agree.
"""
