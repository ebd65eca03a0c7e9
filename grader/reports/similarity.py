"""Submissions alike: for each exercise, the pairs of a class's files that share most of their code.

MOSS's method (Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003): a file becomes a stream of
tokens, every K tokens in a row are hashed, and of every W hashes in a row the smallest is kept: the
file's fingerprints. Any run of K + W - 1 tokens two files share gives both the same fingerprint. The
tokens are Python's own (`tokenize`) with the learner's choices taken out: every name but a keyword,
a builtin or an attribute (a library's API: `.tensor_split`) reads `V`, every number `N`, every
string `S`; comments, blank lines, indentation, line breaks and `;` are dropped. So renaming the
variables and reformatting the lines does not hide a copy, and two files that call the same API in
their own ways stay apart. Every K-gram of the exercise's stub (the starter code every student got)
is taken out of each file's fingerprints, as MOSS's base file is.

Written here rather than taken from copydetect 0.5.0 (the same method): it imports matplotlib, jinja2,
tqdm and pygments, none of them pinned, opens files by path with no bound on their size, and reads a
notebook's module only from a file.

A pair's score is the share of fingerprints they have in common, |A & B| / |A | B|: 1.0 for the
same code, 0 for none in common. A submission's file is untrusted input: it is read up to MAX_BYTES,
never executed, and tokenized with no exception escaping (a file `tokenize` refuses is split into
words and marks instead).
"""

from __future__ import annotations

import builtins
import hashlib
import io
import itertools
import keyword
import os
import re
import stat
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

K = 8  # tokens in a k-gram: a statement or two
W = 4  # k-grams in a window: every run of K + W - 1 = 11 shared tokens is found
THRESHOLD = 0.5  # the default: honest pairs score at most 0.14 here, a renamed copy 1.0, a copy edited in a line 0.8
MAX_BYTES = 256 * 1024  # of a file, read: the kit's largest reference is under 4 KiB
MAX_TOKENS = 20_000  # of a file, fingerprinted: its largest has 770
MIN_FINGERPRINTS = 12  # fewer of a file's own (the stub taken out): too little code to tell a copy from the one
# way to write it (ex01-ex03's references have 4 to 11, every other 16 or more)

_KEPT = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_DROPPED = frozenset({"COMMENT", "NL", "NEWLINE", "INDENT", "DEDENT", "ENCODING", "ENDMARKER"})
_OPENS, _CLOSES = frozenset({"FSTRING_START", "TSTRING_START"}), frozenset({"FSTRING_END", "TSTRING_END"})
_WORDS = re.compile(r"#[^\n]*|[rRbBuUfF]{0,2}(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'[^'\n]*'|\"[^\"\n]*\")"
                    r"|\d[\w.]*|\w+|[^\w\s]")


@dataclass(frozen=True)
class Alike:
    """Two submissions whose files for one exercise share most of their code."""

    exercise: str
    students: tuple[str, str]  # the two submissions' names, sorted
    score: float  # the share of fingerprints in common, 0 to 1


def read(path: str) -> bytes:
    """A submission's file, its first MAX_BYTES at most; b'' where it cannot be read or is no plain file (a link
    is not followed, a FIFO not waited on)."""
    try:
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)),
                  "rb") as handle:
            return handle.read(MAX_BYTES) if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else b""
    except OSError:
        return b""


def tokens(source: bytes) -> list[str]:
    """The file's tokens with the learner's names, literals, comments and layout taken out; never raises."""
    found: list[str] = []
    inside = 0  # f-strings open: from Python 3.12 one is several tokens, before it one STRING; read as one S
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            kind = tokenize.tok_name[token.exact_type if token.type == tokenize.OP else token.type]
            inside += kind in _OPENS
            if kind in _CLOSES:
                inside -= 1
                found += [] if inside else ["S"]
            if inside or kind in _CLOSES or kind in _DROPPED or token.string == ";":
                continue
            if kind == "NAME":
                found.append(_name(token.string, found))
            elif kind == "STRING":
                found.append("S")
            elif kind == "NUMBER":
                found.append("N")
            elif kind != "ERRORTOKEN" or not token.string.isspace():
                found.append(token.string)
            if len(found) >= MAX_TOKENS:
                break
        return found
    except Exception:  # a file tokenize refuses (bad encoding, unclosed bracket or string, nesting): words and marks
        return _split(source.decode("utf-8", "replace"))


def _split(text: str) -> list[str]:
    found: list[str] = []
    for match in _WORDS.finditer(text):
        if len(found) >= MAX_TOKENS:
            break
        word = match.group()
        if word.startswith("#") or word == ";":
            continue
        if word[0] in "'\"" or (word[0] in "rRbBuUfF" and word[-1] in "'\"" and len(word) > 1):
            found.append("S")
        elif word[0].isdigit():
            found.append("N")
        elif word[0].isalpha() or word[0] == "_":
            found.append(_name(word, found))
        else:
            found.append(word)
    return found


def _name(name: str, before: list[str]) -> str:
    return name if name in _KEPT or (before and before[-1] == ".") else "V"


def kgrams(stream: list[str]) -> list[int]:
    """The hash of every K tokens in a row (the same in every process: not Python's salted hash)."""
    return [int.from_bytes(hashlib.blake2b("\0".join(stream[i:i + K]).encode("utf-8", "replace"),
                                           digest_size=8).digest(), "big")
            for i in range(len(stream) - K + 1)]


def winnow(hashes: list[int]) -> set[int]:
    """The smallest hash of every W in a row: the file's fingerprints (all of them for a short file)."""
    if len(hashes) <= W:
        return set(hashes)
    return {min(hashes[i:i + W]) for i in range(len(hashes) - W + 1)}


def fingerprints(source: bytes, stub: bytes = b"") -> frozenset[int]:
    """The file's fingerprints, less every k-gram of the stub."""
    return frozenset(winnow(kgrams(tokens(source))) - set(kgrams(tokens(stub))))


def score(first: frozenset[int], second: frozenset[int]) -> float:
    """The share of fingerprints in common; 0 where either file has too little code of its own."""
    if min(len(first), len(second)) < MIN_FINGERPRINTS:
        return 0.0
    return len(first & second) / len(first | second)


def alike(files: Mapping[str, Mapping[str, str]], stubs: Mapping[str, str],
          threshold: float = THRESHOLD) -> tuple[Alike, ...]:
    """The pairs scoring `threshold` or more: `files` maps each submission to {exercise: its file's path},
    `stubs` each exercise to its stub's path. Per exercise in the order first seen, highest score first."""
    exercises = list(dict.fromkeys(exercise for each in files.values() for exercise in each))
    found: list[Alike] = []
    for exercise in exercises:
        stub = read(stubs[exercise]) if exercise in stubs else b""
        prints = {student: fingerprints(read(each[exercise]), stub)
                  for student, each in sorted(files.items()) if exercise in each}
        pairs = [Alike(exercise, (a, b), round(score(prints[a], prints[b]), 4))
                 for a, b in itertools.combinations(prints, 2)]
        found += sorted((pair for pair in pairs if pair.score >= threshold), key=lambda p: (-p.score, p.students))
    return tuple(found)


def of(exercise: str, pairs: Iterable[Alike]) -> list[Alike]:
    """The pairs of one exercise, in their order: a report shows them under that exercise."""
    return [pair for pair in pairs if pair.exercise == exercise]
