"""torchvision's resnet18, resnet50 or mobilenet_v2 in PyTorch eager, channels_last (its oneDNN
path on CPU), timed like `tower bench`: prints one JSON line (images_per_sec = median of timed
windows after warm-up; peak_rss_mb). Training is forward, backward and SGD with momentum 0.9.

usage: imagenet_models_pytorch.py --model M --threads T --mode train|infer [--batch_size 32]
       [--image_size 224] [--precision fp32|bf16 (CPU autocast)]
"""
import torch
import torch.nn.functional as F
import torchvision

from peer_timing import parse_flags, report

# The parameter counts of tower's built-ins, for 1,000 classes: the same networks.
PARAMETERS = {"resnet18": 11689512, "resnet34": 21797672, "resnet50": 25557032,
              "mobilenet_v2": 3504872}


def main():
    a = parse_flags(classes=1000)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(num_classes=a.classes)
    if a.classes == 1000:
        params = sum(t.numel() for t in model.parameters())
        assert params == PARAMETERS[a.model], params
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size).to(
        memory_format=torch.channels_last)
    y = torch.arange(a.batch_size) % a.classes
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    bf16 = a.precision == "bf16"

    def train_step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    def infer_step():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model(x)

    step = train_step if a.mode == "train" else infer_step
    model.train(a.mode == "train")
    report(a, "pytorch " + torch.__version__, step)


if __name__ == "__main__":
    main()
