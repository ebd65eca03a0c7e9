"""A pytest plugin (`-p tests.kit.fake_mps`) for a machine without Apple's GPU: `--device all` then finds mps as
if it were there, and no CUDA, so a collection (`--collect-only`) shows which checks each device would run.
Nothing may run on the pretended device: collect only."""

from grader import devices

devices.mps_present = lambda: True
devices.cuda_present = lambda: False
