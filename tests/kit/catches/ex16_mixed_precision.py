"""ex16's wrong implementations, as data: the mixed-precision mistakes learners really make, each with the
check that must fail it (and the cause its message must name where one is given), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex16_mixed_precision"

FORWARD = "    with torch.autocast(device_type, dtype=dtype):\n        return model(inputs)\n"
STEP_AUTOCAST = "    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n"
BACKWARD = "    scaler.scale(loss).backward()"
SCALER_STEP = "    scaler.step(optimizer)"
UPDATE = "    scaler.update()"
ZERO_GRAD = "    optimizer.zero_grad(set_to_none=True)\n"
RETURN = "    return loss.item()\n"

MATCHES, WEIGHTS = "test_autocast_forward_matches_torch_autocast", "test_autocast_forward_leaves_the_weights_float32"
LOOP, OVERFLOW, LOSS, CLEARS = ("test_scaled_step_matches_a_grad_scaler_loop",
                                "test_an_overflowing_step_is_skipped_and_the_scale_lowered",
                                "test_scaled_step_returns_the_loss",
                                "test_scaled_step_clears_gradients_and_keeps_float32_weights")


# no scaler at all: a plain float32-style step under autocast
NO_SCALER = mutate(EX, (BACKWARD, "    loss.backward()"), (SCALER_STEP, "    optimizer.step()"), (UPDATE, ""))
# the course's bare GradScaler(), built in the step instead of the one passed in: CUDA's, disabled on a CPU host
BARE_SCALER = mutate(EX, (STEP_AUTOCAST, "    scaler = torch.amp.GradScaler()\n" + STEP_AUTOCAST))
# the same, built once when the module is imported
BARE_SCALER_MODULE = mutate(EX, ("import torch\n", "import torch\n\namp_scaler = torch.amp.GradScaler()\n"),
                            (BACKWARD, "    amp_scaler.scale(loss).backward()"),
                            (SCALER_STEP, "    amp_scaler.step(optimizer)"), (UPDATE, "    amp_scaler.update()"))
# a scaler for the right device, but a new one every call: the caller's never moves
OWN_SCALER = mutate(EX, (STEP_AUTOCAST, "    scaler = torch.amp.GradScaler(inputs.device.type)\n" + STEP_AUTOCAST))


WRONG = [
    # the forward pass without autocast: float32 output
    Wrong("forward_outside_autocast", mutate(EX, (FORWARD, "    return model(inputs)\n")), MATCHES,
          diagnosis="ran outside autocast"),
    # an older tutorial's torch.cuda.amp.autocast: CUDA's alone, so on the CPU nothing runs in lower precision; the
    # failure names today's API, found from the call (grader.old_apis)
    Wrong("cuda_amp_autocast", mutate(EX, (FORWARD, "    with torch.cuda.amp.autocast(dtype=dtype):\n"
                                                    "        return model(inputs)\n")), MATCHES,
          diagnosis='use torch.amp.autocast("cuda", ...)'),
    # the course's Accelerator(mixed_precision="fp16") for the autocast: on a CPU it does not autocast at all
    Wrong("accelerator_fp16_autocast", mutate(EX, (FORWARD, "    from accelerate import Accelerator\n\n"
                                                   '    accelerator = Accelerator(mixed_precision="fp16")\n'
                                                   "    with accelerator.autocast():\n        return model(inputs)\n")),
          MATCHES, diagnosis='mixed_precision="fp16" has no float16 autocast'),
    # the same with bf16: an autocast, but in bfloat16 whatever dtype is asked for
    Wrong("accelerator_bf16_autocast", mutate(EX, (FORWARD, "    from accelerate import Accelerator\n\n"
                                                   '    accelerator = Accelerator(mixed_precision="bf16")\n'
                                                   "    with accelerator.autocast():\n        return model(inputs)\n")),
          MATCHES, diagnosis="for its autocast: use torch.autocast(device_type, dtype=dtype) itself"),
    # autocast without dtype: the device's default (bfloat16 on the CPU)
    Wrong("autocast_default_dtype", mutate(EX, (FORWARD, FORWARD.replace(", dtype=dtype", ""))), MATCHES,
          diagnosis="pass dtype=dtype"),
    # the model cast to the low precision instead of autocast
    Wrong("model_cast_to_dtype", mutate(EX, (FORWARD, "    model.to(dtype)\n    return model(inputs.to(dtype))\n")),
          WEIGHTS, diagnosis="do not call model.half()"),
    # autocast hard-coded for CUDA: nothing is autocast for tensors on the CPU
    Wrong("autocast_hard_coded_cuda", mutate(EX, (FORWARD, FORWARD.replace("device_type, dtype", '"cuda", dtype'))),
          MATCHES, diagnosis="ran outside autocast"),
    # the output cast back to float32
    Wrong("output_cast_to_float32", mutate(EX, ("        return model(inputs)\n", "        return model(inputs).float()\n")),
          MATCHES, diagnosis="no .float()"),
    # an inference-style forward: no graph
    Wrong("forward_without_grad", mutate(EX, (FORWARD, FORWARD.replace("with torch.autocast", "with torch.no_grad(), "
                                                                       "torch.autocast"))), MATCHES,
          diagnosis="no torch.no_grad()"),
    # scaler.update forgotten: the scale never moves (a second call raises)
    Wrong("no_update", mutate(EX, (UPDATE, "    pass")), LOOP,
          diagnosis="call scaler.update() after scaler.step(optimizer)"),
    # unscale_ then optimizer.step: an overflowing step is not skipped
    Wrong("optimizer_step_direct", mutate(EX, (SCALER_STEP, "    scaler.unscale_(optimizer)\n    optimizer.step()")),
          OVERFLOW, diagnosis="not optimizer.step()", diagnosed_by=LOOP),
    # optimizer.step on the scaled gradients, no scaler.step (update then raises)
    Wrong("optimizer_step_scaled", mutate(EX, (SCALER_STEP, "    optimizer.step()")), LOOP),
    # zero_grad forgotten: gradients pile up across calls (the parameters show it, and the gradients left)
    Wrong("no_zero_grad", mutate(EX, (ZERO_GRAD, "")), CLEARS, diagnosis="gradients of earlier calls were added in",
          also_fails=(LOOP,)),
    # zero_grad forgotten, the loop's own diagnosis
    Wrong("no_zero_grad_parameters", mutate(EX, (ZERO_GRAD, "")), LOOP,
          diagnosis="clear them in every call, at its start"),
    # the forward and the loss outside autocast in the training step
    Wrong("step_outside_autocast", mutate(EX, (STEP_AUTOCAST, "    loss = loss_fn(model(inputs), targets)\n")), LOOP,
          diagnosis="ran in float32"),
    # the scaled loss made but the plain one back-propagated: scaler.step divides small gradients by the scale
    Wrong("backward_unscaled", mutate(EX, (BACKWARD, "    scaler.scale(loss)\n    loss.backward()")), LOOP,
          diagnosis="without scaler.scale"),
    # no scaler.scale at all: GradScaler refuses to step
    Wrong("no_scale", mutate(EX, (BACKWARD, "    loss.backward()")), LOOP,
          diagnosis="came without scaler.scale(loss) in the same call"),
    # no loss scaling at all: each check that sees it names the scaler left unused
    Wrong("no_scaler_at_all", NO_SCALER, LOOP, diagnosis="no loss scaling at all"),
    Wrong("no_scaler_at_all_overflow", NO_SCALER, OVERFLOW, diagnosis="no loss scaling at all"),
    Wrong("no_scaler_at_all_loss", NO_SCALER, LOSS, diagnosis="no loss scaling at all"),
    # a bare GradScaler() (CUDA's) of its own, in the step or at import: disabled here, on the CPU
    Wrong("bare_grad_scaler", BARE_SCALER, OVERFLOW, diagnosis="a bare GradScaler() means CUDA"),
    Wrong("bare_grad_scaler_module", BARE_SCALER_MODULE, OVERFLOW, diagnosis="a bare GradScaler() means CUDA"),
    # a GradScaler of its own for the device, made every call
    Wrong("own_grad_scaler", OWN_SCALER, LOOP, diagnosis="the caller's never moves"),
    Wrong("own_grad_scaler_loss", OWN_SCALER, LOSS, diagnosis="the caller's never moves"),
    # the weights cast to the low precision in the training step
    Wrong("weights_cast_in_step", mutate(EX, (STEP_AUTOCAST, "    model.to(dtype)\n" + STEP_AUTOCAST)), CLEARS,
          diagnosis="the weights stay float32"),
    # the scaled loss returned
    Wrong("returns_scaled_loss", mutate(EX, (BACKWARD, "    scaled = scaler.scale(loss)\n    scaled.backward()"),
                                        (RETURN, "    return scaled.item()\n")), LOSS, diagnosis="not the scaled loss"),
    # the loss tensor returned
    Wrong("returns_tensor", mutate(EX, (RETURN, "    return loss.detach()\n")), LOSS),
]

RIGHT = [
    # keyword arguments, torch.amp.autocast, gradients zeroed rather than freed, float(loss)
    Right("keywords_and_zeros", mutate(EX, (FORWARD, "    with torch.amp.autocast(device_type=device_type, dtype=dtype):\n"
                                            "        out = model(inputs)\n    return out\n"),
                                       (ZERO_GRAD, "    optimizer.zero_grad(set_to_none=False)\n"),
                                       (RETURN, "    return float(loss.detach())\n"))),
    # explicit unscale_ before scaler.step (the gradient-clipping pattern), zero_grad at both ends
    Right("unscale_then_step", mutate(EX, (SCALER_STEP, "    scaler.unscale_(optimizer)\n" + SCALER_STEP),
                                      (STEP_AUTOCAST, "    model.zero_grad()\n" + STEP_AUTOCAST))),
    # PyTorch's AMP recipe: the gradients cleared at the start of the step, this call's left on the model after it
    Right("zero_grad_first", mutate(EX, (ZERO_GRAD, ""), (STEP_AUTOCAST, ZERO_GRAD + STEP_AUTOCAST))),
    # the same, to zeros
    Right("zero_grad_first_to_zeros", mutate(EX, (ZERO_GRAD, ""), (STEP_AUTOCAST, "    optimizer.zero_grad(set_to_none=False)\n"
                                                                  + STEP_AUTOCAST))),
    # the loss computed outside the model call's autocast block but still inside autocast
    Right("loss_in_own_block", mutate(EX, (STEP_AUTOCAST, "    with torch.autocast(inputs.device.type, dtype=dtype):\n"
                                           "        outputs = model(inputs)\n"
                                           "    with torch.autocast(inputs.device.type, dtype=dtype):\n"
                                           "        loss = loss_fn(outputs, targets)\n"))),
]
