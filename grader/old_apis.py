"""Old-tutorial APIs in a learner's source: calls that older tutorials teach and that today's
transformers and torch refuse or have renamed, each with a one-line hint naming the current API.

Learners copy code from older tutorials; the error they then get (a TypeError about `tokenizer`,
an UnpicklingError from `torch.load`) rarely names the fix. The scan reads the call in the
learner's own source with `ast`, never an exception's wording. It runs on untrusted source inside
the sandboxed worker, so it is stdlib only, bounds its own work (`MAX_SOURCE` characters, at most
one finding per code) and never raises: source it cannot read gives no findings.

    findings = scan(source)                  # (Finding(OldApi.TORCH_LOAD, 12),)
    hint(findings[0])                        # "line 12: torch.load(...) without weights_only loads ..."
    from_plain(to_plain(findings)) == findings   # across a wire that carries plain data only
"""

from __future__ import annotations

import ast
import enum
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Characters (or bytes) read at most: an exercise's file is a few thousand. Python's parser is the cost: 256 KiB of
# one-line statements took 0.8 s of CPU and 170 MB here, a real module's 256 KiB a seventh of a second.
MAX_SOURCE = 256 * 1024
MAX_CHAIN = 16  # parts of a dotted name worth resolving: the longest old name has 5
MAX_PLAIN = 64  # entries of plain data read back; a scan sends at most one per code
MAX_PLACE = 100  # characters of a finding's place read back


class OldApi(enum.Enum):
    """What an old tutorial taught; the value is the code that travels as plain data."""

    TRAINER_TOKENIZER = "trainer_tokenizer"
    TORCH_DTYPE = "torch_dtype"
    CUDA_AMP = "cuda_amp"
    TORCH_LOAD = "torch_load"
    FSDP1 = "fsdp1"


# Each hint starts with the old name as the learner wrote it, then names the current API.
HINTS: dict[OldApi, str] = {
    OldApi.TRAINER_TOKENIZER: "Trainer(tokenizer=...) is gone in transformers 5 (a TypeError): "
                              "pass the tokenizer as Trainer(..., processing_class=tokenizer)",
    OldApi.TORCH_DTYPE: "from_pretrained(..., torch_dtype=...) is the old name: transformers 5 takes "
                        "from_pretrained(..., dtype=torch.bfloat16)",
    OldApi.CUDA_AMP: "torch.cuda.amp.autocast / GradScaler are deprecated: use torch.amp.autocast(\"cuda\", ...) "
                     "and torch.amp.GradScaler(\"cuda\")",
    OldApi.TORCH_LOAD: "torch.load(...) without weights_only loads only tensors and plain data since torch 2.6: "
                       "save a state_dict, or pass weights_only=False for a file you trust",
    OldApi.FSDP1: "FullyShardedDataParallel is FSDP1, the old API: shard with FSDP2's fully_shard "
                  "(from torch.distributed.fsdp import fully_shard)",
}

# Named only where the code raised: torch.load without weights_only still loads a state_dict as it always did, so a
# wrong value is no sign of it.
WHEN_RAISED = frozenset({OldApi.TORCH_LOAD})

# Dotted names (after the module's imports are resolved) whose use is the old API, and any attribute of them.
OLD_NAMES = {
    "torch.cuda.amp.autocast": OldApi.CUDA_AMP,
    "torch.cuda.amp.GradScaler": OldApi.CUDA_AMP,
    "torch.distributed.fsdp.FullyShardedDataParallel": OldApi.FSDP1,
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": OldApi.FSDP1,
}


@dataclass(frozen=True)
class Finding:
    """One old API in a module: what it is and the first line (1-based) it is used on."""

    code: OldApi
    line: int
    place: str = ""  # where the learner finds the line ("Cell In[7], line 3" in a notebook's module), if not `line`


def scan(source: str | bytes) -> tuple[Finding, ...]:
    """The old APIs a module's source uses, at most one finding per code (its first line), in line order.

    Never raises: a source that is not text, larger than MAX_SOURCE, or that Python cannot parse (a syntax
    error, null bytes, nesting too deep, memory) gives ()."""
    try:
        if not isinstance(source, (str, bytes)) or len(source) > MAX_SOURCE:
            return ()
        with warnings.catch_warnings():  # an invalid escape's SyntaxWarning is the learner's import's to show
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
        first: dict[OldApi, int] = {}
        for code, line in _found(tree):
            if code not in first or line < first[code]:
                first[code] = line
        return tuple(sorted((Finding(code, line) for code, line in first.items()), key=lambda f: f.line))
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError: nothing of it runs anyway
        return ()


