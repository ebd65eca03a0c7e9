"""The old-tutorial APIs a learner copied are found from the call in their own source, in each spelling a
tutorial uses, and the current APIs are not; hostile source gives no findings, quickly; findings cross a
plain-data wire and come back, less what is malformed. No grading, no torch."""

import json
import os
import subprocess
import sys
import time

import pytest

from grader import old_apis
from grader.old_apis import Finding, OldApi, from_plain, hint, scan, to_plain
from tests.kit.harness import KIT_ROOT

TRAINER, DTYPE, AMP, LOAD, FSDP1 = (OldApi.TRAINER_TOKENIZER, OldApi.TORCH_DTYPE, OldApi.CUDA_AMP,
                                    OldApi.TORCH_LOAD, OldApi.FSDP1)

# name: (source, the old API, the line it is found on)
OLD = {
    "trainer": ("from transformers import Trainer\n\ntrainer = Trainer(model=model, args=args, tokenizer=tok)\n",
                TRAINER, 3),
    "trainer_dotted": ("import transformers\ntrainer = transformers.Trainer(model, args,\n"
                       "                                   tokenizer=tok)\n", TRAINER, 2),
    "trainer_as": ("from transformers import Trainer as T\nt = T(model, tokenizer=tok)\n", TRAINER, 2),
    "trainer_named_so": ("from trl import SFTTrainer\nt = SFTTrainer(model, tokenizer=tok)\n", TRAINER, 2),
    "trainer_subclass": ("from transformers import Trainer\n\n\nclass Weighted(Trainer):\n    pass\n\n\n"
                         "t = Weighted(model, tokenizer=tok)\n", TRAINER, 8),
    "trainer_kwargs_too": ("t = Trainer(**common, tokenizer=tok)\n", TRAINER, 1),
    "torch_dtype": ("import torch\nfrom transformers import AutoModelForSequenceClassification as Auto\n"
                    "model = Auto.from_pretrained(name, num_labels=2, torch_dtype=torch.bfloat16)\n", DTYPE, 3),
    "torch_dtype_dotted": ("import transformers\nm = transformers.AutoModel.from_pretrained(n, torch_dtype='auto')\n",
                           DTYPE, 2),
    "amp_chain_autocast": ("import torch\n\nwith torch.cuda.amp.autocast():\n    y = model(x)\n", AMP, 3),
    "amp_chain_scaler": ("import torch\nscaler = torch.cuda.amp.GradScaler()\n", AMP, 2),
    "amp_chain_as": ("import torch as t\nscaler = t.cuda.amp.GradScaler(init_scale=2.0)\n", AMP, 2),
    "amp_from_import": ("import torch\nfrom torch.cuda.amp import autocast\n\nwith autocast():\n    pass\n", AMP, 2),
    "amp_from_import_scaler": ("from torch.cuda.amp import GradScaler as Scaler\ns = Scaler()\n", AMP, 1),
    "amp_module_from": ("from torch.cuda import amp\n\n\ndef f(x):\n    with amp.autocast(dtype=x):\n        pass\n",
                        AMP, 5),
    "amp_module_as": ("import torch.cuda.amp as amp\ns = amp.GradScaler()\n", AMP, 2),
    "amp_module_import": ("import torch.cuda.amp\ns = torch.cuda.amp.GradScaler()\n", AMP, 2),
    "torch_load": ("import torch\nstate = torch.load(path)\n", LOAD, 2),
    "torch_load_map_location": ("import torch\nmodel = torch.load(path, map_location='cpu')\n", LOAD, 2),
    "torch_load_as": ("import torch as t\nmodel = t.load(path)\n", LOAD, 2),
    "torch_load_from": ("from torch import load\nmodel = load(path)\n", LOAD, 2),
    "fsdp_import": ("from torch.distributed.fsdp import FullyShardedDataParallel\n", FSDP1, 1),
    "fsdp_import_as": ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
                       "model = FSDP(model)\n", FSDP1, 1),
    "fsdp_import_module": ("from torch.distributed.fsdp.fully_sharded_data_parallel import "
                           "FullyShardedDataParallel\n", FSDP1, 1),
    "fsdp_chain": ("import torch\nmodel = torch.distributed.fsdp.FullyShardedDataParallel(model)\n", FSDP1, 2),
    "fsdp_module": ("from torch.distributed import fsdp\nmodel = fsdp.FullyShardedDataParallel(model)\n", FSDP1, 2),
    "fsdp_module_as": ("import torch.distributed.fsdp as F\n\nok = isinstance(m, F.FullyShardedDataParallel)\n",
                       FSDP1, 3),
}

