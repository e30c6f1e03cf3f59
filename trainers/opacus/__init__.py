"""The ``opacus`` trainer: DP-SGD run by Opacus's ``PrivacyEngine``, audited through its own gradient path.

Modules: :mod:`.config` (the settings), :mod:`.loop` (one run as Opacus documents it, with the observation hook),
:mod:`.canary_layer` (canaries only canary inputs reach), :mod:`.privacy` (``privacy.json``: the library's claim
beside dpaudit's recomputation), :mod:`.setup_file` (``--setup FILE.py:build``), :mod:`.trainer` (the plug-in).
"""
