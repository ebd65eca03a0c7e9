"""Exercise 25 - The gradients' memory: the optimizer step inside backward.

An ordinary training step keeps every gradient at once: ``loss.backward()``
fills ``p.grad`` for every parameter, and only then does ``optimizer.step()``
use them. For a large model that is a second copy of the weights (in their
dtype) alive at the end of every backward pass. Yet each gradient is final as
soon as autograd has accumulated it, long before the backward pass ends: the
last layer's gradient is ready first. Step that parameter then, and free its
gradient at once: the gradients alive at any moment shrink to about the
largest single one.

PyTorch gives the moment: ``param.register_post_accumulate_grad_hook(hook)``
calls ``hook(param)`` once per backward pass, after the gradient has been
accumulated into ``param.grad`` (a weight used twice in the forward pass gets
its two contributions added first). A hook from ``Tensor.register_hook`` is
another thing: it runs *before* accumulation, with the incoming gradient.

Since each parameter steps on its own, each needs an optimizer of its own:
``torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)``, one per
trainable parameter, stepped in that parameter's hook, after which the hook
sets ``param.grad = None``. AdamW's update of one parameter never reads
another's, so this equals AdamW over the whole model stepped after backward.
Step a parameter in its own hook and nowhere else: autograd still needs the
weights whose gradients have not arrived yet, and refuses to go on with one
changed in place. Parameters whose ``requires_grad`` is False get no optimizer
and no hook. Iterate ``model.parameters()``: it yields a tied weight once.

``attach_optimizer_in_backward`` sets this up and returns the hooks' handles
(a list, one per trainable parameter): removing them (``handle.remove()``)
gives back an ordinary model. ``train_step`` is then only the forward and
backward pass: no ``optimizer.step()``, no ``zero_grad()``; it returns the loss
as a Python float.

The price: no step can wait for all the gradients. Gradient clipping by the
global norm needs them all at once, and gradient accumulation keeps them
across passes: a step inside backward leaves no gradient to accumulate into.

Example::

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    handles = attach_optimizer_in_backward(model, lr=1e-3, weight_decay=0.01)
    for inputs, targets in batches:
        loss = train_step(model, (inputs, targets), torch.nn.functional.mse_loss)
    # every p.grad is None here; the parameters are where AdamW's ordinary loop puts them
    for handle in handles:
        handle.remove()  # ordinary training again

What to use: ``torch.optim.AdamW``, ``Tensor.register_post_accumulate_grad_hook``,
``param.requires_grad``, ``loss.backward()``, ``loss.item()``.
"""

import torch


def attach_optimizer_in_backward(model: torch.nn.Module, lr: float, weight_decay: float) -> list:
    """Give each trainable parameter its own AdamW(lr, weight_decay), stepped by a post-accumulate-grad hook
    that then frees the gradient; return the hooks' handles, a list."""
    # TODO: one optimizer and one hook per trainable parameter; collect the handles.
    raise NotImplementedError


def train_step(model: torch.nn.Module, batch: tuple, loss_fn) -> float:
    """Forward and backward on batch = (inputs, targets); the hooks do the step. Return the loss as a float."""
    # TODO: the forward pass, the loss, the backward pass.
    raise NotImplementedError
