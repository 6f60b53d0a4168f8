"""Writes the TorchScript models of pipeplan's tests into a folder (run with Debian's python3-torch).

Usage: /usr/bin/python3 make_torchscript_models.py OUT_DIR [--mlp-weights FILE]

mlp.pt mirrors the zoo's mlp_tiny layer for layer (models/mlp.cpp); with --mlp-weights (a
dict of tensors written by torch::pickle_save, keys "LAYER.fc.weight" ...) it carries those
weights. The other files cover batch norm, the `layers` container forms, token inputs, the
module attributes, graphs with skips and functional ops (scripted and traced), forwards that
return a named tuple or a tuple, MLPs tensor parallelism splits or not, torchvision's resnet18, googlenet and a small
VisionTransformer (when torchvision is installed), a GPT with tied embeddings, and the modules pipeplan must refuse.
param_counts.json holds PyTorch's parameter count of every module of each scripted file, by
attribute path ("" for the whole model).
"""
import argparse
import json
import math
import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from typing import Dict, NamedTuple, Optional, Tuple


class Dense(nn.Module):
    """models/mlp.cpp's DenseLayer: optional flatten, Linear `fc`, optional ReLU."""

    def __init__(self, in_features: int, out_features: int, flatten: bool, relu: bool):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.flatten = flatten
        self.relu = relu

    def forward(self, x):
        if self.flatten:
            x = x.flatten(1)
        x = self.fc(x)
        if self.relu:
            x = torch.relu(x)
        return x


def mlp_tiny():
    """mlp_tiny: 1x28x28 input, 4 hidden layers of width 128, 10 classes."""
    return nn.Sequential(Dense(784, 128, True, True), Dense(128, 128, False, True),
                         Dense(128, 128, False, True), Dense(128, 128, False, True),
                         Dense(128, 10, False, False))


def cnn():
    """A small CNN with batch norm; input shape and classes as module attributes."""
    def conv(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
    model = nn.Sequential(nn.Sequential(*conv(3, 8)), nn.Sequential(*conv(8, 8), nn.MaxPool2d(2)),
                          nn.Sequential(*conv(8, 16)),
                          nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)))
    model.pipeplan_input_shape = [3, 16, 16]
    model.pipeplan_num_classes = 10
    return model


class ListWrapper(nn.Module):
    """Runs a `layers` ModuleList in order."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class SequentialWrapper(nn.Module):
    """Calls a `layers` Sequential."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.layers(x)


class Residual(nn.Module):
    """Not a chain: adds the input back."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        return self.b(self.a(x) + x)


def tokens():
    """Next-token logits over a vocabulary of 50 for sequences of 12 tokens."""
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50))
    model.pipeplan_input_shape = [12]
    model.pipeplan_input_dtype = "int64"
    return model


def shared():
    """The same Linear twice: its weights would be trained apart on two stages."""
    linear = nn.Linear(8, 8)
    return nn.Sequential(linear, nn.ReLU(), linear)


def big_first():
    """A 4 MiB first layer and small later ones, to see what a stage keeps."""
    return nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 8), nn.Linear(8, 10))


class Skip3(nn.Module):
    """A skip connection over three layers (b, c, d), then two more layers."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(16, 16)
        self.d = nn.Linear(16, 16)
        self.e = nn.Linear(16, 16)
        self.f = nn.Linear(16, 4)
        self.pipeplan_input_shape = [8]

    def forward(self, x):
        h = self.a(x)
        y = self.c(torch.relu(self.b(h)))
        z = self.d(y + h)
        return self.f(torch.tanh(self.e(z)))


