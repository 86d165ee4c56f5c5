"""Models none of the bundled generators make, written in PyTorch as a user would, as ONNX files.

Usage: ``python -m tvm_chiplet.tools.bench.heldout_models [--models ...] [--out DIR]`` (needs
``pip install ".[torch]"``), then e.g. ``python -m tvm_chiplet.tools.bench.strategies --models
DIR/*.onnx --presets simba-6x6 --strategies tensor-parallel --batches 1``.

The bundled models (tools/models.py) are what the planners were built on; these check that the
general case holds: blocks the bundled ones lack, and two of them exported the way PyTorch
exports them (batch norms folded into the convs, torch's attention), at batch 1:

- ``squeezenet``: SqueezeNet 1.0's Fire modules (1x1 and 3x3 branches concatenated), ceil-mode
  max pools;
- ``efficientnet``: MBConv blocks (depthwise convs, SiLU, squeeze-and-excitation gates);
- ``vit``: a ViT-Tiny-sized vision transformer (patch conv, class token, ``nn.TransformerEncoder``
  with ``nn.MultiheadAttention``);
- ``unet``: a small U-Net (transposed convs, skip concats);
- ``vgg``: a VGG-style stack at 112x112 with a large classifier;
- ``resnet50-torchvision``: torchvision's ResNet-50 layout;
- ``bert-hf``: a BERT-base encoder in HuggingFace's layout (separate query, key and value);
- ``encoder-64``, ``encoder-256``, ``encoder-512``: ``nn.TransformerEncoder`` stacks of that
  width run sequence first (torch's default: one-row projections at batch 1): 2 layers of 16
  tokens (feed-forward 128), 4 of 64 (1024) and 6 of 128 (2048);
- small ones of blocks none of the above has, sized for end-to-end tests: ``mobilenetv2``
  (inverted residuals with ReLU6 at 96x96), ``gpt-decoder`` (a 2-layer decoder of 32 tokens:
  causal mask, tanh GELU, a language-model head), ``resnext-fpn`` (a grouped conv, a
  squeeze-and-excitation gate of linear layers, nearest upsampling concatenated with a finer
  map), ``tcn`` (dilated 1-D convs, leaky ReLU, a max over time), ``llama-decoder`` (RMSNorm,
  rotary positions, grouped-query attention, SwiGLU) and ``unet-upsample`` (instance and group
  norms, bilinear upsampling aligning the corners).

Weights are seeded; batch norms have non-trivial statistics so that folding them changes the
convs.
"""

from __future__ import annotations

import argparse
import math
import os

from tvm_chiplet.tools.torch_import import TORCH_EXTRA


def _torch():
    try:
        import torch
    except ImportError as err:
        raise SystemExit(f"heldout_models needs PyTorch: {TORCH_EXTRA}") from err
    return torch