CURRENT = {
    "processing_class": "from transformers import Trainer\nt = Trainer(model, args, processing_class=tok)\n",
    "collator_takes_tokenizer": "from transformers import DataCollatorWithPadding\n"
                                "c = DataCollatorWithPadding(tokenizer=tok)\n",
    "trainer_kwargs_only": "t = Trainer(model, **settings)\n",
    "dtype": "import torch\nm = AutoModel.from_pretrained(name, dtype=torch.bfloat16)\n",
    "tokenizer_takes_no_dtype": "t = AutoTokenizer.from_pretrained(name, use_fast=True)\n",
    "torch_amp": "import torch\nwith torch.amp.autocast('cuda', dtype=torch.float16):\n    pass\n"
                 "scaler = torch.amp.GradScaler('cuda')\nwith torch.autocast('cpu'):\n    pass\n",
    "amp_from_torch": "from torch import amp\nfrom torch.amp import GradScaler\ns = amp.GradScaler('cuda')\n",
    "other_amp": "import apex.amp as amp\nwith amp.autocast():\n    pass\n",
    "weights_only_true": "import torch\nstate = torch.load(path, weights_only=True)\n",
    "weights_only_false": "import torch\nmodel = torch.load(path, map_location='cpu', weights_only=False)\n",
    "load_kwargs": "import torch\nmodel = torch.load(path, **options)\n",
    "other_load": "import json\nconfig = json.load(handle)\nnp.load(path)\n",
    "fully_shard": "from torch.distributed.fsdp import fully_shard\nfor layer in model.layers:\n"
                   "    fully_shard(layer)\nfully_shard(model)\n",
    "fsdp_plugin": "from accelerate import FullyShardedDataParallelPlugin\nplugin = FullyShardedDataParallelPlugin()\n",
}

MENTIONED = {
    "comments": "# Trainer(model, tokenizer=tok)\n# torch.cuda.amp.autocast() and torch.load(path)\n"
                "# from torch.distributed.fsdp import FullyShardedDataParallel\n"
                "x = 1  # from_pretrained(torch_dtype=x)\n",
    "strings": "'''torch.cuda.amp.GradScaler(), torch.load(path), FullyShardedDataParallel'''\n"
               "note = 'Trainer(tokenizer=tok) and from_pretrained(n, torch_dtype=d)'\n"
               "old = 'torch.distributed.fsdp.FullyShardedDataParallel'\nf'{torch_dtype} {tokenizer}'\n",
}

HOSTILE = {
    "syntax_error": "def f(:\n    torch.load(path)\n",
    "nested_parentheses": "x = " + "(" * 100_000 + "torch.load(p)" + ")" * 100_000 + "\n",
    "nested_operators": "x = " + "-" * 100_000 + "torch.load(p)\n",
    "deep_chain": "x = torch" + ".a" * 100_000 + "\ntorch.load(p)\n",
    "null_byte": "import torch\nstate = torch.load(path)\0\n",
    "five_megabytes": "import torch\nstate = torch.load(path)\n" + "x = 1\n" * 900_000,
    "bad_encoding": b"# -*- coding: no-such-codec -*-\nimport torch\ntorch.load(p)\n",
    "not_text": 42,
}


@pytest.mark.parametrize("name", sorted(OLD))
def test_each_old_api_is_found_in_each_spelling(name):
    source, code, line = OLD[name]
    assert scan(source) == (Finding(code, line),), name


@pytest.mark.parametrize("name", sorted(CURRENT))
def test_the_current_apis_find_nothing(name):
    assert scan(CURRENT[name]) == (), name


def test_the_kits_references_and_stubs_find_nothing():
    """They teach the current APIs: a finding there would be a false alarm on every learner who copies them."""
    files = [os.path.join(KIT_ROOT, folder, name) for folder in ("solutions", "exercises")
             for name in sorted(os.listdir(os.path.join(KIT_ROOT, folder))) if name.endswith(".py")]
    assert len(files) > 20
    found = {os.path.basename(file): scan(open(file).read()) for file in files}
    assert {name: findings for name, findings in found.items() if findings} == {}


@pytest.mark.parametrize("name", sorted(MENTIONED))
def test_a_comment_or_a_string_finds_nothing(name):
    assert scan(MENTIONED[name]) == (), name


def test_one_finding_per_code_at_its_first_line_in_line_order():
    source = "\n".join(["import torch", "a = torch.load(p)", "s = torch.cuda.amp.GradScaler()", "b = torch.load(q)",
                        "from torch.cuda.amp import autocast", "t = Trainer(m, tokenizer=tok)"]) + "\n"
    assert scan(source) == (Finding(LOAD, 2), Finding(AMP, 3), Finding(TRAINER, 6))
    assert scan(source.encode()) == scan(source)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_source_finds_nothing_quickly(name):
    start = time.process_time()
    assert scan(HOSTILE[name]) == (), name
    assert time.process_time() - start < 2.0, name  # CPU seconds: the machine may be busy


