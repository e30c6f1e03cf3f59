"""Corpora: streaming readers for user files and the built-in voice-assistant generator.

Framework-free on purpose: the inject stage, the trainers and the shadow models all read corpora
through this package, and none of them should pull in torch or jax to do so.
"""

from dpaudit.corpus.readers import CorpusReader, CorpusRow, ReadStats, detect_format, read_corpus

BUILTIN_ASSISTANT = "builtin:assistant"

__all__ = ["BUILTIN_ASSISTANT", "CorpusReader", "CorpusRow", "ReadStats", "detect_format", "read_corpus"]
