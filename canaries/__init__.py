"""Canaries: secret spaces, generation, insertion at chosen frequencies, and the inject manifest.

A canary is ``prefix + secret + suffix``. This package decides which secrets exist (the secret space
R, whose size sets the maximum exposure log2 |R|), draws them without collision, and inserts each
one a chosen number of times into the training split, keeping control canaries that are never
inserted. Each canary has a unique context and a never-inserted control twin.
"""
