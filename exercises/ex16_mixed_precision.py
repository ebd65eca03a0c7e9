"""Exercise 16 - Mixed precision.

Most of a network's work is matrix multiplication, and a GPU's tensor cores
do it several times faster in 16-bit floats (``float16``, ``bfloat16``) than
in ``float32``; a 16-bit activation also takes half the memory and half the
bandwidth. What it saves: computation and memory. What it costs: precision.
``bfloat16`` keeps float32's range but only 2 to 3 significant digits;
``float16`` has about 3.3 digits and a small range: its largest value is
65504, and gradients below about 6e-8 flush to zero (underflow).

Mixed precision keeps the best of both:

* The *weights* stay ``float32`` (the master copy the optimizer updates: many
  small updates would be lost if they were rounded to 16 bits). Do not call
  ``model.half()``.
* The *forward pass* runs under ``torch.autocast(device_type, dtype=dtype)``:
  inside it, each op runs in the precision autocast picks for it, matrix
  multiplications in ``dtype``, precision-sensitive ops (losses, sums,
  softmax on some devices) in ``float32``. The output comes out in whatever
  dtype autocast produced (``dtype`` for a model ending in a Linear). The
  backward pass needs no autocast: it runs each op in the dtype its forward
  used.
* *Loss scaling* (needed for float16) fights underflow: multiply the loss by a
  large factor before ``backward()`` so that small gradients stay
  representable, divide the gradients by it again before the optimizer step.
  A ``torch.amp.GradScaler`` does all of it, in three calls a step:
  ``scaler.scale(t)`` returns ``t`` times the current scale (the tensor to
  back-propagate); ``scaler.step(opt)`` unscales the gradients of ``opt``'s
  parameters and *skips* the step if any of them is inf or NaN (an
  overflow: the scale was too large); ``scaler.update()`` then halves the
  scale after an overflow and doubles it after ``growth_interval`` steps
  without one. Calling ``optimizer.step()`` yourself would apply scaled (or
  inf) gradients; forgetting ``update()`` keeps a scale that overflows again
  and again.

``scaled_step`` is one training step of a loop that calls it again and
again: the forward pass and the loss under autocast (the device type is the
inputs' own, ``inputs.device.type``), the backward pass of the scaled loss,
the optimizer step through the scaler, and the scale updated. The gradients
of one call must not leak into the next: clear them (``zero_grad``) at the
start of the call, as PyTorch's AMP recipe does, or after the step. It
returns the loss as a Python float (the unscaled one; NaN or inf when the
step overflowed). The caller builds the scaler for its device:
``torch.amp.GradScaler("cuda")`` or ``GradScaler("cpu")`` (a bare
``GradScaler()`` means CUDA and disables itself on a machine without one).

What to use: ``torch.autocast(device_type, dtype=...)`` as a context
manager, a ``torch.amp.GradScaler``'s ``scale``, ``step`` and ``update``,
``optimizer.zero_grad()``, ``tensor.item()``. Stuck? ``python -m grader
hint ex16`` gives one step at a time.

Example::

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    out = autocast_forward(model, x, "cpu", torch.bfloat16)      # out.dtype == torch.bfloat16

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    loss = scaled_step(model, optimizer, scaler, x, y, torch.nn.functional.cross_entropy, torch.float16)
"""

import torch


def autocast_forward(model: torch.nn.Module, inputs: torch.Tensor, device_type: str,
                     dtype: torch.dtype) -> torch.Tensor:
    """The forward pass under autocast: each op in the precision autocast picks for it."""
    # TODO: the forward pass under autocast, its output as autocast gives it.
    raise NotImplementedError


def scaled_step(model, optimizer, scaler: torch.amp.GradScaler, inputs, targets, loss_fn, dtype: torch.dtype) -> float:
    """One mixed-precision training step with loss scaling; returns the (unscaled) loss."""
    # TODO: forward and loss under autocast, the scaled backward pass, the step and the update through the
    #  scaler; no gradient of an earlier call may leak in.
    raise NotImplementedError