def _builders():
    """The models, by name: (module, example inputs)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class Fire(nn.Module):
        def __init__(self, cin, squeeze, expand):
            super().__init__()
            self.s = nn.Conv2d(cin, squeeze, 1)
            self.a, self.b = nn.Conv2d(squeeze, expand, 1), nn.Conv2d(squeeze, expand, 3, padding=1)

        def forward(self, x):
            x = F.relu(self.s(x))
            return torch.cat([F.relu(self.a(x)), F.relu(self.b(x))], 1)

    class SqueezeNet(nn.Module):
        def __init__(self):
            super().__init__()
            pool = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.features = nn.Sequential(
                nn.Conv2d(3, 96, 7, stride=2), nn.ReLU(), pool, Fire(96, 16, 64),
                Fire(128, 16, 64), Fire(128, 32, 128), pool, Fire(256, 32, 128),
                Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), pool,
                Fire(512, 64, 256))
            self.head = nn.Conv2d(512, 1000, 1)

        def forward(self, x):
            return torch.flatten(F.adaptive_avg_pool2d(F.relu(self.head(self.features(x))), 1), 1)

    class SqueezeExcite(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.a, self.b = nn.Conv2d(channels, channels // 4, 1), nn.Conv2d(channels // 4,
                                                                              channels, 1)

        def forward(self, x):
            return x * torch.sigmoid(self.b(F.silu(self.a(F.adaptive_avg_pool2d(x, 1)))))

    class MBConv(nn.Module):
        """EfficientNet's block; with ``act=nn.ReLU6, gate=False``, MobileNetV2's."""

        def __init__(self, cin, cout, stride, expand=4, act=nn.SiLU, gate=True):
            super().__init__()
            wide = cin * expand
            self.body = nn.Sequential(
                nn.Conv2d(cin, wide, 1, bias=False), nn.BatchNorm2d(wide), act(),
                nn.Conv2d(wide, wide, 3, stride, 1, groups=wide, bias=False),
                nn.BatchNorm2d(wide), act(), *([SqueezeExcite(wide)] if gate else []),
                nn.Conv2d(wide, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class EfficientNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                      nn.SiLU())
            self.blocks = nn.Sequential(
                MBConv(32, 24, 2), MBConv(24, 24, 1), MBConv(24, 40, 2), MBConv(40, 40, 1),
                MBConv(40, 80, 2), MBConv(80, 80, 1), MBConv(80, 112, 1), MBConv(112, 192, 2))
            self.fc = nn.Linear(192, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    class ViT(nn.Module):
        def __init__(self, width=192, layers=12, heads=3):
            super().__init__()
            self.patch = nn.Conv2d(3, width, 16, 16)
            self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, 197, width) * 0.02)
            layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               activation="gelu", batch_first=True,
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, 1000)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            return self.head(self.norm(self.encoder(x))[:, 0])

    def double_conv(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3 = double_conv(3, 32), double_conv(32, 64), double_conv(64,
                                                                                           128)
            self.u2, self.c2 = nn.ConvTranspose2d(128, 64, 2, 2), double_conv(128, 64)
            self.u1, self.c1 = nn.ConvTranspose2d(64, 32, 2, 2), double_conv(64, 32)
            self.out = nn.Conv2d(32, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(F.max_pool2d(a, 2))
            m = self.d3(F.max_pool2d(b, 2))
            b = self.c2(torch.cat([self.u2(m), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b), a], 1)))

    class VGG(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = [], 3
            for v in (32, "M", 64, "M", 128, 128, "M", 256, 256, "M"):
                if v == "M":
                    layers.append(nn.MaxPool2d(2))
                else:
                    layers += [nn.Conv2d(cin, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
                    cin = v
            self.features = nn.Sequential(*layers)
            self.fc1, self.fc2 = nn.Linear(256 * 7 * 7, 512), nn.Linear(512, 100)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(torch.flatten(self.features(x), 1))))

    class Bottleneck(nn.Module):
        def __init__(self, cin, planes, stride=1):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.down = None if stride == 1 and cin == planes * 4 else nn.Sequential(
                nn.Conv2d(cin, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn3(self.conv3(F.relu(self.bn2(self.conv2(out)))))
            return F.relu(out + (x if self.down is None else self.down(x)))

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(count):
                    blocks.append(Bottleneck(cin, planes, stride if i == 0 else 1))
                    cin = planes * 4
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    class SelfAttention(nn.Module):
        def __init__(self, width=768, heads=12):
            super().__init__()
            self.heads, self.size = heads, width // heads
            self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
            self.out, self.norm = nn.Linear(width, width), nn.LayerNorm(width, eps=1e-12)

        def split(self, x):
            return x.view(x.shape[0], x.shape[1], self.heads, self.size).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.size) + mask
            context = torch.matmul(F.softmax(scores, -1), v).permute(0, 2, 1, 3).contiguous()
            return self.norm(self.out(context.view(x.shape[0], x.shape[1], -1)) + x)

    class EncoderLayer(nn.Module):
        def __init__(self, width=768):
            super().__init__()
            self.attention = SelfAttention(width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.norm = nn.LayerNorm(width, eps=1e-12)

        def forward(self, x, mask):
            a = self.attention(x, mask)
            return self.norm(self.down(F.gelu(self.up(a))) + a)

    class Bert(nn.Module):
        def __init__(self, layers=12, width=768, vocab=30522):
            super().__init__()
            self.words, self.positions = nn.Embedding(vocab, width), nn.Embedding(512, width)
            self.types, self.norm = nn.Embedding(2, width), nn.LayerNorm(width, eps=1e-12)
            self.layers = nn.ModuleList(EncoderLayer(width) for _ in range(layers))
            self.pool = nn.Linear(width, width)

        def forward(self, ids, attention_mask):
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.norm(self.words(ids) + self.positions(positions)
                          + self.types(torch.zeros_like(ids)))
            mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return torch.tanh(self.pool(x[:, 0]))

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU6())
            self.blocks = nn.Sequential(*(
                MBConv(cin, cout, stride, expand, nn.ReLU6, gate=False)
                for cin, cout, stride, expand in ((16, 16, 1, 1), (16, 24, 2, 6), (24, 24, 1, 6),
                                                  (24, 32, 2, 6), (32, 32, 1, 6), (32, 64, 2, 6))))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    class DecoderBlock(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads, self.scale = heads, 1.0 / math.sqrt(width // heads)
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x, causal):
            b, n, width = x.shape
            q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2)
                       for t in self.qkv(self.norm1(x)).split(width, -1))
            scores = (q @ k.transpose(-1, -2)) * self.scale
            attention = scores.masked_fill(causal, float("-inf")).softmax(-1)
            x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, n, width))
            return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))

    class GptDecoder(nn.Module):
        def __init__(self, vocab=500, width=64, heads=4, layers=2, tokens=32):
            super().__init__()
            self.words, self.positions = nn.Embedding(vocab, width), nn.Embedding(tokens, width)
            self.blocks = nn.ModuleList(DecoderBlock(width, heads) for _ in range(layers))
            self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
            self.register_buffer("causal", torch.ones(tokens, tokens, dtype=torch.bool).triu(1))

        def forward(self, ids):
            n = ids.shape[1]
            x = self.words(ids) + self.positions(torch.arange(n).unsqueeze(0))
            for block in self.blocks:
                x = block(x, self.causal[:n, :n])
            return self.head(self.norm(x))

    class ResNeXtFPN(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 64, 3, 2, 1)
            self.grouped = nn.Conv2d(64, 64, 3, 1, 1, groups=8)
            self.down = nn.Conv2d(64, 128, 3, 2, 1)
            self.squeeze, self.excite = nn.Linear(128, 16), nn.Linear(16, 128)
            self.lateral, self.out = nn.Conv2d(128, 64, 1), nn.Conv2d(128, 8, 3, 1, 1)

        def forward(self, x):
            fine = F.relu(self.stem(x))
            fine = F.relu(fine + self.grouped(fine))
            coarse = F.relu(self.down(fine))
            gate = torch.sigmoid(self.excite(F.relu(self.squeeze(coarse.mean((2, 3))))))
            coarse = coarse * gate[:, :, None, None]
            up = F.interpolate(self.lateral(coarse), scale_factor=2, mode="nearest")
            return self.out(torch.cat([fine, up], 1))

    class UpsamplingUNet(nn.Module):
        """A U-Net as the popular PyTorch ones write it: instance norms down, group norms up (as
        a diffusion U-Net's), bilinear upsampling aligning the corners (an FPN's or DeepLab's
        does not: both are exact band by band)."""

        def __init__(self, width=16):
            super().__init__()

            def block(cin, cout, norm):
                return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), norm(cout), nn.ReLU())

            def instance(channels):
                return nn.InstanceNorm2d(channels, affine=True)

            def group(channels):
                return nn.GroupNorm(4, channels)

            self.d1, self.d2, self.d3 = block(3, width, instance), block(
                width, 2 * width, instance), block(2 * width, 4 * width, instance)
            self.u2, self.u1 = block(6 * width, 2 * width, group), block(3 * width, width, group)
            self.out = nn.Conv2d(width, 2, 1)

        def forward(self, x):
            def up(y):
                return F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True)
            a = self.d1(x)
            b = self.d2(F.max_pool2d(a, 2))
            m = self.d3(F.max_pool2d(b, 2))
            b = self.u2(torch.cat([up(m), b], 1))
            return self.out(self.u1(torch.cat([up(b), a], 1)))

    class TemporalConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv1d(16 if i == 0 else 32, 32, 3, padding=2 ** i,
                                                 dilation=2 ** i) for i in range(4))
            self.fc = nn.Linear(32, 5)

        def forward(self, x):
            for conv in self.convs:
                x = F.leaky_relu(conv(x), 0.1)
            return self.fc(x.amax(-1))

    class LlamaBlock(nn.Module):
        """RMSNorm, rotary positions, grouped-query attention (each key and value head shared
        by ``heads // groups`` query heads) by scaled_dot_product_attention with a mask,
        SwiGLU."""

        def __init__(self, width, heads, groups, tokens):
            super().__init__()
            self.heads, self.groups, self.size = heads, groups, width // heads
            self.norm1, self.norm2 = nn.Parameter(torch.ones(width)), nn.Parameter(
                torch.ones(width))
            self.q = nn.Linear(width, width, bias=False)
            self.kv = nn.Linear(width, 2 * groups * self.size, bias=False)
            self.out = nn.Linear(width, width, bias=False)
            self.gate, self.up = (nn.Linear(width, 2 * width, bias=False) for _ in range(2))
            self.down = nn.Linear(2 * width, width, bias=False)
            angles = torch.outer(torch.arange(tokens).float(), 1.0 / 10000 ** (
                torch.arange(0, self.size, 2).float() / self.size))
            self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1))
            self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1))

        @staticmethod
        def rms(x, weight):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

        def rotate(self, x):
            first, second = x.chunk(2, -1)
            return x * self.cos + torch.cat([-second, first], -1) * self.sin

        def forward(self, x, mask):
            b, n, width = x.shape
            h = self.rms(x, self.norm1)
            q = self.rotate(self.q(h).view(b, n, self.heads, -1).transpose(1, 2))
            k, v = (t.view(b, n, self.groups, -1).transpose(1, 2)
                    for t in self.kv(h).split(self.groups * self.size, -1))
            k = self.rotate(k)
            k, v = (t[:, :, None].expand(b, self.groups, self.heads // self.groups, n,
                                         self.size).reshape(b, self.heads, n, self.size)
                    for t in (k, v))
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.out(context.transpose(1, 2).reshape(b, n, width))
            h = self.rms(x, self.norm2)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class LlamaDecoder(nn.Module):
        def __init__(self, vocab=500, width=256, heads=8, groups=2, layers=2, tokens=32):
            super().__init__()
            self.words = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(LlamaBlock(width, heads, groups, tokens)
                                        for _ in range(layers))
            self.register_buffer("mask", torch.ones(tokens, tokens, dtype=torch.bool).tril())

        def forward(self, ids):
            x = self.words(ids)
            for block in self.blocks:
                x = block(x, self.mask)
            return x @ self.words.weight.t()

    def encoder(width, heads, hidden, layers):
        def make():
            layer = nn.TransformerEncoderLayer(width, heads, hidden, dropout=0.0)
            return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        return make

    image = (torch.randn(1, 3, 224, 224),)
    tokens = (torch.randint(0, 30522, (1, 128)), torch.ones(1, 128, dtype=torch.int64))
    return {
        "squeezenet": (SqueezeNet, image, ["x"]),
        "efficientnet": (EfficientNet, image, ["x"]),
        "vit": (ViT, image, ["x"]),
        "unet": (UNet, (torch.randn(1, 3, 128, 128),), ["x"]),
        "vgg": (VGG, (torch.randn(1, 3, 112, 112),), ["x"]),
        "resnet50-torchvision": (ResNet50, image, ["x"]),
        "bert-hf": (Bert, tokens, ["input_ids", "attention_mask"]),
        "encoder-64": (encoder(64, 4, 128, 2), (torch.randn(16, 1, 64),), ["x"]),
        "encoder-256": (encoder(256, 4, 1024, 4), (torch.randn(64, 1, 256),), ["x"]),
        "encoder-512": (encoder(512, 8, 2048, 6), (torch.randn(128, 1, 512),), ["x"]),
        # Traced on zeros: drawing them would move the seeded weights of every model above.
        "mobilenetv2": (MobileNetV2, (torch.zeros(1, 3, 96, 96),), ["x"]),
        "gpt-decoder": (GptDecoder, (torch.zeros(1, 32, dtype=torch.int64),), ["input_ids"]),
        "llama-decoder": (LlamaDecoder, (torch.zeros(1, 32, dtype=torch.int64),),
                          ["input_ids"]),
        "resnext-fpn": (ResNeXtFPN, (torch.zeros(1, 3, 64, 64),), ["x"]),
        "tcn": (TemporalConvNet, (torch.zeros(1, 16, 128),), ["x"]),
        "unet-upsample": (UpsamplingUNet, (torch.zeros(1, 3, 64, 64),), ["x"]),
    }


MODELS = ["squeezenet", "efficientnet", "vit", "unet", "vgg", "resnet50-torchvision", "bert-hf",
          "encoder-64", "encoder-256", "encoder-512", "mobilenetv2", "gpt-decoder",
          "resnext-fpn", "tcn", "llama-decoder", "unet-upsample"]

VOCABULARY = {"bert-hf": 30522, "gpt-decoder": 500, "llama-decoder": 500}
"""The vocabulary of the models that read token ids: the ids drawn for them lie below it."""


def export(name: str, path: str) -> None:
    """Build model ``name`` (seeded) and export it to ``path`` as ONNX (opset 17)."""
    torch = _torch()
    import onnx

    torch.manual_seed(0)
    make, inputs, names = _builders()[name]
    model = make().eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    torch.onnx.export(model, inputs, path, input_names=names, opset_version=17, dynamo=False)
    if name in VOCABULARY:  # token ids are drawn below the vocabulary size
        proto = onnx.load(path)
        onnx.helper.set_model_props(proto, {"vocab_size": str(VOCABULARY[name])})
        onnx.save(proto, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--out", default="heldout-models")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        path = os.path.join(args.out, f"{name}.onnx")
        export(name, path)
        print(f"[heldout] {name} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
