"""Stages: the compositions one floor above the packages they compose.

A stage joins packages that must not import each other: :mod:`.attack` runs the attacks
(:mod:`dpaudit.attacks`) and writes the report page (:mod:`dpaudit.report`) into the same attack
directory. The command line and ``dpaudit.attack(...)`` call the stage; nothing below imports it.
"""
