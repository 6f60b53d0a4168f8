"""The models bench/peers.py runs: what pipeplan trains and what the PyTorch side runs.

A `Subject` names the model for pipeplan (`--model` and `--model-arg`s), builds the nn.Module
the PyTorch peers train, draws its synthetic batches and gives its layers in pipeplan's order
(for torch's Pipe). Three kinds:
  mlp            8 x (Linear(1024, 1024) + ReLU), scripted for pipeplan, the same nn.Module (same
                 weights) for the peers;
  resnet_tiny    pipeplan's zoo model (its C++ layers) against `ResNetTwin`, a PyTorch module of
                 the same architecture (models/resnet.cpp), checked layer by layer against
                 `pipeplan models --model resnet_tiny --json`; weights are initialised alike, not
                 equal;
  FILE.pt        a TorchScript file: pipeplan trains the file, the peers train torch.jit.load of
                 the same file (same weights, torch's default graph executor).
Every model takes float32 samples and class targets with cross-entropy, pipeplan's synthetic data.
"""
import functools
import json
import os
import subprocess
import sys

import torch
from torch import nn

MLP_WIDTH = 1024
MLP_LAYERS = 8

# pipeplan's zoo resnet_tiny (models/resnet.cpp, resnet_entries): CIFAR stem, one basic block
# per stage, base width 16, 1 x 28 x 28 inputs (Fashion-MNIST), 10 classes.
RESNET_TINY = {"in_channels": 1, "image_size": 28, "num_classes": 10, "width": 16,
               "blocks": (1, 1, 1, 1), "imagenet_stem": False}
BOTTLENECK_EXPANSION = 4


def pipeplan_json(pipeplan, *arguments):
    """`pipeplan ARGUMENTS --json`, parsed; exits with pipeplan's output when it fails."""
    command = [pipeplan, *arguments, "--json"]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"peers.py: {' '.join(command)} failed ({result.returncode}):\n{result.stdout}")
    return json.loads(result.stdout)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(MLP_WIDTH, MLP_WIDTH), nn.ReLU())
                           for _ in range(MLP_LAYERS)])


def conv_bn(in_channels, out_channels, kernel, stride):
    """A bias-free conv with "same" padding for odd kernels, Kaiming-normal (fan_out, ReLU) as
    pipeplan's make_conv, and its BatchNorm."""
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2,
                     bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv, nn.BatchNorm2d(out_channels)


class Stem(nn.Module):
    def __init__(self, in_channels, width, imagenet):
        super().__init__()
        self.conv, self.bn = conv_bn(in_channels, width, 7 if imagenet else 3, 2 if imagenet else 1)
        self.max_pool = imagenet

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return nn.functional.max_pool2d(x, 3, 2, 1) if self.max_pool else x


