"""The two models the pipelining tests and bench/pipelining_side_by_side.py run: a GPT-like
decoder and a torchvision-style ResNet, written as torchtitan asks of a model it splits (the
forward skips the modules a stage does not hold), with the pipeplan_* attributes that
`pipeplan profile` reads from their TorchScript files."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

GPT_VOCAB = 64
GPT_SEQ = 16


class Embed(nn.Module):
    """Token and position embeddings: one module, so that no stage boundary falls between them."""

    def __init__(self, vocab, seq, hidden):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)

    def forward(self, idx):
        positions = torch.arange(idx.size(1), device=idx.device)
        return self.tok(idx) + self.pos(positions)


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, seq, hidden = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).split(hidden, dim=2)
        shape = (batch, seq, self.heads, hidden // self.heads)
        q = q.reshape(shape).transpose(1, 2)
        k = k.reshape(shape).transpose(1, 2)
        v = v.reshape(shape).transpose(1, 2)
        # Written out rather than scaled_dot_product_attention, which LibTorch 1.13 (the Debian 12
        # leg's pipeplan) does not have.
        scores = q @ k.transpose(-2, -1) / math.sqrt(hidden // self.heads)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        y = scores.masked_fill(causal, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, seq, hidden))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(),
                                 nn.Linear(4 * hidden, hidden))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """embed, blocks.0 ... blocks.<n-1> (a ModuleDict, as torchtitan keeps names stable), ln_f,
    head."""

    def __init__(self, layers=6, hidden=32, heads=4):
        super().__init__()
        self.embed = Embed(GPT_VOCAB, GPT_SEQ, hidden)
        self.blocks = nn.ModuleDict({str(i): Block(hidden, heads) for i in range(layers)})
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, GPT_VOCAB)
        self.pipeplan_input_shape = [GPT_SEQ]
        self.pipeplan_input_dtype = "int64"
        self.pipeplan_loss = "next_token_cross_entropy"

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks.values():
            x = block(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        if self.head is not None:
            x = self.head(x)
        return x


def gpt_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def gpt_batch(batch, generator):
    tokens = torch.randint(0, GPT_VOCAB, (batch, GPT_SEQ + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet layout (conv1, bn1, relu, maxpool, layer1..layer4 of BasicBlocks,
    avgpool, fc) at CIFAR size, its forward skipping the modules a stage does not hold."""

    def __init__(self, widths=(16, 32, 64, 64), blocks=(2, 2, 2, 2), num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU()
        inplanes = widths[0]
        for idx, (width, count) in enumerate(zip(widths, blocks)):
            stride = 1 if idx == 0 else 2
            layers = [BasicBlock(inplanes, width, stride)]
            layers += [BasicBlock(width, width) for _ in range(count - 1)]
            setattr(self, f"layer{idx + 1}", nn.Sequential(*layers))
            inplanes = width
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)
        self.pipeplan_input_shape = [3, 16, 16]
        self.pipeplan_loss = "cross_entropy"

    def forward(self, x):
        if self.conv1 is not None:
            x = self.conv1(x)
        if self.bn1 is not None:
            x = self.relu(self.bn1(x))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        if self.fc is not None:
            x = self.fc(torch.flatten(self.avgpool(x), 1))
        return x


def resnet_batch(batch, generator):
    images = torch.randn(batch, 3, 16, 16, generator=generator)
    return images, torch.randint(0, 10, (batch,), generator=generator)


MODELS = {
    "gpt": (Gpt, gpt_loss, gpt_batch),
    "resnet": (ResNet, F.cross_entropy, resnet_batch),
}