class Functional(nn.Module):
    """Functional ops between the child calls: flatten, gelu, dropout, cat, softmax, view."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)
        self.ln = nn.LayerNorm(32)
        self.c = nn.Linear(64, 10)
        self.pipeplan_input_shape = [4, 4]

    def forward(self, x):
        h = F.gelu(self.a(x.flatten(1)))
        g = self.b(F.dropout(h, 0.25, self.training))
        g = torch.cat([self.ln(g), torch.softmax(g, dim=-1) * 2.0], dim=1)
        return self.c(g.view(g.size(0), -1))


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention over earlier positions only (GPT-2's, with its mask buffer)."""

    def __init__(self, width: int, heads: int, context: int):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads = heads
        mask = torch.tril(torch.ones(context, context)).view(1, 1, context, context)
        self.register_buffer("mask", mask)

    def forward(self, x):
        batch, tokens, width = x.size()
        q, k, v = self.qkv(x).split(width, dim=2)
        q = q.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)
        k = k.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)
        v = v.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(width // self.heads))
        scores = scores.masked_fill(self.mask[:, :, :tokens, :tokens] == 0, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(batch, tokens, width))


class GptBlock(nn.Module):
    def __init__(self, width: int, heads: int, context: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TiedGpt(nn.Module):
    """A GPT with 4 blocks whose output head is its token embedding (tied weights, as GPT-2)."""

    def __init__(self, vocabulary: int = 64, context: int = 8, width: int = 32):
        super().__init__()
        self.wte = nn.Embedding(vocabulary, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([GptBlock(width, 2, context) for _ in range(4)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.head.weight = self.wte.weight
        self.pipeplan_input_shape = [context]
        self.pipeplan_input_dtype = "int64"

    def forward(self, idx):
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class SplitBlock(nn.Module):
    """A residual MLP tensor parallelism splits: Linear, SiLU, dropout, Linear without bias."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return x + self.fc2(F.dropout(F.silu(self.fc1(self.ln(x))), 0.0, self.training))


class ForkedBlock(nn.Module):
    """Linear, ReLU, Linear, but the hidden values also feed a sum: not a pattern to split."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        h = self.fc1(x)
        return x + self.fc2(torch.relu(h)) + h.mean(-1, keepdim=True)


class DropoutBlock(nn.Module):
    """Linear, GELU, dropout at 0.1, Linear: each rank would draw its own mask, so it stays whole."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(self.drop(F.gelu(self.fc1(x))))


class FunctionalBlock(nn.Module):
    """F.linear on bare parameters, nn.Dropout(0.0) between, and an Optional bias that is None:
    splits, the bias added to nothing."""

    bias2: Optional[torch.Tensor]

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(hidden, width) * 0.2)
        self.w2 = nn.Parameter(torch.randn(width, hidden) * 0.2)
        self.drop = nn.Dropout(0.0)
        self.bias2 = None

    def forward(self, x):
        return x + F.linear(self.drop(torch.relu(F.linear(x, self.w1))), self.w2, self.bias2)


class MlpPatterns(nn.Module):
    """Tensor parallelism's MLP pattern in a TorchScript model: blocks that split (a, d), blocks
    that do not (b, c), and a head."""

    def __init__(self):
        super().__init__()
        self.a = SplitBlock(16, 48)
        self.b = ForkedBlock(16, 32)
        self.c = DropoutBlock(16, 32)
        self.d = FunctionalBlock(16, 24)
        self.head = nn.Linear(64, 10)
        self.pipeplan_input_shape = [4, 16]

    def forward(self, x):
        return self.head(self.d(self.c(self.b(self.a(x)))).flatten(1))


class TwoInputs(nn.Module):
    """Two inputs: x (2x4) through a and b, then joined with the side features y (3) before c."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(19, 4)
        self.pipeplan_input_shape = [[2, 4], [3]]

    def forward(self, x, y):
        h = torch.relu(self.b(torch.relu(self.a(x.flatten(1)))))
        return self.c(torch.cat([h, y], dim=1))


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        if bool(x.sum() > 0):
            return self.a(x)
        return self.b(x)


class InPlace(nn.Module):
    """Changes in place the tensor that crosses the cut after `a`."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        h = self.a(x)
        h.relu_()
        return self.b(h)


class ReturnsDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)

    def forward(self, x) -> Dict[str, torch.Tensor]:
        return {"logits": self.a(x)}


class Outputs(NamedTuple):
    logits: torch.Tensor
    hidden: torch.Tensor
    aux: Optional[torch.Tensor]


class ReturnsNamedTuple(nn.Module):
    """Returns the logits, the features and an auxiliary head's logits as a named tuple (as
    torchvision's GoogLeNetOutputs does): trained on the element --model-arg output= picks."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 4)
        self.pipeplan_input_shape = [8]

    def forward(self, x) -> Outputs:
        h = torch.relu(self.a(x))
        h = torch.relu(self.b(h))
        return Outputs(self.head(h), h, self.aux(h))


class ReturnsTuple(nn.Module):
    """Returns (logits, features), a plain tuple."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.a(x))
        return self.head(h), h


class TupleFromChild(nn.Module):
    """Returns the tuple a child returns: no tuple is built in this forward."""

    def __init__(self):
        super().__init__()
        self.body = ReturnsTuple()
        self.pipeplan_input_shape = [8]

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.body(x)


class Warns(nn.Module):
    """Warns at every forward, as torchvision's scripted googlenet does."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.pipeplan_input_shape = [8]

    def forward(self, x):
        warnings.warn("pipeplan test: this forward warns every time")
        return self.a(x)


class NoParameters(nn.Module):
    """Nothing to train: `pipeplan profile` must refuse it."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.pipeplan_input_shape = [8]

    def forward(self, x):
        return self.act(x)


def torchvision_resnet18():
    """torchvision's own resnet18 for 10 classes on 3x32x32; None without torchvision."""
    try:
        import torchvision
    except ImportError:
        return None
    model = torchvision.models.resnet18(num_classes=10)
    model.pipeplan_input_shape = [3, 32, 32]
    return model


def torchvision_vit():
    """torchvision's VisionTransformer (the class of vit_b_16) at 3x32x32 with 16x16 patches,
    4 encoder blocks of width 32, 10 classes; None without torchvision."""
    try:
        import torchvision
    except ImportError:
        return None
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=4,
                                                 num_heads=2, hidden_dim=32, mlp_dim=64,
                                                 num_classes=10)
    model.pipeplan_input_shape = [3, 32, 32]
    return model


def torchvision_googlenet():
    """torchvision's googlenet for 10 classes on 3x64x64, without auxiliary heads; scripted, its
    forward returns GoogLeNetOutputs. None without torchvision."""
    try:
        import torchvision
    except ImportError:
        return None
    model = torchvision.models.googlenet(num_classes=10, aux_logits=False, init_weights=False)
    model.pipeplan_input_shape = [3, 64, 64]
    return model


PARAM_COUNTS = {}


def save(model, folder, name):
    """Scripts and saves `model`; records PyTorch's parameter count of each of its modules."""
    torch.jit.script(model).save(os.path.join(folder, name))
    PARAM_COUNTS[name] = {path or "": sum(p.numel() for p in module.parameters())
                          for path, module in model.named_modules()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--mlp-weights")
    args = parser.parse_args()
    torch.manual_seed(0)
    mlp = mlp_tiny()
    if args.mlp_weights:
        mlp.load_state_dict(torch.load(args.mlp_weights, weights_only=False))
    save(mlp, args.out_dir, "mlp.pt")
    save(cnn(), args.out_dir, "cnn.pt")
    save(ListWrapper(), args.out_dir, "layers_list.pt")
    save(SequentialWrapper(), args.out_dir, "layers_sequential.pt")
    save(Residual(), args.out_dir, "residual.pt")
    save(tokens(), args.out_dir, "tokens.pt")
    save(shared(), args.out_dir, "shared.pt")
    save(nn.Sequential(nn.Linear(8, 4)).double(), args.out_dir, "float64.pt")
    save(big_first(), args.out_dir, "big_first.pt")
    torch.save(mlp.state_dict(), os.path.join(args.out_dir, "state_dict.pt"))
    save(Skip3(), args.out_dir, "skip3.pt")
    save(Functional(), args.out_dir, "functional.pt")
    save(TwoInputs(), args.out_dir, "two_inputs.pt")
    save(DataDependent(), args.out_dir, "data_dependent.pt")
    save(InPlace(), args.out_dir, "in_place.pt")
    save(ReturnsDict(), args.out_dir, "returns_dict.pt")
    save(TiedGpt(), args.out_dir, "tied_gpt.pt")
    save(MlpPatterns(), args.out_dir, "mlp_patterns.pt")
    save(NoParameters(), args.out_dir, "no_parameters.pt")
    save(ReturnsNamedTuple(), args.out_dir, "named_tuple.pt")
    save(ReturnsTuple(), args.out_dir, "tuple.pt")
    save(TupleFromChild(), args.out_dir, "tuple_from_child.pt")
    save(Warns(), args.out_dir, "warns.pt")
    torch.jit.trace(Skip3(), torch.randn(2, 8)).save(os.path.join(args.out_dir, "skip3_traced.pt"))
    resnet18 = torchvision_resnet18()
    if resnet18 is not None:
        save(resnet18, args.out_dir, "resnet18.pt")
        save(torchvision_googlenet(), args.out_dir, "googlenet.pt")
        save(torchvision_vit(), args.out_dir, "vit.pt")
    with open(os.path.join(args.out_dir, "param_counts.json"), "w") as out:
        json.dump(PARAM_COUNTS, out)


if __name__ == "__main__":
    main()