def hint(finding: Finding) -> str:
    """The finding's hint with its place: `line 12: torch.load(...) without weights_only ...`."""
    return f"{finding.place or f'line {finding.line}'}: {HINTS[finding.code]}"


def worth_naming(findings: Iterable[Finding], raised: bool) -> tuple[Finding, ...]:
    """The findings a failure names: all where the code raised, else those that can cause a wrong value."""
    return tuple(finding for finding in findings if raised or finding.code not in WHEN_RAISED)


def to_plain(findings: Iterable[Finding]) -> list[list[object]]:
    """Findings as plain data, `[[code, line], ...]` (`[code, line, place]` where a place is given), for a wire
    that carries only plain types."""
    return [[finding.code.value, finding.line, *([finding.place] if finding.place else [])] for finding in findings]


def from_plain(data: object) -> tuple[Finding, ...]:
    """Findings back from `to_plain`'s data, which came from an untrusted worker: an entry that is not a
    `[code, line]` pair of a known code and a positive int (or a triple with a place, a short str) is dropped, and
    so is a code's second entry."""
    if not isinstance(data, (list, tuple)):
        return ()
    codes = {code.value: code for code in OldApi}
    findings: dict[OldApi, Finding] = {}
    for entry in data[:MAX_PLAIN]:
        if not (isinstance(entry, (list, tuple)) and len(entry) in (2, 3)):
            continue
        value, line, place = (*entry, "")[:3]
        if type(value) is str and value in codes and type(line) is int and line >= 1 and type(place) is str \
                and len(place) <= MAX_PLACE:
            findings.setdefault(codes[value], Finding(codes[value], line, place))
    return tuple(findings.values())


def _found(tree: ast.AST) -> Iterator[tuple[OldApi, int]]:
    """(code, line) for every use of an old API in the tree; `scan` keeps the first of each code."""
    nodes = list(ast.walk(tree))
    imported = _imports(nodes)
    trainers = _trainer_classes(nodes, imported)
    inner = {id(node.value) for node in nodes if isinstance(node, ast.Attribute)}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                code = _old(f"{node.module}.{alias.name}")
                if code:
                    yield code, node.lineno
        elif isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in inner:  # each dotted name once, whole
            code = _old(_qualified(node, imported))
            if code:
                yield code, node.lineno
        if isinstance(node, ast.Call):
            keywords = {keyword.arg for keyword in node.keywords}
            name = _qualified(node.func, imported) or ""
            last = name.rsplit(".", 1)[-1]
            if "tokenizer" in keywords and (last.endswith("Trainer") or last in trainers):
                yield OldApi.TRAINER_TOKENIZER, node.lineno
            if "torch_dtype" in keywords and last == "from_pretrained":
                yield OldApi.TORCH_DTYPE, node.lineno
            if name == "torch.load" and "weights_only" not in keywords and None not in keywords:  # None: **kwargs
                yield OldApi.TORCH_LOAD, node.lineno


def _old(name: str | None) -> OldApi | None:
    """The old API a resolved dotted name is, or is an attribute of."""
    if not name:
        return None
    for old, code in OLD_NAMES.items():
        if name == old or name.startswith(old + "."):
            return code
    return None


def _imports(nodes: list[ast.AST]) -> dict[str, str]:
    """The names the module's imports bind, each to the dotted name it stands for: `import torch as t` binds
    t to torch, `from torch.cuda import amp` binds amp to torch.cuda.amp. Scopes are not told apart."""
    bound: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:  # `import torch.cuda.amp` binds torch alone
                    root = alias.name.split(".")[0]
                    bound[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name != "*":
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _qualified(node: ast.AST, imported: dict[str, str]) -> str | None:
    """`a.b.c` as the dotted name it stands for through the module's imports; None for anything else (a call's
    result, a subscript) or a chain longer than MAX_CHAIN."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute) and len(parts) <= MAX_CHAIN:
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or len(parts) > MAX_CHAIN:
        return None
    parts.append(imported.get(node.id, node.id))
    return ".".join(reversed(parts))


def _trainer_classes(nodes: list[ast.AST], imported: dict[str, str]) -> set[str]:
    """The module's own classes that subclass a Trainer directly (`class Mine(Trainer)`)."""
    return {node.name for node in nodes if isinstance(node, ast.ClassDef)
            and any((_qualified(base, imported) or "").rsplit(".", 1)[-1].endswith("Trainer") for base in node.bases)}