class ResidualBlock(nn.Module):
    """BasicBlock or Bottleneck (stride on the 3x3 conv), pipeplan's ResidualBlock."""

    def __init__(self, in_channels, planes, stride, bottleneck):
        super().__init__()
        if bottleneck:
            shapes = [(in_channels, planes, 1, 1), (planes, planes, 3, stride),
                      (planes, planes * BOTTLENECK_EXPANSION, 1, 1)]
        else:
            shapes = [(in_channels, planes, 3, stride), (planes, planes, 3, 1)]
        self.convs, self.bns = nn.ModuleList(), nn.ModuleList()
        for shape in shapes:
            conv, bn = conv_bn(*shape)
            self.convs.append(conv)
            self.bns.append(bn)
        out_channels = shapes[-1][1]
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(*conv_bn(in_channels, out_channels, 1, stride))

    def forward(self, x):
        out = x
        for conv_idx, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            out = bn(conv(out))
            if conv_idx + 1 < len(self.convs):
                out = torch.relu(out)
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class Head(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.fc(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def resnet_twin(config, bottleneck=False):
    """pipeplan's build_resnet in PyTorch: one child per pipeplan layer (stem, blocks, head)."""
    torch.manual_seed(0)
    layers = [Stem(config["in_channels"], config["width"], config["imagenet_stem"])]
    in_channels = config["width"]
    for stage_idx, num_blocks in enumerate(config["blocks"]):
        planes = config["width"] << stage_idx
        for block_idx in range(num_blocks):
            stride = 2 if stage_idx > 0 and block_idx == 0 else 1
            layers.append(ResidualBlock(in_channels, planes, stride, bottleneck))
            in_channels = planes * BOTTLENECK_EXPANSION if bottleneck else planes
    layers.append(Head(in_channels, config["num_classes"]))
    return nn.Sequential(*layers)


def parameter_count(module):
    return sum(p.numel() for p in module.parameters())


class Subject:
    """One model of the comparison. `make()` builds a fresh module for a PyTorch peer (a new
    process or a new round); `pipe_layers(module)` its pipeplan layers in order, or None when
    they are not the module's children (a Sequential's, named as pipeplan's layers)."""

    def __init__(self, description, pipeplan_model, model_args, sample_shape, num_classes, make,
                 children_are_layers=False):
        self.description = description
        self.pipeplan_model = pipeplan_model  # a zoo name or a TorchScript path
        self.model_args = model_args  # pipeplan --model-arg KEY=VALUE strings
        self.sample_shape = tuple(sample_shape)  # one sample, without the batch
        self.num_classes = num_classes
        self.make = make  # picklable (DDP's processes build their own)
        # True: the module's children are pipeplan's layers, in order (built so here); False:
        # only where their names are pipeplan's layer names.
        self.children_are_layers = children_are_layers
        self.pipeplan_layer_names = None  # filled by check_layers

    def model_flags(self):
        return ["--model", self.pipeplan_model] + [
            flag for arg in self.model_args for flag in ("--model-arg", arg)]

    def batch(self, batch_size):
        return (torch.randn(batch_size, *self.sample_shape),
                torch.randint(self.num_classes, (batch_size,)))

    def pipe_layers(self, module):
        children = list(module.named_children())
        if self.children_are_layers:
            return [child for _, child in children]
        # Only a Sequential's forward is its children and nothing between them.
        is_sequential = getattr(module, "original_name", type(module).__name__) == "Sequential"
        if not is_sequential or [name for name, _ in children] != self.pipeplan_layer_names:
            return None
        return [child for _, child in children]

    def check_layers(self, pipeplan):
        """Reads pipeplan's layer table of the model; the PyTorch module must have the same
        parameter count (and, where its children are pipeplan's layers, the same count per
        layer). Returns a line with the counts; exits when they differ."""
        table = pipeplan_json(pipeplan, "models", *self.model_flags())
        layers = table["layers"]
        pipeplan_total = sum(layer["parameter_count"] for layer in layers) - sum(
            (len(tie["users"]) - 1) * tie["parameter_count"] for tie in table["ties"])
        module = self.make()
        torch_total = parameter_count(module)
        self.pipeplan_layer_names = [layer["name"] for layer in layers]
        layer_modules = self.pipe_layers(module)
        per_layer, layers_differ = "", False
        if layer_modules is not None and len(layer_modules) != len(layers):
            sys.exit(f"peers.py: refusing to run: {self.description}: pipeplan has {len(layers)} "
                     f"layers, the PyTorch module {len(layer_modules)}")
        if layer_modules is not None and not table["ties"]:
            pairs = [(layer["parameter_count"], parameter_count(child))
                     for layer, child in zip(layers, layer_modules)]
            layers_differ = any(mine != theirs for mine, theirs in pairs)
            per_layer = "; per layer " + ", ".join(
                str(mine) if mine == theirs else f"{mine} vs {theirs}" for mine, theirs in pairs)
        line = (f"{self.description}: {len(layers)} pipeplan layers, parameters pipeplan "
                f"{pipeplan_total}, PyTorch {torch_total}{per_layer}")
        if torch_total != pipeplan_total or layers_differ:
            sys.exit(f"peers.py: refusing to run: the models differ. {line}")
        return line


def shape_arg(shape):
    return "x".join(str(dim) for dim in shape)


def parse_shape(text):
    try:
        shape = [int(dim) for dim in text.split("x")]
    except ValueError:
        shape = []
    if not shape or min(shape) < 1:
        sys.exit(f"peers.py: --input-shape {text!r}: expected one sample's dimensions such as "
                 "'3x32x32' (one float32 input)")
    return shape


def mlp_subject(work):
    path = f"{work}/mlp.pt"
    torch.jit.script(mlp()).save(path)
    return Subject(f"MLP {MLP_LAYERS} x Linear({MLP_WIDTH}, {MLP_WIDTH}) + ReLU", path,
                   [f"input_shape={MLP_WIDTH}"], [MLP_WIDTH], MLP_WIDTH, mlp,
                   children_are_layers=True)


def resnet_tiny_subject():
    config = RESNET_TINY
    return Subject("resnet_tiny (pipeplan's zoo) against its PyTorch twin", "resnet_tiny", [],
                   [config["in_channels"], config["image_size"], config["image_size"]],
                   config["num_classes"], functools.partial(resnet_twin, config),
                   children_are_layers=True)


def load_file(path):
    module = torch.jit.load(path)
    module.train()
    return module


def file_subject(path, input_shape, num_classes):
    """A TorchScript file; input shape from `input_shape` or the file's pipeplan_input_shape
    attribute, classes from `num_classes` or the forward's output."""
    module = load_file(path)
    if input_shape is not None:
        shape = parse_shape(input_shape)
    elif hasattr(module, "pipeplan_input_shape"):
        shape = list(module.pipeplan_input_shape)
    else:
        sys.exit(f"peers.py: --model {path!r}: give --input-shape (one sample, e.g. 3x32x32); "
                 "the file carries no pipeplan_input_shape")
    if not all(isinstance(dim, int) for dim in shape):
        sys.exit(f"peers.py: --model {path!r}: a forward of several inputs is not supported")
    if getattr(module, "pipeplan_input_dtype", "float32") != "float32":
        sys.exit(f"peers.py: --model {path!r}: only float32 inputs (images, features) with class "
                 "targets and cross-entropy are supported")
    module.eval()
    try:
        with torch.no_grad():
            output = module(torch.randn(2, *shape))
    except RuntimeError as error:
        message = str(error).strip().splitlines()[-1]
        sys.exit(f"peers.py: --model {path!r}: a forward of 2 samples of {shape_arg(shape)} "
                 f"failed: {message}; check --input-shape")
    if output.dim() != 2:
        sys.exit(f"peers.py: --model {path!r}: the output has shape {list(output.shape)}; "
                 "expected [batch, classes] logits for cross-entropy")
    if num_classes is not None and not 1 <= num_classes <= output.shape[1]:
        sys.exit(f"peers.py: --classes {num_classes}: the model has {output.shape[1]} logits; "
                 f"expected 1 to {output.shape[1]}")
    args = [f"input_shape={shape_arg(shape)}"]
    if num_classes is not None:
        args.append(f"num_classes={num_classes}")
    return Subject(f"TorchScript {path}, input {shape_arg(shape)} float32", path, args, shape,
                   num_classes or output.shape[1], functools.partial(load_file, path))


def subject(model, work, input_shape, num_classes):
    """The Subject for peers.py's --model (mlp, resnet_tiny or a .pt path)."""
    if model in ("mlp", "resnet_tiny") and (input_shape or num_classes):
        sys.exit(f"peers.py: --input-shape and --classes are for a TorchScript file, not "
                 f"--model {model}")
    if model == "mlp":
        return mlp_subject(work)
    if model == "resnet_tiny":
        return resnet_tiny_subject()
    if model.endswith((".pt", ".pth")) or "/" in model:
        if not os.path.isfile(model):
            sys.exit(f"peers.py: --model {model!r}: no such file")
        return file_subject(os.path.abspath(model), input_shape, num_classes)
    sys.exit(f"peers.py: --model {model!r}: expected mlp, resnet_tiny (the zoo model with a "
             "PyTorch twin here) or a TorchScript file (a path ending in .pt)")
