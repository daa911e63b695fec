#!/usr/bin/env python3
"""Writes PyTorch's own trajectories, in float64, for tandem's torch replay test (tests/nn/torch_replay_test.cpp).

    python3 tests/nn/torch_replay/make_replay.py replay.json
    TANDEM_TORCH_REPLAY=replay.json ./build/bin/tandem_nn_tests --gtest_filter='TorchReplay*'

The file holds: Adam and AdamW trajectories (parameter values after every step) on a fixed quadratic problem, with
and without weight decay and amsgrad, over parameter groups; the learning rates that StepLR, CosineAnnealingLR,
LinearLR and SequentialLR set at each epoch; clip_grad_norm_'s totals and clipped gradients; and cross_entropy's values
and gradients (with class weights, ignore_index, label smoothing, every reduction, class-probability targets) for fixed
logits, a row of them near 1e4. Only torch is needed.
"""
import json
import sys

import torch

torch.set_default_dtype(torch.float64)

# loss = sum(0.5 * scale * (p - target)^2) over two parameters, so grad = scale * (p - target).
PARAMETERS = [
    {"shape": [2, 3], "start": [1.0, -2.0, 0.5, 3.0, -1.5, 0.25], "target": [4.0, -6.0, -3.0, 7.5, 2.5, -4.0],
     "scale": [1.0, 0.5, 2.0, 0.25, 4.0, 1.5]},
    {"shape": [3], "start": [0.5, -0.75, 2.0], "target": [-3.0, 3.5, 6.0], "scale": [2.0, 1.0, 0.5]},
]
STEPS = 30

OPTIMIZERS = [
    {"name": "adam_defaults", "class": "Adam", "groups": [{"params": [0, 1]}]},
    {"name": "adam_l2_amsgrad", "class": "Adam",
     "groups": [{"params": [0, 1], "lr": 0.05, "betas": [0.8, 0.95], "weight_decay": 0.3, "amsgrad": True}]},
    {"name": "adam_small_beta1", "class": "Adam", "groups": [{"params": [0, 1], "lr": 0.05, "betas": [0.3, 0.9]}]},
    {"name": "adamw_defaults", "class": "AdamW", "groups": [{"params": [0, 1]}]},
    {"name": "adamw_groups", "class": "AdamW",
     "groups": [{"params": [0], "lr": 0.05, "weight_decay": 0.5},
                {"params": [1], "lr": 0.02, "eps": 0.1, "weight_decay": 0.0, "amsgrad": True}]},
]
OPTION_DEFAULTS = {
    "Adam": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False},
    "AdamW": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-2, "amsgrad": False},
}

BASE_LRS = [0.1, 0.4]
EPOCHS = 25
SCHEDULERS = [
    {"name": "step", "kind": "StepLR", "step_size": 3, "gamma": 0.5},
    {"name": "cosine", "kind": "CosineAnnealingLR", "t_max": 10, "eta_min": 0.01},
    {"name": "linear", "kind": "LinearLR", "start_factor": 0.25, "end_factor": 1.0, "total_iters": 4},
    {"name": "warmup_cosine_step", "kind": "SequentialLR", "milestones": [3, 12],
     "schedulers": [{"kind": "LinearLR", "start_factor": 0.1, "end_factor": 1.0, "total_iters": 3},
                    {"kind": "CosineAnnealingLR", "t_max": 9, "eta_min": 0.0},
                    {"kind": "StepLR", "step_size": 2, "gamma": 0.5}]},
]

CLIPS = [
    {"norm_type": 2.0, "max_norm": 3.0},
    {"norm_type": 1.0, "max_norm": 5.0},
    {"norm_type": 3.0, "max_norm": 100.0},
    {"norm_type": "inf", "max_norm": 0.5},
]
CLIP_GRADS = [[3.0, -4.0, 0.5, 2.0, -1.25, 7.0], [12.0, -0.75, 1.5]]


# Logits exactly representable in float32, so that tandem starts from the same numbers; the last row is near 1e4.
LOGITS = [[0.5, -1.25, 2.0, 0.75, -0.5],
          [1.5, 0.25, -2.0, 3.0, 0.125],
          [-0.75, -1.5, 0.0, 0.5, 2.25],
          [2.5, 2.5, -1.0, 0.0, 1.0],
          [-3.0, 0.375, 1.25, -0.25, 0.625],
          [10000.5, -9999.25, 9998.0, 4096.0, -1.5]]
TARGETS = [3, 0, 4, 1, 2, 2]
IGNORED_TARGETS = [3, -100, 4, 1, -100, 0]
PROBABILITIES = [[0.1, 0.2, 0.3, 0.25, 0.15], [0.0, 1.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.5],
                 [0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.75, 0.25, 0.0], [0.125, 0.0, 0.625, 0.25, 0.0]]
