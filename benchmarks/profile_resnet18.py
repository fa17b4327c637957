"""`gdv profile` on ResNet-18 (issue 16, item 5): the network built layer for layer in
torch.nn (the torchvision architecture, random weights, batch 1; no torchvision needed),
exported with torch.export, imported with `gdv import`, then profiled: every kernel with its
time, GFLOP/s, GB/s, percent of the roofline and the torch module it came from.

    python benchmarks/profile_resnet18.py [--size 64] [--runs 20] [--trace resnet18.trace.json]

Needs the `torch` extra. The files go to a temporary folder; the table goes to stdout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path


def resnet18():
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]), random init, in eval mode."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + identity)

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
            for k, (cin, cout, stride) in enumerate(widths, start=1):
                blocks = nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1))
                setattr(self, f"layer{k}", blocks)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(0)
    return ResNet18().eval()


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64, help="input height and width (64)")
    ap.add_argument("--runs", default="20", help="timed runs (20)")
    ap.add_argument("--trace", help="also write a Chrome-trace / Perfetto timeline here")
    ap.add_argument("--json", action="store_true", help="print the execution report as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gdv-resnet18-") as d:
        work = Path(d)
        x = torch.randn(1, 3, args.size, args.size)
        ep = torch.export.export(resnet18(), (x,))
        torch.export.save(ep, str(work / "resnet18.pt2"))
        gdv = [sys.executable, "-m", "gdv"]
        ir, weights = work / "resnet18.gdv", work / "resnet18.npz"
        subprocess.run(
            [*gdv, "import", str(work / "resnet18.pt2"), "-o", str(ir), "--weights", str(weights)],
            check=True,
        )
        cmd = [*gdv, "profile", str(ir), "--inputs", str(weights), "--runs", args.runs]
        cmd += ["--trace", args.trace] if args.trace else []
        cmd += ["--json"] if args.json else []
        return subprocess.run(cmd).returncode


if __name__ == "__main__":
    raise SystemExit(main())
