"""tower against torchvision on torchvision's own weights (no download: its random initialization,
seeded, with batch-norm statistics and affine parameters drawn at random so that they matter).

For each model, saved with safetensors.torch.save_file(model.state_dict()):
  1. eval-mode logits of 64 images: `tower eval --model M --checkpoint w.safetensors` against
     model.eval()(x);
  2. one SGD momentum step in training mode on the same 64 images: `tower train --init_from` a
     checkpoint after one step against torch.optim.SGD, every parameter and batch-norm statistic
     (MobileNetV2 with its dropout off on both sides, `--dropout 0`: the frameworks draw other
     masks);
  3. `--freeze backbone`: after 3 steps every frozen tensor is bitwise the file's.
The names are mapped here on their own (not with tower's table), so that a mistake in either shows.

Usage: torchvision_compat.py TOWER_BINARY WORK_DIR [MODEL...]; exit status 1 on a difference.
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision
from safetensors.numpy import load_file
from safetensors.torch import save_file

RTOL = ATOL = 1e-4
N = 64
SIZE = 64  # pixels: the architectures work on any size from 32 up; this keeps CPU time short
LR, MOMENTUM = 0.01, 0.9
DECAY = {"resnet18": 1e-4, "resnet34": 1e-4, "resnet50": 1e-4, "mobilenet_v2": 4e-5}


def tower_name_resnet(key):
    """torchvision ResNet key -> tower variable (or None), and whether it is transposed."""
    parts = key.split(".")
    leaf = {"weight": None, "bias": "biases", "running_mean": "moving_mean",
            "running_var": "moving_variance"}.get(parts[-1], "x")
    if leaf == "x":
        return None, False
    if parts[0] == "fc":
        return ("fc/weights" if parts[1] == "weight" else "fc/biases"), parts[1] == "weight"
    bn_leaf = {"weight": "gamma", "bias": "beta"}.get(parts[-1], leaf)
    if parts[0] == "conv1":
        return "conv1/weights", False
    if parts[0] == "bn1":
        return "conv1/" + bn_leaf, False
    block = f"{parts[0]}/{parts[1]}"
    if parts[2] == "downsample":
        return (f"{block}/shortcut/weights" if parts[3] == "0" else
                f"{block}/shortcut/{bn_leaf}"), False
    if parts[2].startswith("conv"):
        return f"{block}/{parts[2]}/weights", False
    return f"{block}/conv{parts[2][2:]}/{bn_leaf}", False


def tower_name_mobilenet(key):
    parts = key.split(".")
    last = parts[-1]
    if last == "num_batches_tracked":
        return None, False
    bn_leaf = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
               "running_var": "moving_variance"}[last]
    if parts[0] == "classifier":
        return ("classifier/weights" if last == "weight" else "classifier/biases"), last == "weight"
    i = int(parts[1])
    if i in (0, 18):
        return (f"features/{i}/weights" if parts[2] == "0" else f"features/{i}/{bn_leaf}"), False
    convs = ["depthwise", "project"] if i == 1 else ["expand", "depthwise", "project"]
    k = int(parts[3])
    if len(parts) == 6:  # conv.K.{0,1}.leaf: a conv with its batch norm (and ReLU6)
        name, is_bn = convs[k], parts[4] == "1"
    else:  # conv.K.leaf: the projection and its batch norm
        name, is_bn = "project", k == len(convs)
    return (f"features/{i}/{name}/{bn_leaf}" if is_bn else f"features/{i}/{name}/weights"), False


def tower_name(model, key):
    return (tower_name_mobilenet if model == "mobilenet_v2" else tower_name_resnet)(key)


def run(args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def randomize_batch_norms(model):
    """Statistics and affine parameters drawn at random, so that a mix-up of them shows."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
    return model


def make_model(name):
    torch.manual_seed(0)
    return randomize_batch_norms(getattr(torchvision.models, name)(weights=None))


def check_timm(tower, work, data, x):
    """timm's names: eval logits of its mobilenetv2_100 and resnet50 as tower's mobilenet_v2 and
    resnet50 (their architectures are torchvision's)."""
    try:
        import timm
    except ImportError:
        print(json.dumps({"timm": "not installed: skipped"}))
        return True
    ok = True
    for timm_name, name in (("mobilenetv2_100", "mobilenet_v2"), ("resnet50", "resnet50")):
        torch.manual_seed(0)
        model = randomize_batch_norms(timm.create_model(timm_name, pretrained=False)).eval()
        weights = os.path.join(work, f"timm_{timm_name}.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
        logits_file = os.path.join(work, f"timm_{timm_name}_logits.npy")
        run([tower, "eval", "--model", name, "--checkpoint", weights, "--save_logits",
             logits_file, "--data", f"npy:{data}", "--num_threads", "2"])
        with torch.no_grad():
            diff, within = worst(np.load(logits_file), model(central(x)).numpy())
        print(json.dumps({"timm": timm_name, "as": name, "logits_max_diff": diff, "ok": within}))
        ok = ok and within
    return ok


def write_data(work):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(N, SIZE, SIZE, 3), dtype=np.uint8)
    labels = rng.integers(0, 1000, size=N).astype(np.int64)
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for split in ("train", "test"):
        np.save(os.path.join(data, f"{split}_images.npy"), images)
        np.save(os.path.join(data, f"{split}_labels.npy"), labels)
    with open(os.path.join(data, "class_names.txt"), "w") as f:
        f.write("".join(f"c{i}\n" for i in range(1000)))
    # What tower feeds these models: [0, 1], then ImageNet's mean and standard deviation.
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() * np.float32(1.0 / 255.0)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return data, (x - mean) / std, torch.from_numpy(labels)


