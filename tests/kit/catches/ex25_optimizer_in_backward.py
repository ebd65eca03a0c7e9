"""ex25's wrong implementations, as data: the optimizer-in-backward mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex25_optimizer_in_backward"

VALUES, FREED, OWN, HANDLES, PEAK = ("test_training_matches_the_ordinary_loop",
                                     "test_no_gradient_is_left_after_backward",
                                     "test_each_trainable_parameter_has_an_optimizer_of_its_own",
                                     "test_removing_the_handles_restores_ordinary_training",
                                     "test_the_gradients_peak_at_the_largest_one")

BUILD = "        optimizer = torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)\n"
FREE = "            param.grad = None  # used: free it now, not at the end of the backward pass\n"
STEP = "            optimizer.step()\n"
REGISTER = "        handles.append(param.register_post_accumulate_grad_hook(step))\n"
LOOP = "    for param in model.parameters():  # each tensor once: a tied weight gets one optimizer and one hook\n"
SKIP = "        if not param.requires_grad:\n            continue\n"
HOOK_HEAD = "        def step(param: torch.Tensor, optimizer: torch.optim.Optimizer = optimizer) -> None:\n"

# stepping every second backward pass and keeping p.grad meanwhile, to accumulate two batches' gradients
ACCUMULATE = mutate(EX, ("    handles = []\n", "    handles, passes = [], {}\n"),
                    (STEP + FREE, "            passes[param] = passes.get(param, 0) + 1\n"
                                  "            if passes[param] % 2 == 0:\n"
                                  "                optimizer.step()\n"
                                  "                param.grad = None\n"))

# the same, the gradients kept in a dict of their own between the steps (p.grad freed every pass)
ACCUMULATE_ASIDE = mutate(EX, ("    handles = []\n", "    handles, kept = [], {}\n"),
                          (STEP + FREE, "            if param in kept:\n"
                                        "                param.grad = param.grad + kept.pop(param)\n"
                                        "                optimizer.step()\n"
                                        "            else:\n"
                                        "                kept[param] = param.grad\n"
                                        "            param.grad = None\n"))

# Tensor.register_hook: runs before accumulation, so the step reads the previous pass's p.grad
STEPS_BEFORE_ACCUMULATION = mutate(EX, (REGISTER, "        handles.append(param.register_hook(lambda grad, param=param, "
                                                  "step=step: step(param)))\n"))

# Tensor.register_hook with the incoming gradient put in p.grad by hand: the right step, but autograd stores
# the gradient in p.grad after the hook, and there it stays
ASSIGNS_INCOMING = mutate(EX, (REGISTER, "        def early(grad, param=param, step=step):\n"
                                         "            param.grad = grad\n"
                                         "            step(param)\n\n"
                                         "        handles.append(param.register_hook(early))\n"))

# the hook closes over the loop's variable: every hook steps the last optimizer built
LATE_BINDING = mutate(EX, (HOOK_HEAD, "        def step(param: torch.Tensor) -> None:\n"))

# one optimizer over every trainable parameter, stepped in every hook: right values, one optimizer for all
ONE_FOR_ALL = mutate(EX, ("    handles = []\n", "    handles = []\n    shared = torch.optim.AdamW([p for p in "
                          "model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)\n"),
                     (BUILD, "        optimizer = shared\n"))

# an optimizer built for every parameter, frozen ones too (only trainable ones get a hook)
FROZEN_OPTIMIZERS = mutate(EX, (SKIP + BUILD, BUILD + SKIP))

# named_parameters(remove_duplicate=False): a tied weight gets two optimizers and two hooks
EVERY_NAME = mutate(EX, (LOOP, "    for _, param in model.named_parameters(remove_duplicate=False):\n"))

# a hook on every parameter, frozen ones too: registering one on a tensor that does not require grad raises
HOOKS_ON_FROZEN = mutate(EX, (SKIP, ""))

# the gradient zeroed, not freed
ZEROED = mutate(EX, (FREE, "            optimizer.zero_grad(set_to_none=False)\n"))

# the gradient never freed
NOT_FREED = mutate(EX, (FREE, ""))

# the handles dropped: the caller can never go back to ordinary training
NO_HANDLES = mutate(EX, ("    return handles\n", "    return []\n"))

# the handle appended after the loop: only the last hook can be removed
LAST_HANDLE = mutate(EX, (REGISTER, "        handle = param.register_post_accumulate_grad_hook(step)\n"),
                     ("    return handles\n", "    handles.append(handle)\n    return handles\n"))

# every gradient kept "to log its norm later": p.grad is None, the memory is not freed
KEPT = mutate(EX, ("    handles = []\n", "    handles, kept = [], []\n"),
              (FREE, "            kept.append(param.grad)\n" + FREE))

# a flat view of each gradient kept: the gradient's storage stays alive through it
KEPT_VIEW = mutate(EX, ("    handles = []\n", "    handles, kept = [], []\n"),
                   (FREE, "            kept.append(param.grad.view(-1))\n" + FREE))

# one optimizer over every parameter, stepped (and zeroed) in the hook of the gradient that arrives first: it
# changes in place weights whose gradients are still to come, which autograd refuses (its version counter)
FIRST_HOOK = '''
import torch


def attach_optimizer_in_backward(model, lr, weight_decay):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def step(param):
        optimizer.step()
        optimizer.zero_grad()

    last = [p for p in model.parameters() if p.requires_grad][-1]  # the output layer's: its gradient comes first
    return [last.register_post_accumulate_grad_hook(step)]


def train_step(model, batch, loss_fn):
    inputs, targets = batch
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return loss.item()
'''

# the ordinary loop in disguise: hooks that do nothing, the optimizers stepped after backward in train_step
AFTER_BACKWARD = '''
import torch

OPTIMIZERS = {}


def attach_optimizer_in_backward(model, lr, weight_decay):
    handles = []
    for param in model.parameters():
        if param.requires_grad:
            OPTIMIZERS[param] = torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)
            handles.append(param.register_post_accumulate_grad_hook(lambda param: None))
    return handles


def train_step(model, batch, loss_fn):
    inputs, targets = batch
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    for param in model.parameters():
        if param in OPTIMIZERS:
            OPTIMIZERS[param].step()
            param.grad = None
    return loss.item()
'''

# the same on copies: each hook moves a clone of its gradient aside and frees p.grad, and train_step steps on the
# clones after backward (every gradient's memory still held at once, out of p.grad's sight)
AFTER_BACKWARD_ON_COPIES = '''
import torch

OPTIMIZERS, ASIDE = {}, {}


def _aside(param):
    ASIDE[param] = param.grad.clone()
    param.grad = None


def attach_optimizer_in_backward(model, lr, weight_decay):
    handles = []
    for param in model.parameters():
        if param.requires_grad:
            OPTIMIZERS[param] = torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)
            handles.append(param.register_post_accumulate_grad_hook(_aside))
    return handles


def train_step(model, batch, loss_fn):
    inputs, targets = batch
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    for param in list(ASIDE):
        param.grad = ASIDE.pop(param)
        OPTIMIZERS[param].step()
        param.grad = None
    return loss.item()
'''

# the ordinary loop again, with torch patched during backward so that the kit's watch would see no gradient kept
# (a storage that dies at once) and every parameter moved (torch.equal never true): the watch reads a torch bound
# before the submission was imported
PATCHES_TORCH = AFTER_BACKWARD.replace("OPTIMIZERS = {}\n", """OPTIMIZERS = {}
_equal, _storage = torch.equal, torch.Tensor.untyped_storage


