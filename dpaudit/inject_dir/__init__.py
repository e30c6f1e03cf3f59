"""The inject directory as every later stage reads it, and the secret vocabulary inject and attack share.

- :mod:`.reader`: the one verified reader of an inject run directory (splits, canaries, labels, declared new
  tokens, row references of a shadow's data);
- :mod:`.secret_spaces`: canary secret formats and designs, |R|, encode and decode.
"""