def test_a_failure_inside_the_parser_finds_nothing(monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(old_apis.ast, "parse", exhausted)
    assert scan(OLD["torch_load"][0]) == ()


def test_the_size_limit_is_the_sources_own():
    head, code, line = OLD["torch_load"]
    assert scan(head + "#" * (old_apis.MAX_SOURCE - len(head) - 1) + "\n") == (Finding(code, line),)
    assert scan(head + "#" * (old_apis.MAX_SOURCE - len(head)) + "\n") == ()


def test_each_hint_names_the_old_api_first_then_the_current_one():
    old_first = {TRAINER: ("Trainer(tokenizer=", "processing_class="), DTYPE: ("from_pretrained(", "dtype="),
                 AMP: ("torch.cuda.amp.autocast", 'torch.amp.autocast("cuda"'),
                 LOAD: ("torch.load(", "weights_only=False"), FSDP1: ("FullyShardedDataParallel", "fully_shard")}
    assert set(old_apis.HINTS) == set(OldApi) == set(old_first)
    for code, (old, current) in old_first.items():
        text = old_apis.HINTS[code]
        assert text.startswith(old) and current in text and len(text) <= 160 and "\n" not in text, code
        assert hint(Finding(code, 12)) == f"line 12: {text}"


def test_findings_cross_a_plain_wire_and_come_back():
    findings = scan("\n".join(source for source, _, _ in OLD.values()))
    assert {finding.code for finding in findings} == set(OldApi)
    plain = to_plain(findings)
    assert json.loads(json.dumps(plain)) == plain and all(type(code) is str for code, _ in plain)
    assert from_plain(plain) == findings
    assert from_plain(json.loads(json.dumps(plain))) == findings


def test_unknown_codes_and_bad_lines_are_dropped():
    plain = [["torch_load", 3], ["no_such_api", 4], ["TORCH_DTYPE", 5], ["fsdp1", 0], ["fsdp1", -2], ["fsdp1", True],
             ["fsdp1", 2.0], ["fsdp1", "7"], [OldApi.CUDA_AMP, 8], ["cuda_amp"], ["cuda_amp", 9, 10], "cuda_amp",
             None, ["trainer_tokenizer", 11], ["torch_load", 12], ("torch_dtype", 13)]
    assert from_plain(plain) == (Finding(LOAD, 3), Finding(TRAINER, 11), Finding(DTYPE, 13))
    for data in (None, "torch_load", {"torch_load": 3}, 3, b"[]", [[b"torch_load", 3]]):
        assert from_plain(data) == ()


def test_the_scanner_imports_the_standard_library_alone():
    """It runs inside the sandboxed worker before anything else: no torch, no transformers, nothing installed."""
    code = ("import sys; before = set(sys.modules); import grader.old_apis; "
            "print([m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names "
            "and m.split('.')[0] != 'grader'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_place_travels_with_a_finding_and_names_it_in_the_hint():
    found = Finding(TRAINER, 40, "Cell In[7], line 3")
    assert from_plain(to_plain([found])) == (found,)
    assert hint(found).startswith("Cell In[7], line 3: Trainer(tokenizer=...)")
    assert from_plain([["trainer_tokenizer", 4, "x" * (old_apis.MAX_PLACE + 1)]]) == ()


OLD_TRAINER = '''
from transformers import Trainer, TrainingArguments


def training_arguments(output_dir, learning_rate=2e-5, batch_size=8, epochs=1):
    raise NotImplementedError


def compute_metrics(eval_pred):
    raise NotImplementedError


def build_trainer(model, args, train_dataset, eval_dataset):
    return Trainer(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                   tokenizer=None)  # an older tutorial's spelling
'''


@pytest.mark.slow
def test_a_failing_check_names_the_old_api_the_code_uses_from_the_call(tmp_path):
    """Trainer(tokenizer=...) raises a TypeError in transformers 5: the check's message says what to write instead,
    found from the call in the learner's file (its line), whatever transformers' error says."""
    from tests.kit.harness import checks_of, grade_submissions

    check = "test_build_trainer_trains_like_the_trainer_itself"
    results = grade_submissions(tmp_path, "ex11_trainer", {"old": OLD_TRAINER}, profile="fast",
                                only_checks={"old": [check]})
    failed = checks_of(results["old"])[check]
    assert failed["status"] != "passed", failed
    assert "hint: " in failed["message"] and "ex11_trainer.py:14: Trainer(tokenizer=...)" in failed["message"], \
        failed["message"]
    assert "processing_class" in failed["message"]


def test_torch_load_is_named_only_where_the_code_raised():
    """torch.load without weights_only loads a state_dict as ever: a wrong value is no sign of it, an error may be."""
    found = (Finding(LOAD, 3), Finding(TRAINER, 5))
    assert old_apis.worth_naming(found, raised=True) == found
    assert old_apis.worth_naming(found, raised=False) == (Finding(TRAINER, 5),)
