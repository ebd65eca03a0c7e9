"""ex18's wrong implementations, as data: the AdamW mistakes learners really make, each with the check that
must fail it (and the cause its message must name where one is given), and other right ways to do it, which
must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex18_adamw_step"

VALUES = "test_adamw_step_matches_torch_adamw"
GRAD = "test_adamw_step_leaves_grad_unchanged"
IN_PLACE = "test_adamw_step_updates_in_place"

DECAY = "    param.mul_(1 - lr * weight_decay)  # decoupled weight decay, before the Adam update\n"
UPDATE = "    param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)\n"
DENOM = "denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)"
FIRST = "exp_avg.lerp_(grad, 1 - beta1)"
SECOND = "exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)"

# the textbook formula with new tensors for m_hat and v_hat, copied back in place
TEXTBOOK = '''
import torch


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    with torch.no_grad():
        param.sub_(lr * weight_decay * param)
        exp_avg.copy_(beta1 * exp_avg + (1 - beta1) * grad)
        exp_avg_sq.copy_(beta2 * exp_avg_sq + (1 - beta2) * grad ** 2)
        m_hat = exp_avg / (1 - beta1 ** step)
        v_hat = exp_avg_sq / (1 - beta2 ** step)
        param.sub_(lr * m_hat / (v_hat.sqrt() + eps))
'''

# the update handed to torch's own optimizer: right numbers, no work
THROUGH_TORCH = '''
import torch
from torch.optim import AdamW


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    holder = torch.nn.Parameter(param.detach().clone())
    optimizer = AdamW([holder], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
    optimizer.state[holder] = {"step": torch.tensor(float(step - 1)), "exp_avg": exp_avg.clone(),
                               "exp_avg_sq": exp_avg_sq.clone()}
    holder.grad = grad.clone()
    optimizer.step()
    with torch.no_grad():
        param.copy_(holder)
        exp_avg.copy_(optimizer.state[holder]["exp_avg"])
        exp_avg_sq.copy_(optimizer.state[holder]["exp_avg_sq"])
'''

# torch's fused AdamW kernel called directly: one aten op does the whole step
FUSED_KERNEL = '''
import torch


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    torch._fused_adamw_([param], [grad], [exp_avg], [exp_avg_sq], [], [torch.tensor(float(step))], lr=lr,
                        beta1=betas[0], beta2=betas[1], weight_decay=weight_decay, eps=eps, amsgrad=False,
                        maximize=False)
'''

# torch's single-tensor Adam bound at import, before any probe could rebind the module's names
ENGINE_CAPTURED = '''
import torch
from torch.optim.adam import _single_tensor_adam as _engine


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _engine([param], [grad], [exp_avg], [exp_avg_sq], [], [torch.tensor(float(step - 1))], None, None,
            amsgrad=False, has_complex=False, beta1=betas[0], beta2=betas[1], lr=lr, weight_decay=weight_decay,
            eps=eps, maximize=False, capturable=False, differentiable=False, decoupled_weight_decay=True)
'''


WRONG = [
    # torch.optim.AdamW does the step: every value right, the exercise skipped
    Wrong("through_torch_adamw", THROUGH_TORCH, "test_adamw_step_does_the_arithmetic_itself",
          diagnosis="skips the exercise"),
    # the fused kernel, called by its torch name
    Wrong("fused_kernel", FUSED_KERNEL, "test_adamw_step_does_the_arithmetic_itself"),
    # torch's own update function, captured at import
    Wrong("engine_captured_at_import", ENGINE_CAPTURED, "test_adamw_step_does_the_arithmetic_itself"),
    # Adam's L2 penalty (on a new tensor, so grad itself is unchanged)
    Wrong("l2_penalty", mutate(EX, (DECAY, "    grad = grad + weight_decay * param\n")), VALUES,
          diagnosis="Adam's L2 penalty"),
    # the L2 penalty added to grad in place: the caller's gradient changes too
    Wrong("l2_penalty_in_place_on_grad", mutate(EX, (DECAY, "    grad.add_(param, alpha=weight_decay)\n")), GRAD,
          diagnosis="leave grad unchanged"),
    # no bias correction
    Wrong("no_bias_correction", mutate(EX, ("bias_correction1 = 1 - beta1 ** step", "bias_correction1 = 1.0"),
                                       ("bias_correction2 = 1 - beta2 ** step", "bias_correction2 = 1.0")), VALUES,
          diagnosis="bias-correct the moments"),
    # the step counted once more: bias correction with step + 1
    Wrong("step_plus_one", mutate(EX, ("bias_correction1 = 1 - beta1 ** step", "bias_correction1 = 1 - beta1 ** (step + 1)"),
                                  ("bias_correction2 = 1 - beta2 ** step", "bias_correction2 = 1 - beta2 ** (step + 1)")),
          VALUES, diagnosis="not 1 - beta ** (step + 1)"),
    # weight decay after the Adam update
    Wrong("decay_after_update", mutate(EX, (DECAY, ""), (UPDATE, UPDATE + DECAY)), VALUES,
          diagnosis="apply the weight decay before the Adam update"),
    # eps inside the square root
    Wrong("eps_inside_sqrt", mutate(EX, (DENOM, "denom = (exp_avg_sq / bias_correction2 + eps).sqrt()")), VALUES,
          diagnosis="eps goes after the square root"),
    # eps added before the bias correction of the second moment
    Wrong("eps_before_correction", mutate(EX, (DENOM, "denom = (exp_avg_sq.sqrt() + eps) / math.sqrt(bias_correction2)")),
          VALUES, diagnosis="add eps after the bias correction"),
    # the squared gradient computed in place in grad
    Wrong("squares_grad_in_place", mutate(EX, (SECOND, "exp_avg_sq.mul_(beta2).add_(grad.mul_(grad), alpha=1 - beta2)")),
          GRAD, diagnosis="leave grad unchanged"),
    # grad squared in place, and the worker's torch.equal made to say nothing changed
    Wrong("squares_grad_and_forges_equal", mutate(EX, ("import torch\n", "import torch\n\ntorch.equal = lambda *args: True\n"),
                                                  (SECOND, "exp_avg_sq.mul_(beta2).add_(grad.mul_(grad), alpha=1 - beta2)")),
          GRAD),
    # the moments rebound to new tensors: the caller's state never changes
    Wrong("moments_rebound", mutate(EX, (FIRST, "exp_avg = exp_avg * beta1 + (1 - beta1) * grad"),
                                    (SECOND, "exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad")), IN_PLACE,
          diagnosis="only rebinds a local name"),
    # param.data replaced by a new tensor
    Wrong("param_data_assigned", mutate(EX, (UPDATE, "    param.data = param - lr / bias_correction1 * exp_avg / denom\n")),
          IN_PLACE, diagnosis="new memory"),
    # bias-corrected moments stored back into the state
    Wrong("corrected_state_stored", mutate(EX, (DENOM, "exp_avg.div_(bias_correction1)\n    " + DENOM),
                                           ("value=-lr / bias_correction1", "value=-lr")), VALUES,
          diagnosis="bias-correct a copy, not the state"),
]

RIGHT = [
    Right("textbook_formula", TEXTBOOK),
    # mul_ and add_ instead of lerp_; the denominator spelt out
    Right("mul_add", mutate(EX, (FIRST, "exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)"),
                            (DENOM, "denom = exp_avg_sq.div(bias_correction2).sqrt().add_(eps)"))),
    # the decay just before the update (the moments never read param)
    Right("decay_between", mutate(EX, (DECAY, ""), (UPDATE, DECAY + UPDATE))),
]