def central(x):
    """What the recipe's evaluation feeds these models: the central crop of 7/8 of the size (tower
    eval of a weights file follows the model's recipe, random-resized-crop)."""
    crop = (SIZE * 7 + 4) // 8
    at = (SIZE - crop) // 2
    return x[:, :, at:at + crop, at:at + crop]


def worst(a, b):
    """The largest |a - b| and whether every value is within atol + rtol |b|."""
    diff = np.abs(a - b)
    return float(diff.max()), bool(np.all(diff <= ATOL + RTOL * np.abs(b)))


def torch_step(name, x, y, dtype):
    """torchvision's model after one SGD momentum step in training mode, in `dtype`."""
    model = make_model(name).to(dtype)
    if name == "mobilenet_v2":
        model.classifier[0].p = 0.0  # as tower's --dropout 0
    model.train()
    decayed = [p for p in model.parameters() if p.dim() > 1]
    plain = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decayed, "weight_decay": DECAY[name]},
                           {"params": plain, "weight_decay": 0.0}], lr=LR, momentum=MOMENTUM)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x.to(dtype)), y).backward()
    opt.step()
    return {k: v.double().numpy() for k, v in model.state_dict().items()}


def check_step(tower, work, name, x, y, common, report):
    """One SGD momentum step in training mode: every parameter and batch-norm statistic, within
    1e-4 of PyTorch's; where that fails, tower must be as close to the step computed in float64
    as PyTorch's float32 step is (deep nets flip ReLU masks of values near zero on float32
    rounding, in either framework, and the flips move whole gradients)."""
    train_dir = os.path.join(work, f"{name}_step")
    run([tower, "train", "--model", name, "--init_from", os.path.join(work, f"{name}.safetensors"),
         "--num_devices", "1", "--batch_size", str(N), "--max_steps", "1", "--optimizer",
         "momentum", "--momentum", str(MOMENTUM), "--lr", str(LR), "--lr_schedule", "constant",
         "--ema_decay", "0", "--precise_bn", "off", "--augmentation", "none", "--dropout", "0",
         "--train_dir", train_dir, *common])
    stepped = load_file(os.path.join(train_dir, "model.ckpt-1.safetensors"))
    before = {k: v.double().numpy() for k, v in make_model(name).state_dict().items()}
    f32, f64 = torch_step(name, x, y, torch.float32), torch_step(name, x, y, torch.float64)
    diff, ok, tower_error, torch_error, compared, exact = 0.0, True, 0.0, 0.0, 0, True
    for key in f32:
        var, transposed = tower_name(name, key)
        if var is None:
            continue
        orient = (lambda a: a.T) if transposed else (lambda a: a)
        d, within = worst(stepped[var], orient(f32[key]))
        diff, ok, compared = max(diff, d), ok and within, compared + 1
        update = np.abs(orient(f64[key] - before[key])).max()
        tower_off = np.abs(stepped[var] - orient(f64[key])).max()
        # A tensor the step leaves as it is, or moves by less than float32 resolves at its scale:
        # only the absolute bound holds.
        if update <= 1e-6 * max(1.0, np.abs(before[key]).max()):
            exact = exact and tower_off <= ATOL
            continue
        tower_error = max(tower_error, tower_off / update)
        torch_error = max(torch_error, np.abs(orient(f32[key] - f64[key])).max() / update)
    report.update(step_max_diff=diff, step_tensors=compared, step_within_1e4=ok,
                  tower_vs_float64=tower_error, pytorch_fp32_vs_float64=torch_error)
    return ok or (exact and tower_error <= 2 * torch_error)


def check_model(tower, work, name, data, x, y):
    model = make_model(name)
    weights = os.path.join(work, f"{name}.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    report = {"model": name}
    common = ["--data", f"npy:{data}", "--num_threads", "2"]

    # 1. eval-mode logits
    logits_file = os.path.join(work, f"{name}_logits.npy")
    run([tower, "eval", "--model", name, "--checkpoint", weights, "--save_logits", logits_file,
         *common])
    model.eval()
    with torch.no_grad():
        expected = model(central(x)).numpy()
    report["logits_max_diff"], ok_logits = worst(np.load(logits_file), expected)
    report["logits_max_abs"] = float(np.abs(expected).max())

    # 2. one training step
    ok_step = check_step(tower, work, name, x, y, common, report)

    # 3. a frozen backbone stays bitwise the file's
    frozen_dir = os.path.join(work, f"{name}_frozen")
    run([tower, "train", "--model", name, "--init_from", weights, "--freeze", "backbone",
         "--batch_size", "16", "--max_steps", "3", "--optimizer", "momentum", "--lr", "0.1",
         "--lr_schedule", "constant", "--augmentation", "none", "--train_dir", frozen_dir,
         *common])
    after = load_file(os.path.join(frozen_dir, "model.ckpt-3.safetensors"))
    original = {k: v.numpy() for k, v in make_model(name).state_dict().items()}
    changed = [var for key, value in original.items()
               for var, _ in [tower_name(name, key)]
               if var is not None and not var.startswith(("fc/", "classifier/"))
               and not np.array_equal(after[var], value)]
    report["frozen_changed"] = changed
    ok = ok_logits and ok_step and not changed
    report["ok"] = ok
    print(json.dumps(report), flush=True)
    return ok


def main():
    tower, work = sys.argv[1], sys.argv[2]
    models = sys.argv[3:] or ["resnet18", "resnet34", "resnet50", "mobilenet_v2"]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(2)
    data, x, y = write_data(work)
    ok = all([check_model(tower, work, m, data, x, y) for m in models])
    ok = check_timm(tower, work, data, x) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