def _never_equal(a, b):
    return False


def _fresh_storage(self):
    return _storage(torch.empty(0))
""").replace("""    loss = loss_fn(model(inputs), targets)
    loss.backward()
""", """    torch.equal, torch.Tensor.untyped_storage = _never_equal, _fresh_storage
    try:
        loss = loss_fn(model(inputs), targets)
        loss.backward()
    finally:
        torch.equal, torch.Tensor.untyped_storage = _equal, _storage
""")

WRONG = [
    Wrong("steps_after_backward_on_copies", AFTER_BACKWARD_ON_COPIES, PEAK, diagnosis="moved only after the backward "
          "pass", passes=(VALUES, FREED, OWN, HANDLES)),
    Wrong("one_optimizer_stepped_in_the_first_hook", FIRST_HOOK, VALUES),
    Wrong("steps_after_backward", AFTER_BACKWARD, PEAK, diagnosis="moved only after the backward pass",
          passes=(VALUES, FREED, OWN, HANDLES)),
    Wrong("accumulates_every_two_passes", ACCUMULATE, VALUES, diagnosis="does not mix with gradient accumulation",
          also_fails=(FREED,)),
    Wrong("accumulates_every_two_passes_told_by_the_gradients", ACCUMULATE, FREED,
          diagnosis="does not mix with gradient accumulation"),
    Wrong("accumulates_in_a_dict_of_its_own", ACCUMULATE_ASIDE, VALUES,
          diagnosis="does not mix with gradient accumulation"),
    Wrong("steps_before_accumulation", STEPS_BEFORE_ACCUMULATION, VALUES, diagnosis="Tensor.register_hook runs "
          "before accumulation"),
    Wrong("late_binding_closure", LATE_BINDING, VALUES, diagnosis="some parameters never stepped"),
    Wrong("adam_with_l2", mutate(EX, (BUILD, BUILD.replace("AdamW", "Adam"))), VALUES,
          diagnosis="torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)"),
    Wrong("loss_as_a_tensor", mutate(EX, ("    return loss.item()\n", "    return loss.detach()\n")), VALUES,
          diagnosis="expected a Python float"),
    Wrong("zeroed_not_freed", ZEROED, FREED, diagnosis="zeroed, not freed", also_fails=(PEAK,)),
    Wrong("not_freed", NOT_FREED, FREED, diagnosis="set param.grad = None right after the step"),
    Wrong("incoming_gradient_assigned_early", ASSIGNS_INCOMING, FREED,
          diagnosis="Tensor.register_hook runs before accumulation", passes=(VALUES,)),
    Wrong("one_optimizer_for_all", ONE_FOR_ALL, OWN, diagnosis="an AdamW of its own", passes=(VALUES, FREED, PEAK)),
    Wrong("optimizers_for_frozen_parameters", FROZEN_OPTIMIZERS, OWN, diagnosis="frozen parameter",
          passes=(VALUES, FREED, PEAK)),
    Wrong("tied_weight_registered_twice", EVERY_NAME, OWN, diagnosis="gives a tied weight once",
          passes=(VALUES, FREED, PEAK)),
    Wrong("hooks_on_frozen_parameters", HOOKS_ON_FROZEN, OWN),
    Wrong("no_handles", NO_HANDLES, HANDLES, diagnosis="return the handle of every hook",
          passes=(VALUES, FREED, OWN, PEAK)),
    Wrong("last_handle_only", LAST_HANDLE, HANDLES, diagnosis="return the handle of every hook"),
    Wrong("gradients_kept_for_later", KEPT, PEAK, diagnosis="keep no reference to a gradient",
          passes=(VALUES, FREED, OWN)),
    Wrong("views_of_gradients_kept", KEPT_VIEW, PEAK, diagnosis="keep no reference to a gradient"),
    Wrong("ordinary_loop_with_torch_patched", PATCHES_TORCH, PEAK, diagnosis="moved only after the backward pass",
          passes=(VALUES, FREED, OWN, HANDLES)),
]

# PyTorch's tutorial's shape: a dict of optimizers (foreach=False), one hook function reading it, zero_grad()
TUTORIAL = '''
import torch


def attach_optimizer_in_backward(model, lr, weight_decay):
    optimizer_dict = {p: torch.optim.AdamW([p], lr=lr, weight_decay=weight_decay, foreach=False)
                      for p in model.parameters() if p.requires_grad}

    def optimizer_hook(parameter) -> None:
        optimizer_dict[parameter].step()
        optimizer_dict[parameter].zero_grad()

    return [p.register_post_accumulate_grad_hook(optimizer_hook) for p in optimizer_dict]


def train_step(model, batch, loss_fn):
    inputs, targets = batch
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return float(loss)
'''

# the optimizers built lazily, in the hook, the first time each gradient arrives
LAZY = '''
import functools

import torch


def _step(optimizers, lr, weight_decay, param):
    if param not in optimizers:
        optimizers[param] = torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)
    optimizers[param].step()
    optimizers[param].zero_grad(set_to_none=True)


def attach_optimizer_in_backward(model, lr, weight_decay):
    hook = functools.partial(_step, {}, lr, weight_decay)
    return [p.register_post_accumulate_grad_hook(hook) for p in model.parameters() if p.requires_grad]


def train_step(model, batch, loss_fn):
    model.zero_grad(set_to_none=True)
    output = model(batch[0])
    loss = loss_fn(output, batch[1])
    loss.backward()
    return loss.item()
'''

RIGHT = [
    Right("tutorial_dict_of_optimizers", TUTORIAL),
    Right("lazy_optimizers_and_partial", LAZY),
    # AdamW's single-tensor loop asked for by name
    Right("foreach_false", mutate(EX, (BUILD, BUILD.replace("weight_decay)", "weight_decay, foreach=False)")))),
    # the frozen parameters filtered first, the decay and rate by keyword
    Right("filtered_first", mutate(EX, (LOOP + SKIP, "    for param in filter(lambda p: p.requires_grad, "
                                        "model.parameters()):\n"))),
]
