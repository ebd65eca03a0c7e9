"""ex22's wrong implementations, as data: the mistakes learners make when they make the Trainer efficient through its
arguments, each with the check that must fail it (and the cause its message must name), and other right ways to do
it, which must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex22_efficient_trainer"

TRAINING = "test_the_trainer_trains_as_the_contract_arguments"
ACCUMULATION = "test_accumulation_steps_once_every_accumulation_steps_micro_batches"
CHECKPOINTING = "test_every_layer_is_recomputed_in_the_backward_pass"
PRECISION = "test_the_forward_runs_under_bfloat16_autocast"
OPTIMIZER = "test_the_optimizer_is_adafactor_with_a_factored_second_moment"

BATCH = "        per_device_train_batch_size=batch_size,\n"
ACCUMULATE = "        gradient_accumulation_steps=accumulation_steps,\n"
CHECKPOINT = "        gradient_checkpointing=True,\n"
BF16 = "        bf16=True,\n"
OPTIM = '        optim="adafactor",\n'
LEARNING_RATE = "        learning_rate=learning_rate,\n"
USE_CPU = "        use_cpu=use_cpu,\n"
TRAINER = "return Trainer(model=model, args=args, train_dataset=train_dataset)"

# Adafactor built by hand, as optim="adafactor" builds it, and given to the Trainer; the lesson's other spellings:
# the enum for the optimizer's name, checkpointing's keyword arguments, the epochs as a float
BY_HAND = '''
from transformers import Trainer, TrainingArguments
from transformers.optimization import Adafactor
from transformers.training_args import OptimizerNames


def efficient_training_arguments(output_dir, batch_size, accumulation_steps, learning_rate, num_epochs, seed,
                                 use_cpu=False):
    return TrainingArguments(output_dir, per_device_train_batch_size=batch_size,
                             gradient_accumulation_steps=accumulation_steps, gradient_checkpointing=True,
                             gradient_checkpointing_kwargs={"use_reentrant": False}, bf16=True,
                             optim=OptimizerNames.ADAFACTOR, learning_rate=learning_rate,
                             num_train_epochs=float(num_epochs), seed=seed, use_cpu=use_cpu, save_strategy="no",
                             logging_strategy="no")


def build_efficient_trainer(model, args, train_dataset):
    optimizer = Adafactor(model.parameters(), lr=args.learning_rate, scale_parameter=False, relative_step=False,
                          warmup_init=False)
    return Trainer(model=model, args=args, train_dataset=train_dataset, optimizers=(optimizer, None))
'''

WRONG = [
    # the learning rate left at the default (5e-5): everything efficient, the model trained otherwise
    Wrong("learning_rate_default", mutate(EX, (LEARNING_RATE, "")), TRAINING,
          diagnosis="pass learning_rate, num_epochs and seed through"),
    # the transformers 4 name an older tutorial passes, gone in transformers 5
    Wrong("evaluation_strategy", mutate(EX, (BF16, BF16 + '        evaluation_strategy="no",\n')), TRAINING,
          diagnosis="renamed evaluation_strategy to eval_strategy"),
    # bf16 without use_cpu: refused where there is no bf16 GPU (this CPU)
    Wrong("use_cpu_not_passed", mutate(EX, (USE_CPU, "")), TRAINING, diagnosis="pass use_cpu through"),
    # accumulation asked for nowhere: one optimizer step per micro-batch, the steps not divided
    Wrong("accumulation_missing", mutate(EX, (ACCUMULATE, "")), ACCUMULATION, diagnosis="accumulation is missing"),
    # the large batch in one forward pass: as many rows a step, none of accumulation's memory saved
    Wrong("batch_multiplied", mutate(EX, (BATCH, "        per_device_train_batch_size=batch_size * accumulation_steps,\n"),
                                     (ACCUMULATE, "")), ACCUMULATION,
          diagnosis="per_device_train_batch_size is the micro-batch"),
    # checkpointing left off: the same weights, every activation kept
    Wrong("checkpointing_missing", mutate(EX, (CHECKPOINT, "")), CHECKPOINTING,
          diagnosis="gradient_checkpointing=True"),
    # checkpointing turned on in the builder (as transformers' guide does for a loop of its own with Accelerate), the
    # arguments without it: this Trainer checkpoints, any other given these arguments does not
    Wrong("checkpointing_in_the_builder", mutate(EX, (CHECKPOINT, ""), (TRAINER, "model.gradient_checkpointing_enable()\n"
                                                                               "    " + TRAINER)),
          CHECKPOINTING, diagnosis="the contract puts checkpointing in the arguments", passes=(TRAINING,)),
    # float16 instead of bfloat16: on a CPU no autocast at all (float32), on a GPU float16
    Wrong("fp16_instead_of_bf16", mutate(EX, (BF16, "        fp16=True,\n")), PRECISION,
          diagnosis="fp16=True on a CPU does not autocast"),
    # no mixed precision at all
    Wrong("bf16_missing", mutate(EX, (BF16, "")), PRECISION, diagnosis="bf16=True"),
    # the weights themselves in bfloat16: autocast on, but no float32 master weights
    Wrong("bf16_weights", mutate(EX, (TRAINER, "return Trainer(model=model.to(torch.bfloat16), args=args, "
                                               "train_dataset=train_dataset)"),
                                 ("from transformers import", "import torch\nfrom transformers import")), PRECISION,
          diagnosis="keep the weights float32"),
    # AdamW, the memory-heavy optimizer: two full moments
    Wrong("adamw_torch", mutate(EX, (OPTIM, '        optim="adamw_torch",\n')), OPTIMIZER,
          diagnosis='optim="adafactor"'),
    # Adafactor with a first moment (beta1): a full exp_avg per parameter, the memory Adafactor saves spent again
    Wrong("adafactor_with_beta1", mutate(EX, (TRAINER, "return Trainer(model=model, args=args, train_dataset=train_dataset, "
                                                       "optimizers=(Adafactor(model.parameters(), lr=args.learning_rate, "
                                                       "beta1=0.9, scale_parameter=False, relative_step=False), None))"),
                                         ("from transformers import", "from transformers.optimization import Adafactor\n"
                                                                      "from transformers import")),
          OPTIMIZER, diagnosis="without a first moment"),
    # Adafactor handed over with a fixed learning rate: the arguments right, the optimizer deaf to them
    Wrong("adafactor_fixed_lr", mutate(EX, (TRAINER, "return Trainer(model=model, args=args, train_dataset=train_dataset, "
                                                     "optimizers=(Adafactor(model.parameters(), lr=1e-3, "
                                                     "scale_parameter=False, relative_step=False), None))"),
                                       ("from transformers import", "from transformers.optimization import Adafactor\n"
                                                                    "from transformers import")),
          TRAINING, diagnosis="has a fixed lr=0.001, not the arguments' learning_rate", passes=(OPTIMIZER,)),
    # Adafactor with relative steps, as its documentation suggests for training from scratch: its own step size
    Wrong("adafactor_relative_step", mutate(EX, (TRAINER, "optimizer = Adafactor(model.parameters(), scale_parameter=True, "
                                                          "relative_step=True, warmup_init=True, lr=None)\n"
                                                          "    return Trainer(model=model, args=args, train_dataset="
                                                          "train_dataset, optimizers=(optimizer, "
                                                          "AdafactorSchedule(optimizer)))"),
                                            ("from transformers import", "from transformers.optimization import "
                                                                         "Adafactor, AdafactorSchedule\n"
                                                                         "from transformers import")),
          TRAINING, diagnosis="takes relative steps (relative_step=True)", passes=(OPTIMIZER,)),
]

# other right ways to do it: they must score full marks
RIGHT = [
    Right("adafactor_by_hand", BY_HAND),
]
