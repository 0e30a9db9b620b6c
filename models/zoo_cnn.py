"""The zoo's CNNs: torchvision's ResNet-50, MobileNetV3-Large and EfficientNet-B0, and a
UNet, written from their architecture tables (torchvision has no CPU build here, and timm
requires it), plus each one's MAC count by formula from the same tables.

:func:`build` needs torch; :func:`macs` is plain Python (it walks the table with the
convolution output-size formula ``floor((H + 2p - k) / s) + 1``), so the export script can
check it against torch's own count of the built module.
"""

from __future__ import annotations

ARCHS = ("resnet50", "mobilenetv3", "efficientnet_b0", "unet")  # built in torch here
# macs() also knows "mobilenetv2" (the zoo's Keras model, built by keras.applications)

RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, stride

# MobileNetV3-Large: in, kernel, expanded, out, squeeze-excitation, activation, stride
MOBILENETV3_LARGE = (
    (16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2),
    (24, 3, 72, 24, False, "RE", 1), (24, 5, 72, 40, True, "RE", 2),
    (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1),
    (160, 5, 960, 160, True, "HS", 1),
)

# EfficientNet-B0: expand ratio, kernel, stride, in, out, layers
EFFICIENTNET_B0 = (
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
)

# MobileNetV2 (the Keras export): expand ratio, out, repeats, stride
MOBILENETV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1))

UNET_CHANNELS = (32, 64, 128, 256)
CLASSES = 1000


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding (to a multiple of 8, never down by more than 10%)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _efficientnet_blocks():
    """(in, expanded, out, kernel, stride) of every MBConv block of EfficientNet-B0."""
    for ratio, k, s, cin, cout, n in EFFICIENTNET_B0:
        for i in range(n):
            c = cin if i == 0 else cout
            yield c, make_divisible(c * ratio), cout, k, s if i == 0 else 1


# --------------------------------------------------------------------------- MACs by formula


