"""ex14's wrong implementations, as data: the gradient-checkpointing mistakes learners really make, each with
the check that must fail it (and the cause its message must name where one is given), and other right ways
to do it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex14_gradient_checkpointing"

CALL = "x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)"
ENABLE = "    enable()\n"
HIDES_WHAT_IT_KEEPS = '''    for module in model.modules():
        if hasattr(module, "_gradient_checkpointing_func"):
            module._gradient_checkpointing_func = lambda function, *args, **kwargs: function(*args, **kwargs)
    forward = model.forward

    def hidden(*args, **kwargs):
        with torch.autograd.graph.saved_tensors_hooks(lambda tensor: tensor, lambda tensor: tensor):
            return forward(*args, **kwargs)
    model.forward = hidden
'''
RETURN_MODEL = "    return model\n"
LOOP = "    for block in blocks:\n"

WHOLE_STACK = '''
    def run_all(h):
        for block in blocks:
            h = block(h)
        return h

    return torch.utils.checkpoint.checkpoint(run_all, x, use_reentrant=False)
'''

FORWARD, SAVED, RECOMPUTED = ("test_checkpointed_forward_matches_the_plain_forward",
                              "test_checkpointed_forward_keeps_one_input_per_block",
                              "test_each_block_is_recomputed_once_in_backward")
SAME_MODEL, FLAGS, FEWER, SAME_RESULTS = ("test_enable_returns_the_same_model",
                                          "test_enable_turns_checkpointing_on_in_every_layer",
                                          "test_enabled_model_keeps_fewer_activations",
                                          "test_enabled_model_computes_the_same_outputs_and_gradients")


WRONG = [
    # the re-entrant checkpoint: on raw data (x without grad) no gradient reaches the parameters
    Wrong("reentrant", mutate(EX, (CALL, CALL.replace("False", "True"))), FORWARD, diagnosis="use_reentrant=True"),
    # one checkpoint around the whole stack: one input kept, everything recomputed at once
    Wrong("whole_stack_one_call", mutate(EX, (LOOP + "        # non-reentrant", "    for block in []:\n        # non"),
                                         ("    return x\n\n\ndef enable", WHOLE_STACK + "\n\ndef enable")), SAVED,
          diagnosis="one checkpoint around the whole stack"),
    # the RNG state not preserved: the recomputed dropout masks differ, so do the gradients
    Wrong("rng_not_preserved", mutate(EX, (CALL, CALL.replace("use_reentrant=False", "use_reentrant=False, "
                                                              "preserve_rng_state=False"))), FORWARD,
          diagnosis="preserve_rng_state=True"),
    # no checkpointing at all: right values, every activation kept
    Wrong("no_checkpoint", mutate(EX, (CALL, "x = block(x)")), SAVED, diagnosis="nothing was checkpointed"),
    # checkpoint_sequential runs its last segment without a checkpoint
    Wrong("checkpoint_sequential", mutate(EX, (LOOP, "    return torch.utils.checkpoint.checkpoint_sequential("
                                               "blocks, len(blocks), x, use_reentrant=False)\n" + LOOP)), SAVED,
          diagnosis="some blocks run without a checkpoint"),
    # x detached on the way in: the caller's x gets no gradient
    Wrong("detached_input", mutate(EX, (LOOP, "    x = x.detach()\n" + LOOP)), FORWARD, diagnosis="no .detach()"),
    # x made to require grad (the old re-entrant workaround): the caller's raw data gets a gradient
    Wrong("input_requires_grad", mutate(EX, (LOOP, "    x.requires_grad_(True)\n" + LOOP)), FORWARD,
          diagnosis="x, raw data, got a gradient: x.requires_grad_()"),
    # the same, its message the right way round: no gradient was expected, one came
    Wrong("input_requires_grad_told", mutate(EX, (LOOP, "    x.requires_grad_(True)\n" + LOOP)), FORWARD,
          diagnosis="whether x got a gradient: expected False, got True"),
    # reseeding for "reproducible" dropout: masks differ from the caller's stream
    Wrong("reseeds", mutate(EX, (LOOP, "    torch.manual_seed(0)\n" + LOOP)), FORWARD),
    # the method looked up but never called
    Wrong("enable_not_called", mutate(EX, (ENABLE, "")), FLAGS, diagnosis="activation_checkpointing_enable()"),
    # a copy returned: the caller's model unchanged
    Wrong("returns_a_copy", mutate(EX, ("    enable = getattr(model,", "    import copy\n    model = copy.deepcopy(model)\n"
                                        "    enable = getattr(model,")), SAME_MODEL,
          diagnosis="not the model passed in"),
    # the config flag of transformers 3: does nothing now
    Wrong("config_flag_only", mutate(EX, (ENABLE, "    model.config.gradient_checkpointing = True\n")), FLAGS,
          diagnosis="model.config.gradient_checkpointing"),
    # every second layer only: half the layers keep all their activations
    Wrong("every_other_layer", mutate(EX, (ENABLE, "    enable(every_n_layers=2)\n")), FLAGS,
          diagnosis="not every n-th one", also_fails=(FEWER,)),
    # the same, told by the activations kept
    Wrong("every_other_layer_kept", mutate(EX, (ENABLE, "    enable(every_n_layers=2)\n")), FEWER,
          diagnosis="checkpoint every layer"),
    # a "dry run" of each block under no_grad first (to see its output): every block runs twice forward
    Wrong("dry_run_first", mutate(EX, (LOOP, "    with torch.no_grad():\n        y = x\n        for block in blocks:\n"
                                             "            y = block(y)\n" + LOOP)), RECOMPUTED),
    # half precision on top "to save even more memory": other outputs and gradients
    # the flags on, the checkpointing function replaced by a plain call, and the saves hidden under hooks of its own
    Wrong("flags_without_checkpointing_hidden", mutate(EX, (ENABLE, ENABLE + HIDES_WHAT_IT_KEEPS)), FEWER,
          diagnosis="did not run again in the backward pass"),
    Wrong("half_precision_too", mutate(EX, (ENABLE, ENABLE + "    model.half()\n")), SAME_RESULTS),
]

RIGHT = [
    # the old method alone, on a model handed over in eval mode and left so (the mode returned is not graded)
    Right("enable_alone", mutate(EX, ("    enable = getattr(model, \"activation_checkpointing_enable\", None) or "
                                      "model.gradient_checkpointing_enable\n    enable()\n",
                                      "    model.gradient_checkpointing_enable()\n"))),
    # train mode set too (transformers' layers checkpoint only while training)
    Right("train_mode_too", mutate(EX, (ENABLE, ENABLE + "    model.train()\n"))),
    # eval mode set afterwards "to be safe": a training loop calls model.train() before it steps
    Right("eval_afterwards", mutate(EX, (ENABLE, ENABLE + "    model.eval()\n"))),
    # the function imported by name, the block's forward passed, the old method name
    Right("imported_checkpoint", mutate(EX, ("import torch.utils.checkpoint\n", "from torch.utils.checkpoint import checkpoint\n"),
                                        (CALL, "x = checkpoint(block.__call__, x, use_reentrant=False, preserve_rng_state=True)"),
                                        ("    enable = getattr(model, \"activation_checkpointing_enable\", None) or "
                                         "model.gradient_checkpointing_enable\n", "    enable = model.gradient_checkpointing_enable\n"))),
    # explicit non-reentrant keyword arguments, train mode first, enabling on the body alone
    Right("explicit_keywords", mutate(EX, (ENABLE, "    model.train()\n    if hasattr(model, \"activation_checkpointing_enable\"):\n"
                                           "        model.activation_checkpointing_enable(activation_checkpointing_kwargs="
                                           "{\"use_reentrant\": False})\n    else:\n        model.gradient_checkpointing_enable("
                                           "gradient_checkpointing_kwargs={\"use_reentrant\": False})\n"))),
    # checkpointing switched on through the body (base_model), which holds every layer
    Right("through_base_model", mutate(EX, ("getattr(model, ", "getattr(model.base_model, "),
                                       ("or model.gradient_checkpointing_enable", "or model.base_model.gradient_checkpointing_enable"))),
    # a functools.reduce over the blocks
    Right("reduce", mutate(EX, (LOOP + "        # non-reentrant", "    import functools\n    return functools.reduce("
                                "lambda h, b: torch.utils.checkpoint.checkpoint(b, h, use_reentrant=False), blocks, x)\n"
                                "    for block in blocks:\n        # non"))),
]
