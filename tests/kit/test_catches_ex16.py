"""ex16's checks catch the mixed-precision mistakes learners really make, and let right variants pass."""

from tests.kit.harness import assert_caught, assert_diagnosed, assert_full_marks, grade_submissions, mutate

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

WRONG = {
    # the forward pass without autocast: float32 output
    "forward_outside_autocast": (mutate(EX, (FORWARD, "    return model(inputs)\n")), MATCHES),
    # autocast without dtype: the device's default (bfloat16 on the CPU)
    "autocast_default_dtype": (mutate(EX, (FORWARD, FORWARD.replace(", dtype=dtype", ""))), MATCHES),
    # the model cast to the low precision instead of autocast
    "model_cast_to_dtype": (mutate(EX, (FORWARD, "    model.to(dtype)\n    return model(inputs.to(dtype))\n")), WEIGHTS),
    # autocast hard-coded for CUDA: nothing is autocast for tensors on the CPU
    "autocast_hard_coded_cuda": (mutate(EX, (FORWARD, FORWARD.replace("device_type, dtype", '"cuda", dtype'))), MATCHES),
    # the output cast back to float32
    "output_cast_to_float32": (mutate(EX, ("        return model(inputs)\n", "        return model(inputs).float()\n")),
                               MATCHES),
    # an inference-style forward: no graph
    "forward_without_grad": (mutate(EX, (FORWARD, FORWARD.replace("with torch.autocast", "with torch.no_grad(), "
                                                                  "torch.autocast"))), MATCHES),
    # scaler.update forgotten: the scale never moves (a second call raises)
    "no_update": (mutate(EX, (UPDATE, "    pass")), LOOP),
    # unscale_ then optimizer.step: an overflowing step is not skipped
    "optimizer_step_direct": (mutate(EX, (SCALER_STEP, "    scaler.unscale_(optimizer)\n    optimizer.step()")), OVERFLOW),
    # optimizer.step on the scaled gradients, no scaler.step (update then raises)
    "optimizer_step_scaled": (mutate(EX, (SCALER_STEP, "    optimizer.step()")), LOOP),
    # zero_grad forgotten: gradients pile up across calls
    "no_zero_grad": (mutate(EX, (ZERO_GRAD, "")), CLEARS),
    # zero_grad at the start instead of the end: gradients left after the call
    "zero_grad_first": (mutate(EX, (ZERO_GRAD, ""), (STEP_AUTOCAST, ZERO_GRAD + STEP_AUTOCAST)), CLEARS),
    # the forward and the loss outside autocast in the training step
    "step_outside_autocast": (mutate(EX, (STEP_AUTOCAST, "    loss = loss_fn(model(inputs), targets)\n")), LOOP),
    # the scaled loss made but the plain one back-propagated: scaler.step divides small gradients by the scale
    "backward_unscaled": (mutate(EX, (BACKWARD, "    scaler.scale(loss)\n    loss.backward()")), LOOP),
    # no scaler.scale at all: GradScaler refuses to step
    "no_scale": (mutate(EX, (BACKWARD, "    loss.backward()")), LOOP),
    # the weights cast to the low precision in the training step
    "weights_cast_in_step": (mutate(EX, (STEP_AUTOCAST, "    model.to(dtype)\n" + STEP_AUTOCAST)), CLEARS),
    # the scaled loss returned
    "returns_scaled_loss": (mutate(EX, (BACKWARD, "    scaled = scaler.scale(loss)\n    scaled.backward()"),
                                   (RETURN, "    return scaled.item()\n")), LOSS),
    # the loss tensor returned
    "returns_tensor": (mutate(EX, (RETURN, "    return loss.detach()\n")), LOSS),
}

DIAGNOSED = {
    "forward_outside_autocast": (MATCHES, "ran outside autocast"),
    "autocast_default_dtype": (MATCHES, "pass dtype=dtype"),
    "autocast_hard_coded_cuda": (MATCHES, "ran outside autocast"),
    "model_cast_to_dtype": (WEIGHTS, "do not call model.half()"),
    "output_cast_to_float32": (MATCHES, "no .float()"),
    "forward_without_grad": (MATCHES, "no torch.no_grad()"),
    "no_update": (LOOP, "call scaler.update() after scaler.step(optimizer)"),
    "optimizer_step_direct": (LOOP, "not optimizer.step()"),
    "no_zero_grad": (LOOP, "gradients of earlier calls were added in"),
    "step_outside_autocast": (LOOP, "ran in float32"),
    "backward_unscaled": (LOOP, "without scaler.scale"),
    "weights_cast_in_step": (CLEARS, "the weights stay float32"),
    "returns_scaled_loss": (LOSS, "not the scaled loss"),
}

RIGHT = {
    # keyword arguments, torch.amp.autocast, gradients zeroed rather than freed, float(loss)
    "keywords_and_zeros": mutate(EX, (FORWARD, "    with torch.amp.autocast(device_type=device_type, dtype=dtype):\n"
                                      "        out = model(inputs)\n    return out\n"),
                                 (ZERO_GRAD, "    optimizer.zero_grad(set_to_none=False)\n"),
                                 (RETURN, "    return float(loss.detach())\n")),
    # explicit unscale_ before scaler.step (the gradient-clipping pattern), zero_grad at both ends
    "unscale_then_step": mutate(EX, (SCALER_STEP, "    scaler.unscale_(optimizer)\n" + SCALER_STEP),
                                (STEP_AUTOCAST, "    model.zero_grad()\n" + STEP_AUTOCAST)),
    # the loss computed outside the model call's autocast block but still inside autocast
    "loss_in_own_block": mutate(EX, (STEP_AUTOCAST, "    with torch.autocast(inputs.device.type, dtype=dtype):\n"
                                     "        outputs = model(inputs)\n"
                                     "    with torch.autocast(inputs.device.type, dtype=dtype):\n"
                                     "        loss = loss_fn(outputs, targets)\n")),
}


def test_wrong_mixed_precision_is_caught_and_right_variants_pass(tmp_path):
    sources = {name: source for name, (source, _) in WRONG.items()}
    sources.update(RIGHT)
    results = grade_submissions(tmp_path, EX, sources)
    assert_caught(results, {name: check for name, (_, check) in WRONG.items()})
    assert_diagnosed(results, DIAGNOSED)
    assert_full_marks(results, RIGHT)