class _Walk:
    """Feature-map shape (channels, height, width) and the MACs of the convs applied."""

    def __init__(self, c: int, h: int, w: int):
        self.c, self.h, self.w, self.macs = c, h, w, 0

    def conv(self, cout: int, k: int, s: int = 1, groups: int = 1, pad: int | None = None):
        p = (k - 1) // 2 if pad is None else pad
        self.h = (self.h + 2 * p - k) // s + 1
        self.w = (self.w + 2 * p - k) // s + 1
        self.macs += self.h * self.w * cout * (self.c // groups) * k * k
        self.c = cout
        return self

    def pool(self, k: int, s: int, p: int):
        self.h = (self.h + 2 * p - k) // s + 1
        self.w = (self.w + 2 * p - k) // s + 1
        return self


def macs(arch: str, batch: int, height: int, width: int) -> int:
    """MACs of one forward pass of ``arch`` on ``batch`` images of ``height`` x ``width``."""
    x = _Walk(3, height, width)
    fc = 0
    if arch == "resnet50":
        x.conv(64, 7, 2, pad=3).pool(3, 2, 1)
        for width_, blocks, stride in RESNET50_STAGES:
            for i in range(blocks):
                s = stride if i == 0 else 1
                cin, h, w = x.c, x.h, x.w
                if s != 1 or cin != 4 * width_:  # downsample branch on the block's input
                    d = _Walk(cin, h, w).conv(4 * width_, 1, s)
                    x.macs += d.macs
                x.conv(width_, 1).conv(width_, 3, s).conv(4 * width_, 1)
        fc = 2048 * CLASSES
    elif arch == "mobilenetv3":
        x.conv(16, 3, 2)
        for cin, k, exp, cout, se, _act, s in MOBILENETV3_LARGE:
            if exp != cin:
                x.conv(exp, 1)
            x.conv(exp, k, s, groups=exp)
            if se:  # two 1x1 convs on the pooled 1x1 map
                sq = make_divisible(exp // 4)
                x.macs += exp * sq + sq * exp
            x.conv(cout, 1)
        x.conv(960, 1)
        fc = 960 * 1280 + 1280 * CLASSES
    elif arch == "efficientnet_b0":
        x.conv(32, 3, 2)
        for cin, exp, cout, k, s in _efficientnet_blocks():
            if exp != cin:
                x.conv(exp, 1)
            x.conv(exp, k, s, groups=exp)
            sq = max(1, cin // 4)
            x.macs += exp * sq + sq * exp
            x.conv(cout, 1)
        x.conv(1280, 1)
        fc = 1280 * CLASSES
    elif arch == "mobilenetv2":
        x.conv(32, 3, 2)
        for t, cout, n, s in MOBILENETV2:
            for i in range(n):
                if t != 1:
                    x.conv(x.c * t, 1)
                x.conv(x.c, 3, s if i == 0 else 1, groups=x.c)
                x.conv(cout, 1)
        x.conv(1280, 1)
        fc = 1280 * CLASSES
    elif arch == "unet":
        skips = []
        for i, ch in enumerate(UNET_CHANNELS):
            if i:
                x.pool(2, 2, 0)
            x.conv(ch, 3).conv(ch, 3)
            skips.append(x.c)
        for ch, skip in zip(reversed(UNET_CHANNELS[:-1]), reversed(skips[:-1])):
            x.h, x.w = 2 * x.h, 2 * x.w  # nearest upsample
            x.conv(ch, 3)
            x.c += skip  # concat with the encoder's map
            x.conv(ch, 3).conv(ch, 3)
        x.conv(3, 1)
    else:
        raise ValueError(f"unknown CNN {arch!r}; known: {', '.join(ARCHS)}, mobilenetv2")
    return batch * (x.macs + fc)


# --------------------------------------------------------------------------- torch modules


def build(arch: str):
    """The torch module of ``arch`` (random weights, eval mode)."""
    import torch
    from torch import nn

    def cba(cin, cout, k, s=1, groups=1, act=nn.ReLU, pad=None):
        p = (k - 1) // 2 if pad is None else pad
        layers = [nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        return nn.Sequential(*layers)

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            self.body = nn.Sequential(cba(cin, width, 1), cba(width, width, 3, stride),
                                      cba(width, 4 * width, 1, act=None))
            self.down = (cba(cin, 4 * width, 1, stride, act=None)
                         if stride != 1 or cin != 4 * width else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    class SqueezeExcite(nn.Module):
        def __init__(self, ch, sq, act, gate):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(ch, sq, 1), nn.Conv2d(sq, ch, 1)
            self.act, self.gate = act(), gate()

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * self.gate(self.fc2(self.act(self.fc1(s))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, exp, cout, k, s, se, act, se_act, gate, sq):
            super().__init__()
            layers = [] if exp == cin else [cba(cin, exp, 1, act=act)]
            layers.append(cba(exp, exp, k, s, groups=exp, act=act))
            if se:
                layers.append(SqueezeExcite(exp, sq, se_act, gate))
            layers.append(cba(exp, cout, 1, act=None))
            self.body = nn.Sequential(*layers)
            self.residual = s == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    if arch == "resnet50":
        layers = [cba(3, 64, 7, 2, pad=3), nn.MaxPool2d(3, 2, 1)]
        c = 64
        for width, blocks, stride in RESNET50_STAGES:
            for i in range(blocks):
                layers.append(Bottleneck(c, width, stride if i == 0 else 1))
                c = 4 * width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, CLASSES)]
        return nn.Sequential(*layers)
    if arch == "mobilenetv3":
        layers = [cba(3, 16, 3, 2, act=nn.Hardswish)]
        for cin, k, exp, cout, se, act, s in MOBILENETV3_LARGE:
            a = nn.ReLU if act == "RE" else nn.Hardswish
            layers.append(InvertedResidual(cin, exp, cout, k, s, se, a, nn.ReLU, nn.Hardsigmoid,
                                           make_divisible(exp // 4)))
        layers += [cba(160, 960, 1, act=nn.Hardswish), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2),
                   nn.Linear(1280, CLASSES)]
        return nn.Sequential(*layers)
    if arch == "efficientnet_b0":
        layers = [cba(3, 32, 3, 2, act=nn.SiLU)]
        for cin, exp, cout, k, s in _efficientnet_blocks():
            layers.append(InvertedResidual(cin, exp, cout, k, s, True, nn.SiLU, nn.SiLU,
                                           nn.Sigmoid, max(1, cin // 4)))
        layers += [cba(320, 1280, 1, act=nn.SiLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Dropout(0.2), nn.Linear(1280, CLASSES)]
        return nn.Sequential(*layers)
    if arch == "unet":
        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(8, cout),
                                 nn.SiLU(), nn.Conv2d(cout, cout, 3, padding=1),
                                 nn.GroupNorm(8, cout), nn.SiLU())

        class UNet(nn.Module):
            def __init__(self):
                super().__init__()
                chs = UNET_CHANNELS
                self.down = nn.ModuleList(block(a, b) for a, b in zip((3,) + chs[:-1], chs))
                self.up = nn.ModuleList(nn.Conv2d(b, a, 3, padding=1)
                                        for a, b in zip(chs[:-1], chs[1:]))
                self.dec = nn.ModuleList(block(2 * a, a) for a in chs[:-1])
                self.out = nn.Conv2d(chs[0], 3, 1)

            def forward(self, x):
                skips = []
                for i, blk in enumerate(self.down):
                    if i:
                        x = nn.functional.max_pool2d(x, 2)
                    x = blk(x)
                    skips.append(x)
                for i in reversed(range(len(self.up))):
                    x = self.up[i](nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))
                    x = self.dec[i](torch.cat([x, skips[i]], dim=1))
                return self.out(x)

        return UNet()
    raise ValueError(f"unknown CNN {arch!r}; known: {', '.join(ARCHS)}")
