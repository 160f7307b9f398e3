"""Megatron-LM's OptimizerParamScheduler.get_lr and get_wd
(megatron/core/optimizer_param_scheduler.py), transcribed, with the steps counted in samples as
megatron/training/training.py's get_optimizer_param_scheduler makes them (iterations x the
global batch size). Prints the tables tests/test_cli.c compares mg_lr_at and mg_wd_at with:
python3 tests/oracle/lr_schedule.py"""
import math


def get_lr(n, init_lr, max_lr, min_lr, warmup, decay, style, wsd=None, wsd_style=None):
    if warmup > 0 and n <= warmup:
        return init_lr + (max_lr - init_lr) * float(n) / float(warmup)
    if style == 'constant':
        return max_lr
    if n > decay:
        return min_lr
    if style == 'inverse-square-root':
        warmup = max(warmup, 1)
        n = max(n, 1)
        return max(min_lr, max_lr * warmup**0.5 / (n**0.5))
    ratio = float(n - warmup) / float(decay - warmup)
    assert 0.0 <= ratio <= 1.0
    delta = max_lr - min_lr
    if style == 'linear':
        coeff = 1.0 - ratio
    elif style == 'cosine':
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    elif style == 'WSD':
        anneal = decay - wsd
        if n <= anneal:
            coeff = 1.0
        else:
            r = float(n - anneal) / float(wsd)
            coeff = {'linear': 1.0 - r, 'cosine': 0.5 * (math.cos(math.pi * r) + 1.0),
                     'exponential': 2.0 * math.pow(0.5, r) - 1.0,
                     'minus_sqrt': 1.0 - math.sqrt(r)}[wsd_style]
    return min_lr + coeff * delta


def get_wd(n, start, end, incr, style):
    if n > incr:
        return end
    if style == 'constant':
        assert start == end
        return end
    r = float(n) / float(incr)
    coeff = r if style == 'linear' else 0.5 * (math.cos(math.pi * (1 - r)) + 1.0)
    return start + coeff * (end - start)


def table(name, values):
    print('    /* %s */' % name)
    print('    {' + ', '.join(repr(v) for v in values) + '},')


GB = 4  # --micro-batch-size 4 on one rank: 4 samples an iteration
K = range(13)  # after 0 ... 12 updates (--train-iters 12, decay 10: two past its end)
for warm in (3, 0):
    table('inverse-square-root, warm-up %d' % warm,
          [get_lr(k * GB, 1e-4, 1e-3, 5e-5, warm * GB, 10 * GB, 'inverse-square-root') for k in K])
for s in ('exponential', 'linear', 'cosine', 'minus_sqrt'):
    table('WSD, warm-up 2, annealing 4 (%s)' % s,
          [get_lr(k * GB, 1e-4, 1e-3, 5e-5, 2 * GB, 10 * GB, 'WSD', 4 * GB, s) for k in K])
for s in ('linear', 'cosine'):
    table('weight decay 0.01 -> 0.1 over 12 iterations (%s)' % s,
          [get_wd(k * GB, 0.01, 0.1, 12 * GB, s) for k in range(15)])
# Sample-based training (--train-samples 50 with --micro-batch-size 4: 12 iterations of 4
# samples): the lengths in samples, none a multiple of the batch.
for style in ('cosine', 'linear'):
    table('samples: warm-up 9, decay 41 (%s)' % style,
          [get_lr(k * GB, 1e-4, 1e-3, 5e-5, 9, 41, style) for k in K])
table('samples: warm-up 9, decay 41, WSD annealing 17 (cosine)',
      [get_lr(k * GB, 1e-4, 1e-3, 5e-5, 9, 41, 'WSD', 17, 'cosine') for k in K])
table('samples: warm-up 9, decay 41 (inverse-square-root)',
      [get_lr(k * GB, 1e-4, 1e-3, 5e-5, 9, 41, 'inverse-square-root') for k in K])
table('samples: warm-up 0.25 x 41 (cosine)',
      [get_lr(k * GB, 1e-4, 1e-3, 5e-5, 0.25 * 41, 41, 'cosine') for k in K])
table('samples: weight decay 0.01 -> 0.1 over --train-samples 50 (linear)',
      [get_wd(k * GB, 0.01, 0.1, 50, 'linear') for k in range(15)])
