"""What the PyTorch benchmarks (torch_train_step.py, torch_ddp_bench.py) share: the workloads' models, the training
step and its timing.

Nothing here imports torch when the module loads: a caller reports a missing torch itself.
"""
import statistics
import time


def seed_net():
    """Linear(10, 20) -> Linear(20, 1)."""
    from torch import nn
    return nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 1))


def mlp(width):
    """4 x Linear(width, width) with ReLU between."""
    from torch import nn
    layers = []
    for layer in range(4):
        if layer > 0:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(width, width))
    return nn.Sequential(*layers)


def wide_mlp():
    """4 x Linear(4096, 4096) with ReLU between."""
    return mlp(4096)


def sgd_mse_step(run, parameters, x, y, autocast_dtype=None):
    """One training step as a function: MSE of run(x) against y, backward, SGD (lr 1e-4, momentum 0.9) on
    `parameters`. With autocast_dtype (torch.bfloat16), forward and loss run under torch.autocast("cuda") with it,
    and backward outside, as PyTorch's mixed-precision recipe does."""
    import contextlib
    import torch
    optimizer = torch.optim.SGD(parameters, lr=1e-4, momentum=0.9)

    def autocast():
        if autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=autocast_dtype)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = torch.nn.functional.mse_loss(run(x), y)
        loss.backward()
        optimizer.step()

    return step


def median_step_ms(step, warmup, steps, synchronize, start=lambda: None):
    """Runs `warmup` steps, then `steps` timed ones, and returns their median in milliseconds. A timed step runs from
    synchronize() and start() (e.g. a barrier) to synchronize() after it, by the host wall clock."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        synchronize()
        start()
        begin = time.perf_counter()
        step()
        synchronize()
        times.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(times)