CLASS_WEIGHT = [0.5, 2.0, 1.0, 0.25, 1.5]
COTANGENT = [1.0, -0.5, 2.0, 0.25, 1.5, -1.0]  # the gradient of reduction "none"'s row losses in backward
CROSS_ENTROPY = [
    {"name": "defaults", "targets": TARGETS},
    {"name": "sum", "targets": TARGETS, "reduction": "sum"},
    {"name": "none", "targets": TARGETS, "reduction": "none"},
    {"name": "ignored_rows", "targets": IGNORED_TARGETS},
    {"name": "ignore_index_1", "targets": TARGETS, "ignore_index": 1, "reduction": "none"},
    {"name": "class_weights", "targets": IGNORED_TARGETS, "weight": CLASS_WEIGHT},
    {"name": "smoothing", "targets": TARGETS, "label_smoothing": 0.2},
    {"name": "smoothing_weights_ignored", "targets": IGNORED_TARGETS, "weight": CLASS_WEIGHT, "label_smoothing": 0.3},
    {"name": "smoothing_weights_ignored_sum", "targets": IGNORED_TARGETS, "weight": CLASS_WEIGHT,
     "label_smoothing": 0.3, "reduction": "sum"},
    {"name": "smoothing_weights_ignore_index_2_none", "targets": TARGETS, "weight": CLASS_WEIGHT, "ignore_index": 2,
     "label_smoothing": 0.1, "reduction": "none"},
    {"name": "probabilities", "targets": PROBABILITIES},
    {"name": "probabilities_smoothing_weights", "targets": PROBABILITIES, "weight": CLASS_WEIGHT,
     "label_smoothing": 0.25, "reduction": "none"},
]
CROSS_ENTROPY_DEFAULTS = {"weight": None, "ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0}


def cross_entropy(case):
    case = dict(CROSS_ENTROPY_DEFAULTS, **case)  # the file states every option
    logits = torch.tensor(LOGITS, requires_grad=True)
    probabilities = isinstance(case["targets"][0], list)
    target = torch.tensor(case["targets"]) if probabilities else torch.tensor(case["targets"], dtype=torch.int64)
    weight = None if case["weight"] is None else torch.tensor(case["weight"])
    loss = torch.nn.functional.cross_entropy(logits, target, weight=weight, ignore_index=case["ignore_index"],
                                             reduction=case["reduction"], label_smoothing=case["label_smoothing"])
    loss.backward(torch.tensor(COTANGENT) if case["reduction"] == "none" else None)
    return dict(case, loss=loss.tolist(), grad=logits.grad.tolist())


def make_parameters():
    return [torch.tensor(p["start"]).reshape(p["shape"]).requires_grad_(True) for p in PARAMETERS]


def loss_of(params):
    total = 0.0
    for p, spec in zip(params, PARAMETERS):
        target = torch.tensor(spec["target"]).reshape(spec["shape"])
        scale = torch.tensor(spec["scale"]).reshape(spec["shape"])
        total = total + (0.5 * scale * (p - target) ** 2).sum()
    return total


def trajectory(case):
    params = make_parameters()
    groups = []
    for group in case["groups"]:
        options = dict(OPTION_DEFAULTS[case["class"]])
        options.update({k: v for k, v in group.items() if k != "params"})
        group.update(options)  # the file states every option
        groups.append({"params": [params[i] for i in group["params"]], **options,
                       "betas": tuple(options["betas"])})
    optimizer = getattr(torch.optim, case["class"])(groups, foreach=False)
    steps = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss_of(params).backward()
        optimizer.step()
        steps.append([p.detach().flatten().tolist() for p in params])
    return dict(case, trajectory=steps)


def make_scheduler(optimizer, spec):
    kind = spec["kind"]
    if kind == "StepLR":
        return torch.optim.lr_scheduler.StepLR(optimizer, spec["step_size"], spec["gamma"])
    if kind == "CosineAnnealingLR":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, spec["t_max"], spec["eta_min"])
    if kind == "LinearLR":
        return torch.optim.lr_scheduler.LinearLR(optimizer, spec["start_factor"], spec["end_factor"],
                                                 spec["total_iters"])
    children = [make_scheduler(optimizer, child) for child in spec["schedulers"]]
    return torch.optim.lr_scheduler.SequentialLR(optimizer, children, spec["milestones"])


def schedule(spec):
    params = [torch.zeros(1, requires_grad=True) for _ in BASE_LRS]
    optimizer = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, BASE_LRS)])
    scheduler = make_scheduler(optimizer, spec)
    lrs = []
    for _ in range(EPOCHS):
        lrs.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    return dict(spec, base_lrs=BASE_LRS, lrs=lrs)


def clip(spec):
    params = [torch.zeros(len(g), requires_grad=True) for g in CLIP_GRADS]
    for p, g in zip(params, CLIP_GRADS):
        p.grad = torch.tensor(g)
    norm_type = float(spec["norm_type"])
    total = torch.nn.utils.clip_grad_norm_(params, spec["max_norm"], norm_type)
    return dict(spec, grads=CLIP_GRADS, total=total.item(), clipped=[p.grad.tolist() for p in params])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_replay.py OUTPUT.json")
    replay = {
        "torch_version": torch.__version__,
        "parameters": PARAMETERS,
        "optimizers": [trajectory(case) for case in OPTIMIZERS],
        "schedulers": [schedule(spec) for spec in SCHEDULERS],
        "clips": [clip(spec) for spec in CLIPS],
        "cross_entropy": {"logits": LOGITS, "cotangent": COTANGENT,
                          "cases": [cross_entropy(case) for case in CROSS_ENTROPY]},
    }
    with open(sys.argv[1], "w") as out:
        json.dump(replay, out, indent=1)


if __name__ == "__main__":
    main()
