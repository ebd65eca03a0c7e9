"""ex01's wrong implementations, as data: the loading mistakes learners really make, each with the check that
must fail it (and the cause its message must name where one is given), and other right ways to do it, which
must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex01_load_model"
LOAD = "return AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=num_labels)"
CONFIG = "return model.config"


def load_with(body, imports=""):
    return mutate(EX, ("from transformers import", f"{imports}\nfrom transformers import"), (LOAD, body))


WRONG = [
    # the bare body: no classification head at all
    Wrong("automodel", load_with("return AutoModel.from_pretrained(model_name)", "from transformers import AutoModel"),
          "test_load_model_builds_a_sequence_classifier"),
    # the checkpoint's own pretraining class (a masked-LM head, not a classifier)
    Wrong("masked_lm", load_with("return AutoModelForMaskedLM.from_pretrained(model_name)",
                                 "from transformers import AutoModelForMaskedLM"),
          "test_load_model_builds_a_sequence_classifier"),
    # num_labels dropped: the head keeps the default 2 outputs
    Wrong("ignores_num_labels", load_with("return AutoModelForSequenceClassification.from_pretrained(model_name)"),
          "test_load_model_head_has_num_labels_outputs"),
    # num_labels written into the config after loading: the head is already built with 2 outputs
    Wrong("num_labels_after_loading", load_with(
             "model = AutoModelForSequenceClassification.from_pretrained(model_name)\n"
             "    model.config.num_labels = num_labels\n"
             "    return model"),
          "test_load_model_head_has_num_labels_outputs"),
    # the right architecture, but random weights: nothing pretrained is loaded
    Wrong("from_config", load_with(
             "config = AutoConfig.from_pretrained(model_name, num_labels=num_labels)\n"
             "    return AutoModelForSequenceClassification.from_config(config)",
             "from transformers import AutoConfig"),
          "test_load_model_keeps_the_pretrained_weights"),
    # the forward pass broken after loading: the head's check names the exception, while the class and the weights,
    # observed in the same load, are judged on their own
    Wrong("forward_broken", load_with(
             "model = AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=num_labels)\n"
             "    model.forward = None\n"
             "    return model"),
          "test_load_model_head_has_num_labels_outputs", diagnosis="the model's forward pass raised TypeError",
          passes=("test_load_model_builds_a_sequence_classifier", "test_load_model_keeps_the_pretrained_weights")),
    # a different default number of labels
    Wrong("wrong_default", mutate(EX, ("num_labels: int = 2", "num_labels: int = 3")),
          "test_load_model_head_has_num_labels_outputs"),
    # a plain dict instead of the config object
    Wrong("config_to_dict", mutate(EX, (CONFIG, "return model.config.to_dict()")),
          "test_get_config_returns_the_models_own_config"),
    # a copy: changes to it no longer reach the model
    Wrong("config_copy", mutate(EX, (CONFIG, "import copy\n    return copy.deepcopy(model.config)")),
          "test_get_config_returns_the_models_own_config"),
    # the checkpoint's config read afresh: num_labels and the label names are lost
    Wrong("config_reloaded", mutate(EX, (CONFIG, "from transformers import AutoConfig\n"
                                                 "    return AutoConfig.from_pretrained(model.name_or_path)")),
          "test_get_config_returns_the_models_own_config"),
    # train mode switched on "for fine-tuning": from_pretrained leaves the model in eval mode
    Wrong("train_mode", load_with(LOAD + ".train()"), "test_load_model_keeps_the_mode_from_pretrained_sets"),
    # the body frozen: only the head would train
    Wrong("freezes_the_body", load_with(
             "model = AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=num_labels)\n"
             "    for param in model.base_model.parameters():\n"
             "        param.requires_grad_(False)\n"
             "    return model"),
          "test_load_model_keeps_every_parameter_trainable"),
    # the new head zeroed "for a clean start"
    Wrong("zeroed_head", load_with(
             "model = AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=num_labels)\n"
             "    body = model.base_model_prefix + '.'\n"
             "    with torch.no_grad():\n"
             "        for name, param in model.named_parameters():\n"
             "            if not name.startswith(body):\n"
             "                param.zero_()\n"
             "    return model", "import torch"),
          "test_load_model_head_is_random_as_from_pretrained_makes_it", diagnosis="the head is all zeros"),
    # re-seeded inside "for reproducibility": the head no longer follows the caller's seed
    Wrong("seeds_inside", load_with("torch.manual_seed(0)\n    " + LOAD, "import torch"),
          "test_load_model_head_is_random_as_from_pretrained_makes_it",
          diagnosis="do not call torch.manual_seed inside"),
    # a cache: the second call hands out the first call's model
    Wrong("cached", mutate(EX, ("def load_model(", "import functools\n\n\n@functools.lru_cache(maxsize=None)\ndef load_model(")),
          "test_load_model_returns_a_fresh_model_every_call"),
    # the caller's random stream saved and restored around loading: the same head, but the stream does not move on
    Wrong("restores_the_random_stream", load_with("with torch.random.fork_rng():\n        " + LOAD, "import torch"),
          "test_load_model_draws_from_the_random_stream_as_from_pretrained",
          diagnosis="is where it was before the call"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # the config first, then the model with it
    Right("config_then_model", load_with(
              "config = AutoConfig.from_pretrained(model_name, num_labels=num_labels)\n"
              "    return AutoModelForSequenceClassification.from_pretrained(model_name, config=config)",
              "from transformers import AutoConfig")),
    # eval mode set again: it is what from_pretrained gives
    Right("explicit_eval", load_with(LOAD + ".eval()")),
]
