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


def median_step_ms(step, warmup, steps, synchronize, start=lambda: None, loop=1):
    """Runs `warmup` steps, then `steps` timed samples, and returns their median in milliseconds per step. A sample
    runs from synchronize() and start() (e.g. a barrier) to synchronize() after `loop` back-to-back steps, by the host
    wall clock, divided by `loop`."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        synchronize()
        start()
        begin = time.perf_counter()
        for _ in range(loop):
            step()
        synchronize()
        times.append((time.perf_counter() - begin) * 1e3 / loop)
    return statistics.median(times)


def graphed_sgd_mse_step(model, x, y):
    """sgd_mse_step captured whole (forward, loss, backward, SGD) as one CUDA graph on x's GPU, as PyTorch's CUDA
    Graphs notes show for a whole network: a few eager steps on a side stream first, then the capture into static
    inputs; the returned function copies x and y into them and replays."""
    import torch
    static_x = x.clone()
    static_y = y.clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def eager_step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(static_x), static_y).backward()
        optimizer.step()

    side = torch.cuda.Stream(device=x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(side):
        for _ in range(3):
            eager_step()
    torch.cuda.current_stream(x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        torch.nn.functional.mse_loss(model(static_x), static_y).backward()
        optimizer.step()

    def step():
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    return step
