"""`python -m grader demo ex07|ex12 --nproc 2`: the learner's code training across processes; `demo ex14`: its saving.

For ex13 to ex20 and ex23 to ex25 (an exercise whose checks declare figures), the demo shows what the learner's
code saves (grader.learner.demo_figures).

The launcher checks that the exercises the demo runs on are solved, builds everything
offline (a tiny DistilBERT-style checkpoint, a WordPiece tokenizer and a small sentiment
dataset, all generated here), then starts N ranks with torchrun. For ex07 each rank runs
grader.learner.demo_rank with the learner's sharding, parameter sync and data-parallel step;
for ex12, grader.learner.demo_accelerate with the learner's tokenization, DataLoader,
Accelerate training loop and gathered accuracy.
"""

import argparse
import ast
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from grader.grading.session import resolve_target
from grader.kit import Kit
from grader.sandbox import Target
from grader.usage import command_parser

NEEDS = {"ex07": ["ex04_sharding", "ex06_parameter_sync", "ex07_data_parallel_step"],
         "ex12": ["ex08_preprocess_text", "ex10_prepare_dataloader", "ex12_accelerator_loop"]}
RANKS = {"ex07": "grader.learner.demo_rank", "ex12": "grader.learner.demo_accelerate"}
POSITIVE = "good great fine happy nice lovely bright warm calm kind sweet clean".split()
NEGATIVE = "bad awful poor sad nasty gloomy dark cold loud rude sour dirty".split()
NEUTRAL = "the a movie film day food room it was is very quite rather so this that".split()


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("demo", __doc__.splitlines()[0])
    parser.add_argument("exercise", metavar="EXERCISE",
                        help="ex07 or ex12: the exercise whose code the demo trains with; an exercise of chapters 3 "
                             "to 5 (ex13 to ex20, ex23 to ex25): what your code saves")
    parser.add_argument("--nproc", type=int, default=2, help="number of processes (ranks), 1 to 8")
    parser.add_argument("--steps", type=int, default=40, help="ex07: optimizer steps")
    parser.add_argument("--epochs", type=int, default=4, help="ex12: epochs")
    parser.add_argument("--target", default="exercises", help="folder with your exNN_*.py files")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 1 <= args.nproc <= 8:
        parser.error("--nproc must be between 1 and 8")
    target = resolve_target(args.target, Kit.default())
    if target is None:
        parser.error(f"--target {args.target}: no such folder")
    if args.exercise not in NEEDS:
        return figures_demo(parser, args.exercise, target)
    missing = unsolved(target.path, NEEDS[args.exercise])
    if missing:
        print(f"demo {args.exercise} runs your code from {', '.join(NEEDS[args.exercise])}; solve these first:")
        for name, why in missing:
            print(f"  {name}: {why}  (python -m grader {name[:4]})")
        return 1
    for line in last_grades(args.target, NEEDS[args.exercise]):
        print(line)
    os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1")
    with tempfile.TemporaryDirectory(prefix="grader-demo-") as assets:
        print(f"building a tiny classifier, tokenizer and dataset offline in {assets}", flush=True)
        build_assets(assets)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
                   "--module", RANKS[args.exercise], "--assets", assets, "--target", target.path]
        command += ["--steps", str(args.steps)] if args.exercise == "ex07" else ["--epochs", str(args.epochs)]
        env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
        print(f"launching {args.nproc} processes with torchrun", flush=True)
        return subprocess.run(command, env=env).returncode


def figures_demo(parser: argparse.ArgumentParser, name: str, target: Target) -> int:
    """The figures of an exercise whose check file declares them; a usage error for any other."""
    from grader import catalog
    from grader.learner import demo_figures

    exercise = catalog.find(name)
    if exercise is None:
        parser.error(catalog.unknown(name))
    if not demo_figures.declared(exercise):
        parser.error(f"{exercise.id} has no demo: demos are ex07 and ex12 (training) and the exercises whose "
                     "checks measure what your code saves (chapters 3 to 5)")
    for line in last_grades(target.label, [exercise.id]):
        print(line)
    return demo_figures.main(exercise, target)


def unsolved(folder: str, modules: Sequence[str]) -> list[tuple[str, str]]:
    """[(module, why)] for files that are missing, do not parse, or still only raise NotImplementedError."""
    found = []
    for name in modules:
        path = os.path.join(folder, name + ".py")
        if not os.path.isfile(path):
            found.append((name, "missing"))
            continue
        try:
            tree = ast.parse(open(path).read())
        except SyntaxError as error:
            found.append((name, f"syntax error on line {error.lineno}"))
            continue
        stubs = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and _only_raises(node)]
        if stubs:
            found.append((name, f"not started ({', '.join(stubs)} still raise NotImplementedError)"))
    return found


def last_grades(target: str, modules: Sequence[str]) -> list[str]:
    """A line for each module whose last grade (kept for exercises/ only) was short of full marks."""
    if target != "exercises":
        return []
    from grader.learner import state

    last = state.load().get("last", {})
    lines = []
    for name in modules:
        seen = last.get(name)
        if seen is None:
            lines.append(f"note: {name} has not been graded yet; python -m grader {name[:4]} checks it")
        elif seen.get("score") != seen.get("max_score"):
            lines.append(f"note: {name} last scored {_points(seen.get('score'))} / {_points(seen.get('max_score'))} "
                         f"({seen.get('status')}, {seen.get('at', '?')}): the demo runs it as it is, and a wrong "
                         f"piece shows as a loss that does not fall or ranks out of sync; "
                         f"python -m grader {name[:4]} says what is wrong")
    return lines


def _points(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else "?"


def _only_raises(function: ast.FunctionDef) -> bool:
    body = [n for n in function.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.dump(body[0])


def sentences(count: int, seed: int = 0) -> tuple[list[str], list[int]]:
    """Short sentences labelled 1 when positive words outnumber negative ones."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        label = rng.randrange(2)
        mood = POSITIVE if label else NEGATIVE
        words = [rng.choice(mood) for _ in range(rng.randint(1, 3))] + rng.sample(NEUTRAL, rng.randint(2, 5))
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def build_assets(folder: str, size: int = 256) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from grader import models as tiny

    texts, labels = sentences(size)
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=100, special_tokens=specials, show_progress=False)
    wordpiece.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordpiece, pad_token="[PAD]", unk_token="[UNK]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_max_length=16)
    tokenizer.save_pretrained(os.path.join(folder, "tokenizer"))
    checkpoint = tiny.build_checkpoint(folder, "distilbert", seed=0, hidden=32, layers=1,
                                       vocab_size=len(tokenizer))
    os.rename(checkpoint, os.path.join(folder, "model"))
    try:
        import datasets
    except ImportError:  # the demo still runs: the ranks read the plain lists
        datasets = None
    if datasets is not None:
        datasets.disable_progress_bars()
        datasets.Dataset.from_dict({"text": texts, "label": labels}).save_to_disk(os.path.join(folder, "data"))
    else:
        import json

        with open(os.path.join(folder, "data.json"), "w") as handle:
            json.dump({"text": texts, "label": labels}, handle)
